//! A client for the software driver's control API, reached through
//! `libloading` from the library `cargo xtask` laid out.

use std::ffi::{CString, c_char, c_void};
use std::sync::{Mutex, MutexGuard, PoisonError};

use libloading::Library;

/// Names the software driver library file; `cargo xtask test-cuda --soft`,
/// `test-hip --soft` and `test` set it, as does a test binary's start on
/// the software driver ([`start`](crate::start)).
pub const LIB_VAR: &str = "SOFT_DRIVER_LIB";

/// Set by `cargo xtask test-cuda`/`test-hip` and the bundles' `run.sh` when
/// the machine's real driver is under test.
pub const REAL_VAR: &str = "DEVICE_EVENTS_REAL_DRIVER";

/// What a test says when it has nothing to check on the driver under test
/// (a real one, for a check that reads the software driver's counts):
/// `SKIP: <why>` on its output, which the GPU kit's `run.sh` reports as a
/// skip, not a pass.
pub fn skip(why: &str) {
    println!("SKIP: {why}");
}

/// Counts the driver keeps: mirrors the driver's `SoftCounts`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Events created and not destroyed.
    pub events: u64,
    /// Streams created and not destroyed.
    pub streams: u64,
    /// Device allocations not freed.
    pub allocations: u64,
    /// Retained primary contexts.
    pub contexts: u64,
    /// Graphs ended and not destroyed.
    pub graphs: u64,
    /// Misuses: any use of a handle that was not live (destroyed, unknown,
    /// released twice), and calls on handles of a torn-down context.
    pub misuses: u64,
    /// Calls of exported driver functions since the last reset.
    pub calls: u64,
}

/// The software driver, loaded for its control API.
#[derive(Debug)]
pub struct SoftDriver {
    lib: Library,
}

static EXCLUSIVE: Mutex<()> = Mutex::new(());

/// Exclusive use of the driver's process-wide counters and injections.
///
/// Dropped at the end of a test, it asserts that the driver saw no misuse
/// meanwhile (a handle used that was not live) beyond what the test said
/// it expects with [`allow_misuses`](Self::allow_misuses).
#[derive(Debug)]
pub struct Exclusive<'a> {
    /// The driver.
    pub driver: &'a SoftDriver,
    misuses_before: u64,
    misuses_allowed: std::cell::Cell<u64>,
    _lock: MutexGuard<'static, ()>,
}

impl Exclusive<'_> {
    /// The test misuses the driver `n` times on purpose.
    pub fn allow_misuses(&self, n: u64) {
        self.misuses_allowed.set(n);
    }
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let misuses = self.driver.counts().misuses - self.misuses_before;
        assert_eq!(
            misuses,
            self.misuses_allowed.get(),
            "the driver was handed handles that were not live"
        );
    }
}

impl std::ops::Deref for Exclusive<'_> {
    type Target = SoftDriver;
    fn deref(&self) -> &SoftDriver {
        self.driver
    }
}

impl SoftDriver {
    /// The driver named by [`LIB_VAR`], opened once per process: the same
    /// library the bindings load, so its state is theirs.
    ///
    /// # Errors
    ///
    /// A sentence saying what is missing, when the variable is unset or the
    /// library cannot be opened.
    pub fn get() -> Result<&'static Self, String> {
        static DRIVER: std::sync::OnceLock<Result<SoftDriver, String>> = std::sync::OnceLock::new();
        DRIVER
            .get_or_init(|| {
                let path = std::env::var_os(LIB_VAR).ok_or_else(|| {
                    format!(
                        "{LIB_VAR} is not set: start the test binary with \
                         `tests_run_on_the_software_driver!()`, or run it through \
                         `cargo xtask test`; either builds the software driver and points \
                         the loaders at it"
                    )
                })?;
                // SAFETY: the software driver's initialisers only set up
                // lazily-built statics; loading it runs no other code.
                let lib = unsafe { Library::new(&path) }
                    .map_err(|e| format!("cannot open the software driver at {path:?}: {e}"))?;
                Ok(Self { lib })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The driver, for one test at a time, with injections and call counts
    /// reset.
    ///
    /// # Panics
    ///
    /// When the driver cannot be loaded: a test that needs it must fail
    /// loudly, never pass without it.
    #[allow(clippy::panic)]
    pub fn exclusive() -> Exclusive<'static> {
        let driver = Self::get().unwrap_or_else(|e| panic!("{e}"));
        let lock = EXCLUSIVE.lock().unwrap_or_else(PoisonError::into_inner);
        driver.reset();
        Exclusive {
            driver,
            misuses_before: driver.counts().misuses,
            misuses_allowed: std::cell::Cell::new(0),
            _lock: lock,
        }
    }

    /// For a suite that runs on either driver: `None` when
    /// `DEVICE_EVENTS_REAL_DRIVER` is set (the machine's driver is under
    /// test), else the software driver, exclusively.
    ///
    /// # Panics
    ///
    /// As [`exclusive`](Self::exclusive), when the software driver is needed
    /// and cannot be loaded.
    pub fn unless_real() -> Option<Exclusive<'static>> {
        (std::env::var_os(REAL_VAR).is_none()).then(Self::exclusive)
    }

