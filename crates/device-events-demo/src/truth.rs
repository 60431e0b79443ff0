//! On the software driver, where each window truly began and ended: the
//! driver's own stamps of the events the profiler recorded, put on this
//! host's BOOTTIME and REALTIME, for `cargo xtask test` to hold the merged
//! timeline's placed ends against.

use libloading::Library;

type LastRecorded = unsafe extern "C" fn() -> *mut std::ffi::c_void;
type EventTruth = unsafe extern "C" fn(*mut std::ffi::c_void, *mut u64) -> i32;
type HostNow = unsafe extern "C" fn() -> u64;

/// The software driver's control API, opened from the library the
/// bindings loaded (`SOFT_DRIVER_LIB`, set by `cargo xtask`).
pub struct Truth {
    lib: Library,
}

/// One end of a window, truly, on this host's clocks.
#[derive(Clone, Copy)]
pub struct TrueEnd {
    pub boottime_ns: u64,
    pub realtime_ns: u64,
}

/// Where the driver's host clock lies on this host's clocks: offsets read
/// between two MONOTONIC reads, and how far apart those were.
pub struct Pairing {
    to_boottime: i128,
    to_realtime: i128,
    /// The two brackets' widths, together: how far the pairing may be off.
    pub width_ns: u64,
}

impl Truth {
    /// The driver's control API, where the demo runs on it; `None` on a
    /// real driver, or where it cannot be opened.
    pub fn open(soft: bool) -> Option<Truth> {
        let path = std::env::var_os("SOFT_DRIVER_LIB").filter(|_| soft)?;
        // SAFETY: the software driver, already loaded by the bindings:
        // opening it again runs no initialiser.
        let lib = unsafe { Library::new(path) }.ok()?;
        let truth = Truth { lib };
        // All three symbols, or none of this.
        truth
            .symbol::<LastRecorded>(b"soft_driver_last_recorded_event\0")
            .and(truth.symbol::<EventTruth>(b"soft_driver_event_truth_ns\0"))
            .and(truth.symbol::<HostNow>(b"soft_driver_host_now_ns\0"))
            .map(|_| truth)
    }

    fn symbol<T: Copy>(&self, name: &[u8]) -> Option<T> {
        // SAFETY: each name is the driver's function of that type.
        unsafe { self.lib.get::<T>(name) }.ok().map(|f| *f)
    }

    /// The event the calling thread recorded last.
    pub fn last_recorded(&self) -> usize {
        self.symbol::<LastRecorded>(b"soft_driver_last_recorded_event\0")
            // SAFETY: takes nothing, reads the driver's own state.
            .map_or(0, |f| unsafe { f() } as usize)
    }

    /// When the device reached `event`, on the driver's host clock; `None`
    /// for an event it does not know or has not reached.
    pub fn event_ns(&self, event: usize) -> Option<u64> {
        let f = self.symbol::<EventTruth>(b"soft_driver_event_truth_ns\0")?;
        let mut ns = 0;
        // SAFETY: `ns` is writable; the driver only looks the handle up.
        (unsafe { f(event as *mut std::ffi::c_void, &mut ns) } == 0).then_some(ns)
    }

    /// The driver's host clock paired with this host's BOOTTIME and
    /// REALTIME, each the tightest of 64 brackets.
    pub fn pairing(&self) -> Option<Pairing> {
        let host_now = self.symbol::<HostNow>(b"soft_driver_host_now_ns\0")?;
        // SAFETY: takes nothing, reads a clock.
        let driver = tightest(|| i128::from(unsafe { host_now() }));
        let boottime = tightest(|| i128::from(now_ns(libc::CLOCK_BOOTTIME)));
        let realtime = tightest(|| i128::from(now_ns(libc::CLOCK_REALTIME)));
        Some(Pairing {
            to_boottime: boottime.0 - driver.0,
            to_realtime: realtime.0 - driver.0,
            width_ns: driver.1 + boottime.1.max(realtime.1),
        })
    }
}

impl Pairing {
    /// The driver's `ns` on this host's clocks.
    pub fn place(&self, ns: u64) -> TrueEnd {
        let at = |offset: i128| u64::try_from(i128::from(ns) + offset).unwrap_or(0);
        TrueEnd {
            boottime_ns: at(self.to_boottime),
            realtime_ns: at(self.to_realtime),
        }
    }
}

/// `read`'s clock less MONOTONIC, from the tightest of 64 brackets of it
/// between two MONOTONIC reads; and that bracket's width.
fn tightest(mut read: impl FnMut() -> i128) -> (i128, u64) {
    let mut best = (0, u64::MAX);
    for _ in 0..64 {
        let before = now_ns(libc::CLOCK_MONOTONIC);
        let value = read();
        let after = now_ns(libc::CLOCK_MONOTONIC);
        let width = after.saturating_sub(before);
        if width < best.1 {
            best = (value - i128::from(before + width / 2), width);
        }
    }
    best
}

fn now_ns(clock: libc::clockid_t) -> u64 {
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

/// This host's BOOTTIME now.
pub fn boottime_ns() -> u64 {
    now_ns(libc::CLOCK_BOOTTIME)
}
