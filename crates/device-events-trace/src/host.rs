//! The host's clocks and identity as the kernel states them: the three
//! clocks a Perfetto trace relates (MONOTONIC, BOOTTIME, REALTIME), the NTP
//! state's or AWS ClockBound's stated error against UTC, and which machine
//! and boot this is.

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
    /// REALTIME's maximum error against UTC: ClockBound's bound where its
    /// daemon runs, else the kernel's (`maxerror`).
    pub max_error: Duration,
    /// The kernel's estimated error (`esterror`); ClockBound's bound where
    /// its daemon runs, which states no estimate apart.
    pub est_error: Duration,
    /// False when the kernel says the clock is unsynchronised
    /// (`STA_UNSYNC`, or `TIME_ERROR`): REALTIME then states no bound
    /// against UTC, and a file written with it cannot be lined up with
    /// another machine's.
    pub synchronised: bool,
}

/// Where AWS ClockBound's daemon keeps its shared memory: version 2's
/// segment, then version 1's.
const CLOCKBOUND_PATHS: [&str; 2] = ["/var/run/clockbound/shm0", "/var/run/clockbound/shm"];

/// ClockBound's segment signature (its `PROTOCOL.md`).
const CLOCKBOUND_MAGIC: [u8; 8] = [0x41, 0x4D, 0x5A, 0x4E, 0x43, 0x42, 0x02, 0x00];

impl HostClock {
    /// The host clock's stated error now: ClockBound's bound where its
    /// daemon runs (its shared memory under `/var/run/clockbound`), else
    /// the kernel's NTP state; `None` where neither can be read.
    pub fn read() -> Option<HostClock> {
        CLOCKBOUND_PATHS
            .iter()
            .find_map(HostClock::from_clockbound)
            .or_else(HostClock::from_adjtimex)
    }

    /// The bound ClockBound's daemon states in its shared memory at `path`
    /// (protocol version 1 or 2), grown by its maximum drift since it was
    /// computed. Unsynchronised where the daemon says the clock is not
    /// synchronised or the bound is past its void-after time. `None` where
    /// the file is missing, not a ClockBound segment, or mid-update.
    #[doc(hidden)]
    pub fn from_clockbound(path: impl AsRef<std::path::Path>) -> Option<HostClock> {
        // A segment is a page; its fields lie in its first 80 bytes.
        let mut bytes = [0u8; 80];
        let mut file = std::fs::File::open(path).ok()?;
        let len = read_up_to(&mut file, &mut bytes);
        clockbound(&bytes[..len], now_ns(libc::CLOCK_MONOTONIC_COARSE))
    }

    /// The kernel's NTP state (`adjtimex`); `None` where it cannot be read.
    fn from_adjtimex() -> Option<HostClock> {
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

/// Fill `buffer` from `file` as far as it goes; how much was read.
fn read_up_to(file: &mut std::fs::File, buffer: &mut [u8]) -> usize {
    use std::io::Read;
    let mut len = 0;
    while len < buffer.len() {
        match file.read(&mut buffer[len..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => len += n,
        }
    }
    len
}

/// A ClockBound segment's bound at `now` (CLOCK_MONOTONIC_COARSE
/// nanoseconds), its fields in this CPU's byte order.
fn clockbound(bytes: &[u8], now: u64) -> Option<HostClock> {
    let field = |at: usize, n: usize| bytes.get(at..at + n);
    let u16_at = |at| Some(u16::from_ne_bytes(field(at, 2)?.try_into().ok()?));
    let u32_at = |at| Some(u32::from_ne_bytes(field(at, 4)?.try_into().ok()?));
    let i32_at = |at| Some(i32::from_ne_bytes(field(at, 4)?.try_into().ok()?));
    let i64_at = |at| Some(i64::from_ne_bytes(field(at, 8)?.try_into().ok()?));
    let timespec = |at| {
        let (secs, nanos) = (i64_at(at)?, i64_at(at + 8)?);
        let secs = u64::try_from(secs).ok()?;
        let nanos = u64::try_from(nanos).ok().filter(|n| *n < 1_000_000_000)?;
        secs.checked_mul(1_000_000_000)?.checked_add(nanos)
    };
    if field(0, 8)? != CLOCKBOUND_MAGIC {
        return None;
    }
    // Odd while the daemon writes it.
    if u16_at(14)? % 2 == 1 {
        return None;
    }
    let (drift_at, status_at) = match u16_at(12)? {
        1 => (56, 64),
        2 => (64, 68),
        _ => return None,
    };
    let (as_of, void_after) = (timespec(16)?, timespec(32)?);
    let bound = u64::try_from(i64_at(48)?).ok()?;
    let drift_ppb = u64::from(u32_at(drift_at)?);
    let grown = now.saturating_sub(as_of).saturating_mul(drift_ppb) / 1_000_000_000;
    let error = Duration::from_nanos(bound.saturating_add(grown));
    Some(HostClock {
        max_error: error,
        est_error: error,
        // 1: synchronised; unknown, free running and disrupted are not.
        synchronised: i32_at(status_at)? == 1 && now <= void_after,
    })
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
    /// The tightest of a few tries: a preempted one is passed over.
    pub(crate) fn take() -> Snapshot {
        let once = || {
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
        };
        let mut best = once();
        for _ in 1..8 {
            let next = once();
            if next.spread < best.spread {
                best = next;
            }
        }
        best
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