    /// A function the driver exports (an ABI call, for a check that makes
    /// calls the backends do not wrap), or `None`.
    ///
    /// # Safety
    ///
    /// `T` is the C signature of the function of that name in its ABI.
    pub unsafe fn function<T: Copy>(&self, name: &[u8]) -> Option<T> {
        // SAFETY: as the caller promises.
        unsafe { self.lib.get::<T>(name) }.ok().map(|f| *f)
    }

    /// A control function. A driver without it fails the test: a count or
    /// an injection that silently does nothing would let a check pass
    /// vacuously.
    #[allow(clippy::panic)]
    fn symbol<T: Copy>(&self, name: &[u8]) -> T {
        // SAFETY: each caller names a control function and gives the type of
        // its C signature, as the driver's `control` module declares it.
        match unsafe { self.lib.get::<T>(name) } {
            Ok(symbol) => *symbol,
            Err(err) => panic!(
                "the software driver lacks its control function {}: {err}",
                String::from_utf8_lossy(name).trim_end_matches('\0')
            ),
        }
    }

    /// Make the `nth` next call of `function` return `status`.
    /// Returns false if the driver refused (unknown status for that ABI).
    pub fn fail_call(&self, function: &str, nth: u32, status: i32) -> bool {
        self.inject(b"soft_driver_fail_call\0", function, nth, status)
    }

    /// As [`fail_call`](Self::fail_call) with any nonzero status, including
    /// codes newer than any ABI table: what a newer driver returns.
    pub fn fail_call_any(&self, function: &str, nth: u32, status: i32) -> bool {
        self.inject(b"soft_driver_fail_call_any\0", function, nth, status)
    }

    /// As [`fail_call`](Self::fail_call), counting only calls made on
    /// other threads than this one: the library's own.
    pub fn fail_call_elsewhere(&self, function: &str, nth: u32, status: i32) -> bool {
        self.inject(b"soft_driver_fail_call_elsewhere\0", function, nth, status)
    }

    /// As [`fail_call`](Self::fail_call), counting only calls made on
    /// this thread: a test's own, whatever the library's threads call
    /// meanwhile (a refresh's record, a release's drain).
    pub fn fail_call_here(&self, function: &str, nth: u32, status: i32) -> bool {
        self.inject(b"soft_driver_fail_call_here\0", function, nth, status)
    }

    fn inject(&self, control: &[u8], function: &str, nth: u32, status: i32) -> bool {
        type F = unsafe extern "C" fn(*const c_char, u32, i32) -> i32;
        let f = self.symbol::<F>(control);
        let Ok(name) = CString::new(function) else {
            return false;
        };
        // SAFETY: `name` is a live NUL-terminated string.
        unsafe { f(name.as_ptr(), nth, status) == 0 }
    }

    /// How many times `function` was called since the last reset.
    pub fn call_count(&self, function: &str) -> u64 {
        type F = unsafe extern "C" fn(*const c_char) -> u64;
        let f = self.symbol::<F>(b"soft_driver_call_count\0");
        let Ok(name) = CString::new(function) else {
            return 0;
        };
        // SAFETY: `name` is a live NUL-terminated string.
        unsafe { f(name.as_ptr()) }
    }

    /// Driver calls the calling thread has made since it began (the
    /// library's own threads' calls are not among them).
    pub fn thread_calls(&self) -> u64 {
        type F = unsafe extern "C" fn() -> u64;
        let f = self.symbol::<F>(b"soft_driver_thread_calls\0");
        // SAFETY: takes nothing, reads a thread-local counter.
        unsafe { f() }
    }

    /// Forget injections and call counts.
    pub fn reset(&self) {
        type F = unsafe extern "C" fn();
        let f = self.symbol::<F>(b"soft_driver_reset\0");
        // SAFETY: takes nothing, touches only the driver's own state.
        unsafe { f() }
    }

