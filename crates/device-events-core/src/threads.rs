//! The library's own threads, started in one place so that a test can
//! refuse a start, as a process at its thread limit does.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static REFUSING: AtomicBool = AtomicBool::new(false);
static REFUSED: AtomicUsize = AtomicUsize::new(0);

/// Start `body` on a thread named `name`.
pub(crate) fn start(name: &str, body: fn()) -> std::io::Result<()> {
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
