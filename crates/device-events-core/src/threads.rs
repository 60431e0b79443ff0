//! The library's own threads, started in one place so that a test can
//! refuse a start, as a process at its thread limit does.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static REFUSING: AtomicBool = AtomicBool::new(false);
static REFUSED: AtomicUsize = AtomicUsize::new(0);
/// Set for good by [`stop_driver_calls`].
static STOPPING: AtomicBool = AtomicBool::new(false);
/// The library's threads inside a piece of work that calls the driver.
static WORKING: AtomicUsize = AtomicUsize::new(0);

/// A library thread's hold while it works in the driver.
pub(crate) struct Working(());

impl Drop for Working {
    fn drop(&mut self) {
        WORKING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Leave to work in the driver, or `None` once [`stop_driver_calls`] ran:
/// the thread then makes no driver call, and releases nothing.
pub(crate) fn working() -> Option<Working> {
    // Counted before the flag is read, as the flag is set before the count
    // is read: either this thread sees the stop, or the stop sees it.
    WORKING.fetch_add(1, Ordering::SeqCst);
    let working = Working(());
    (!STOPPING.load(Ordering::SeqCst)).then_some(working)
}

/// Whether [`stop_driver_calls`] ran.
pub(crate) fn stopping() -> bool {
    STOPPING.load(Ordering::SeqCst)
}

/// Stop the library's threads (the calibrator and the resolver) from
/// calling the driver, for good, and wait at most `timeout` for the calls
/// they are in; whether none is left. For the process's exit, before its
/// handlers unload the driver: `device-events-cuda` and `-hip` call it from
/// an exit handler registered once the driver is loaded. Afterwards
/// windows not yet read resolve to `None` and calibrations never run;
/// nothing more is released (the process is ending).
///
/// ```standalone_crate
/// use std::time::Duration;
///
/// // At the end of `main`, or in an exit handler of your own:
/// assert!(device_events_core::stop_driver_calls(Duration::from_millis(100)));
/// ```
pub fn stop_driver_calls(timeout: std::time::Duration) -> bool {
    STOPPING.store(true, Ordering::SeqCst);
    let deadline = std::time::Instant::now() + timeout;
    while WORKING.load(Ordering::SeqCst) > 0 {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    true
}

/// Start `body` on a thread named `name`.
pub(crate) fn start(name: &str, body: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    if REFUSING.load(Ordering::Relaxed) {
        REFUSED.fetch_add(1, Ordering::Relaxed);
        return Err(std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            "thread start refused by refuse_thread_starts",
        ));
    }
    std::thread::Builder::new()
        .name(name.into())
        .spawn(body)
        .map(drop)
}

/// Refuse every start of the library's threads (the calibrator and the
/// resolver) until called with `false`: what a process at its thread limit
/// sees, for fault sweeps. A thread already running keeps running. Returns
/// how many starts were refused since the last call.
///
/// ```
/// use device_events_core::{EventApi, EventProfiler, refuse_thread_starts, sim::Sim};
///
/// let _sim = Sim::exclusive();
/// let stream = Sim::stream_create_non_blocking()?;
/// refuse_thread_starts(true);
/// let mut profiler = EventProfiler::<Sim>::new();
/// let window = profiler.start(stream);
/// // No calibrator thread, so no anchor: the window fails, at once.
/// assert!(profiler.stop(stream, window).is_err());
/// refuse_thread_starts(false);
/// # drop(profiler);
/// # Sim::stream_destroy(stream)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(feature = "sim")]
pub fn refuse_thread_starts(refuse: bool) -> usize {
    REFUSING.store(refuse, Ordering::Relaxed);
    REFUSED.swap(0, Ordering::Relaxed)
}

/// Whether any of the library's threads is up in this process: a few
/// seconds after the last profiler is dropped and its work is done, none
/// is.
///
/// ```
/// // No profiler yet, so no thread.
/// assert!(!device_events_core::library_threads_running());
/// ```
pub fn library_threads_running() -> bool {
    crate::calibrator::running() || crate::resolver::resolver_running()
}