    /// Live handles and calls, now.
    ///
    /// Calibrations in flight end first: a profiler dropped during one
    /// releases its anchor's events and stream as it ends. Fence events
    /// kept for reuse are released first too.
    pub fn counts(&self) -> Counts {
        type F = unsafe extern "C" fn(*mut Counts) -> i32;
        if !device_events_core::process::wait_for_calibrations(std::time::Duration::from_secs(30)) {
            eprintln!("a calibration did not end within 30 s");
        }
        device_events_core::process::release_idle_events();
        let mut counts = Counts::default();
        let f = self.symbol::<F>(b"soft_driver_counts\0");
        // SAFETY: `counts` is a live, writable value of the mirrored layout.
        unsafe { f(&mut counts) };
        counts
    }

    /// The driver functions called since the last reset, in order of first call.
    pub fn called(&self) -> Vec<String> {
        type F = unsafe extern "C" fn(*mut c_char, usize) -> usize;
        let f = self.symbol::<F>(b"soft_driver_called\0");
        // SAFETY: a null buffer only asks for the length.
        let len = unsafe { f(std::ptr::null_mut(), 0) };
        let mut buffer = vec![0u8; len + 1];
        // SAFETY: `buffer` is writable for `len + 1` bytes.
        unsafe { f(buffer.as_mut_ptr().cast(), buffer.len()) };
        buffer.truncate(len);
        String::from_utf8_lossy(&buffer)
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// The driver's host clock, in nanoseconds since it loaded.
    pub fn host_now_ns(&self) -> u64 {
        type F = unsafe extern "C" fn() -> u64;
        // SAFETY: takes nothing, reads a clock.
        unsafe { self.symbol::<F>(b"soft_driver_host_now_ns\0")() }
    }

    /// When, on the driver's host clock, the device reached `event`: the
    /// address of a raw `CUevent` or `hipEvent_t`, which the driver only
    /// looks up.
    pub fn event_truth_ns(&self, event: usize) -> Option<u64> {
        type F = unsafe extern "C" fn(*mut c_void, *mut u64) -> i32;
        let f = self.symbol::<F>(b"soft_driver_event_truth_ns\0");
        let mut ns = 0;
        // SAFETY: `ns` is writable; the driver only looks the handle up.
        (unsafe { f(event as *mut c_void, &mut ns) } == 0).then_some(ns)
    }

    /// The address of the event most recently recorded, by either ABI.
    pub fn last_recorded_event(&self) -> usize {
        type F = unsafe extern "C" fn() -> *mut c_void;
        // SAFETY: takes nothing, reads the driver's own state.
        unsafe { self.symbol::<F>(b"soft_driver_last_recorded_event\0")() as usize }
    }

    /// The driver's host clock as an [`std::time::Instant`]: the offset
    /// between the two, read with the tightest of a few brackets. Both are
    /// the monotonic clock, so the offset holds for the process's life.
    pub fn host_instant(&self, ns: u64) -> std::time::Instant {
        type F = unsafe extern "C" fn() -> u64;
        let now = std::time::Instant::now();
        let read = self.symbol::<F>(b"soft_driver_host_now_ns\0");
        let mut best = (std::time::Duration::MAX, now, 0);
        for _ in 0..64 {
            let before = std::time::Instant::now();
            // SAFETY: takes nothing, reads a clock.
            let reading = unsafe { read() };
            let width = before.elapsed();
            if width < best.0 {
                best = (width, before + width / 2, reading);
            }
        }
        let (_, at, reading) = best;
        if ns >= reading {
            at + std::time::Duration::from_nanos(ns - reading)
        } else {
            at - std::time::Duration::from_nanos(reading - ns)
        }
    }

    /// Set the device clock's offset from the host clock and its drift.
    pub fn set_clock(&self, offset_ns: i64, drift_ppm: f64) {
        type F = unsafe extern "C" fn(i64, f64);
        let f = self.symbol::<F>(b"soft_driver_set_clock\0");
        // SAFETY: plain values; the driver stores them.
        unsafe { f(offset_ns, drift_ppm) }
    }

    /// Set the launch latency: at least `least_ns`, a uniform jitter of up
    /// to `jitter_ns` more, and for `tail_percent` of operations up to
    /// `tail_ns` more still.
    pub fn set_launch_latency(
        &self,
        least_ns: u64,
        jitter_ns: u64,
        tail_percent: u64,
        tail_ns: u64,
    ) {
        type F = unsafe extern "C" fn(u64, u64, u64, u64);
        let f = self.symbol::<F>(b"soft_driver_set_launch_latency\0");
        // SAFETY: plain values; the driver stores them.
        unsafe { f(least_ns, jitter_ns, tail_percent, tail_ns) }
    }

    /// Set how late a blocking-synchronization wait wakes, in ns.
    pub fn set_blocking_wake_ns(&self, ns: u64) {
        type F = unsafe extern "C" fn(u64);
        let f = self.symbol::<F>(b"soft_driver_set_blocking_wake_ns\0");
        // SAFETY: a plain value; the driver stores it.
        unsafe { f(ns) }
    }

    /// Turn the devices' stream memory operations (the anchor's gate) on
    /// or off; on by default.
    pub fn set_stream_mem_ops(&self, on: bool) {
        type F = unsafe extern "C" fn(i32);
        let f = self.symbol::<F>(b"soft_driver_set_stream_mem_ops\0");
        // SAFETY: a plain value; the driver stores it.
        unsafe { f(i32::from(on)) }
    }

    /// Stream waits on a value that are queued and held now.
    pub fn blocked_value_waits(&self) -> u64 {
        type F = unsafe extern "C" fn() -> u64;
        let f = self.symbol::<F>(b"soft_driver_blocked_value_waits\0");
        // SAFETY: no arguments; the driver counts.
        unsafe { f() }
    }

    /// What stream waits on a value have cost since the last reset:
    /// how long they held their streams, and the work of other streams
    /// they held on a shared hardware queue.
    pub fn value_waits_held(&self) -> Held {
        type F = unsafe extern "C" fn(*mut Held) -> i32;
        let f = self.symbol::<F>(b"soft_driver_value_waits_held\0");
        let mut held = Held::default();
        // SAFETY: `held` is writable and laid out as the driver's.
        unsafe { f(&mut held) };
        held
    }

    /// Calls a capture's interaction mode prohibited, since the process
    /// began: each failed and invalidated the capture.
    pub fn capture_violations(&self) -> u64 {
        type F = unsafe extern "C" fn() -> u64;
        let f = self.symbol::<F>(b"soft_driver_capture_violations\0");
        // SAFETY: no arguments; the driver counts.
        unsafe { f() }
    }

    /// Map each device's streams made from now on onto `queues` hardware
    /// queues in turn (0: one per stream, the default).
    pub fn set_hw_queues(&self, queues: u32) {
        type F = unsafe extern "C" fn(u32);
        let f = self.symbol::<F>(b"soft_driver_set_hw_queues\0");
        // SAFETY: a plain value; the driver stores it.
        unsafe { f(queues) }
    }

    /// Set how long the HIP ABI's `hipEventDestroy` and `hipStreamWaitEvent`
    /// take between checking the stream of the event's last record and
    /// using it, as clr does with no lock held (0, the default: no gap); a
    /// destroy of that stream that begins in between is counted as a
    /// misuse. Reset by [`reset`](Self::reset).
    pub fn set_check_to_use_ns(&self, ns: u64) {
        type F = unsafe extern "C" fn(u64);
        let f = self.symbol::<F>(b"soft_driver_set_check_to_use_ns\0");
        // SAFETY: a plain value; the driver stores it.
        unsafe { f(ns) }
    }

    /// How many calls have entered the gap of
    /// [`set_check_to_use_ns`](Self::set_check_to_use_ns) since load: past
    /// their check of the event's stream, not yet at its use.
    pub fn check_to_use_gaps(&self) -> u64 {
        type F = unsafe extern "C" fn() -> u64;
        let f = self.symbol::<F>(b"soft_driver_check_to_use_gaps\0");
        // SAFETY: no arguments; the driver counts.
        unsafe { f() }
    }

    /// Set the memset speed, in bytes per second.
    pub fn set_bandwidth(&self, bytes_per_second: f64) {
        type F = unsafe extern "C" fn(f64);
        let f = self.symbol::<F>(b"soft_driver_set_bandwidth\0");
        // SAFETY: a plain value; the driver stores it.
        unsafe { f(bytes_per_second) }
    }
}

/// What stream waits on a value have cost (the software driver's
/// `SoftHeld`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// Waits passed.
    pub waits: u64,
    /// How long they held their streams once the device reached them, ns.
    pub held_ns: u64,
    /// The longest any one held its stream, ns.
    pub held_max_ns: u64,
    /// Operations of other streams held behind them on a shared hardware
    /// queue.
    pub delayed: u64,
    /// How long those were held past their start, ns.
    pub delayed_ns: u64,
    /// The longest any one was held past its start, ns.
    pub delayed_max_ns: u64,
    /// How long the driver's own host threads, which stand in for the
    /// device, kept that work past its start beside the waits' hold (a
    /// stream's worker reaching a wait late, or waking late behind it), ns:
    /// a GPU's queue adds none of it.
    pub driver_late_ns: u64,
    /// The longest the driver's own threads kept any one, ns.
    pub driver_late_max_ns: u64,
    /// The longest a waiting stream's worker went between its last look
    /// that found the wait shut and the look that passed it, ns: how late,
    /// at most, it may have seen the host's write.
    pub look_gap_max_ns: u64,
}

