//! The host's clocks and identity as the kernel states them: the three
//! clocks a Perfetto trace relates (MONOTONIC, BOOTTIME, REALTIME), the NTP
//! state's stated error against UTC, and which machine and boot this is.

use std::time::{Duration, Instant};

/// Perfetto's builtin clock ids (`builtin_clock.proto`).
pub(crate) const REALTIME: u32 = 1;
pub(crate) const MONOTONIC: u32 = 3;
pub(crate) const BOOTTIME: u32 = 6;

/// The host clock's state against UTC, as the kernel's NTP discipline
/// states it (`adjtimex`).
///
/// ```
/// use device_events_trace::HostClock;
///
/// // Read once per trace: its maximum error bounds how far REALTIME may be
/// // from UTC, unless the kernel says it is unsynchronised.
/// if let Some(clock) = HostClock::read() {
///     if clock.synchronised {
///         assert!(clock.max_error >= clock.est_error);
///     }
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostClock {
    /// The kernel's maximum error of REALTIME against UTC (`maxerror`).
    pub max_error: Duration,
    /// The kernel's estimated error (`esterror`).
    pub est_error: Duration,
    /// False when the kernel says the clock is unsynchronised
    /// (`STA_UNSYNC`, or `TIME_ERROR`): REALTIME then states no bound
    /// against UTC, and a file written with it cannot be lined up with
    /// another machine's.
    pub synchronised: bool,
}

impl HostClock {
    /// The kernel's state now; `None` where it cannot be read.
    pub fn read() -> Option<HostClock> {
        // SAFETY: a zeroed `timex` is a valid argument; `modes` 0 reads only.
        let mut timex: libc::timex = unsafe { std::mem::zeroed() };
        // SAFETY: `timex` is a valid, writable `timex`.
        let state = unsafe { libc::adjtimex(&mut timex) };
        if state < 0 {
            return None;
        }
        let micros = |us: libc::c_long| Duration::from_micros(u64::try_from(us).unwrap_or(0));
        Some(HostClock {
            max_error: micros(timex.maxerror),
            est_error: micros(timex.esterror),
            synchronised: state != libc::TIME_ERROR && timex.status & libc::STA_UNSYNC == 0,
        })
    }
}

/// One clock's reading in nanoseconds; 0 where it cannot be read.
pub(crate) fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec`.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// MONOTONIC, BOOTTIME and REALTIME read together: MONOTONIC is read
/// either side, and `spread` is how long the three reads took.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Snapshot {
    pub(crate) monotonic: u64,
    pub(crate) boottime: u64,
    pub(crate) realtime: u64,
    pub(crate) spread: u64,
}

impl Snapshot {
    pub(crate) fn take() -> Snapshot {
        let before = now_ns(libc::CLOCK_MONOTONIC);
        let boottime = now_ns(libc::CLOCK_BOOTTIME);
        let realtime = now_ns(libc::CLOCK_REALTIME);
        let after = now_ns(libc::CLOCK_MONOTONIC);
        Snapshot {
            monotonic: before + (after.saturating_sub(before)) / 2,
            boottime,
            realtime,
            spread: after.saturating_sub(before),
        }
    }
}

/// Where `Instant`s lie on CLOCK_MONOTONIC, which `Instant` reads on Linux:
/// one `Instant` and its MONOTONIC reading, bracketed as tightly as a few
/// tries allow.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InstantBase {
    instant: Instant,
    monotonic: u64,
}

impl InstantBase {
    pub(crate) fn take() -> InstantBase {
        let mut best: Option<(u64, InstantBase)> = None;
        for _ in 0..8 {
            let before = now_ns(libc::CLOCK_MONOTONIC);
            let instant = Instant::now();
            let after = now_ns(libc::CLOCK_MONOTONIC);
            let width = after.saturating_sub(before);
            if best.is_none_or(|(w, _)| width < w) {
                best = Some((
                    width,
                    InstantBase {
                        instant,
                        monotonic: before + width / 2,
                    },
                ));
            }
        }
        best.map_or(
            InstantBase {
                instant: Instant::now(),
                monotonic: now_ns(libc::CLOCK_MONOTONIC),
            },
            |(_, base)| base,
        )
    }

    /// `instant` in MONOTONIC nanoseconds.
    pub(crate) fn monotonic_ns(&self, instant: Instant) -> u64 {
        match instant.checked_duration_since(self.instant) {
            Some(after) => self
                .monotonic
                .saturating_add(u64::try_from(after.as_nanos()).unwrap_or(u64::MAX)),
            None => self.monotonic.saturating_sub(
                u64::try_from(self.instant.duration_since(instant).as_nanos()).unwrap_or(u64::MAX),
            ),
        }
    }
}

/// Which machine and which boot of it: `/etc/machine-id` and the kernel's
/// boot id, with the host name for people. Empty where unreadable.
#[derive(Clone, Debug, Default)]
pub(crate) struct Identity {
    pub(crate) machine_id: String,
    pub(crate) boot_id: String,
    pub(crate) hostname: String,
}

impl Identity {
    pub(crate) fn read() -> Identity {
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .map(|s| s.trim().to_owned())
                .unwrap_or_default()
        };
        Identity {
            machine_id: read("/etc/machine-id"),
            boot_id: read("/proc/sys/kernel/random/boot_id"),
            hostname: read("/proc/sys/kernel/hostname"),
        }
    }
}

/// The calling thread's kernel id.
pub(crate) fn thread_id() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}