/// Live events on the software driver; 0 when it is not loaded.
pub fn live_events() -> u64 {
    SoftDriver::get().map_or(0, |driver| driver.counts().events)
}

/// Live events and misuses so far on the software driver.
///
/// # Panics
///
/// When the software driver is not loaded.
#[allow(clippy::panic)]
pub fn events_and_misuses() -> (u64, u64) {
    let counts = SoftDriver::get().unwrap_or_else(|e| panic!("{e}")).counts();
    (counts.events, counts.misuses)
}

/// What the software driver saw of a process's exit, from its exit
/// handler: misuses over the process's life, calls in flight as the
/// handler began, and calls made after. All zero when no thread was in the
/// driver as it tore itself down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExitReport {
    /// Misuses since the process began, the two below among them.
    pub misuses: u64,
    /// Calls in flight as the driver's exit handler began.
    pub in_flight: u64,
    /// Calls made after it began (refused with DEINITIALIZED).
    pub after_exit: u64,
}

/// Run the ignored test `child` of the current test binary in a process
/// of its own, which ends through `std::process::exit` (its exit handlers
/// run, the driver's last), and read what the driver saw of that exit.
///
/// # Panics
///
/// When the child did not exit with status 0 within 60 s, or the driver
/// wrote no report.
#[allow(clippy::panic, clippy::expect_used)]
pub fn exit_report(child: &str) -> ExitReport {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let report =
        std::env::temp_dir().join(format!("device-events-exit-{}-{n}.txt", std::process::id()));
    let _ = std::fs::remove_file(&report);
    let mut process = std::process::Command::new(std::env::current_exe().expect("this test"))
        .args(["--exact", child, "--ignored", "--test-threads=1"])
        .env("SOFT_DRIVER_EXIT_REPORT", &report)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("a process for the child test");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = process.try_wait().expect("the child's status") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = process.kill();
            let _ = process.wait();
            panic!("{child} did not exit within 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert!(status.success(), "{child} failed: {status}");
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("the driver wrote no exit report for {child}: {e}"));
    let _ = std::fs::remove_file(&report);
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in the exit report: {text}"))
    };
    ExitReport {
        misuses: field("misuses "),
        in_flight: field("in_flight "),
        after_exit: field("after_exit "),
    }
}

/// A fresh folder holding the software driver under `names` only, as a
/// real install lays its driver out (`libcuda.so.1` and no `libcuda.so`,
/// say): how a backend's search is tested against an install's layout.
///
/// # Panics
///
/// When [`LIB_VAR`] is unset or the folder cannot be made.
#[allow(clippy::panic, clippy::expect_used)]
pub fn laid_out_as(names: &[&str]) -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let lib = std::env::var_os(LIB_VAR).unwrap_or_else(|| panic!("{LIB_VAR} is not set"));
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("device-events-layout-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    for name in names {
        std::os::unix::fs::symlink(&lib, dir.join(name)).expect("a symlink");
    }
    dir
}

#[cfg(test)]
mod tests {
    use super::Counts;
    use std::mem::{offset_of, size_of};

    /// The layout of the driver's `SoftCounts`, pinned on both sides (the
    /// driver's test asserts the same offsets).
    #[test]
    fn the_counts_layout_mirrors_the_drivers() {
        assert_eq!(
            [
                offset_of!(Counts, events),
                offset_of!(Counts, streams),
                offset_of!(Counts, allocations),
                offset_of!(Counts, contexts),
                offset_of!(Counts, graphs),
                offset_of!(Counts, misuses),
                offset_of!(Counts, calls),
                size_of::<Counts>(),
            ],
            [0, 8, 16, 24, 32, 40, 48, 56]
        );
    }
}
