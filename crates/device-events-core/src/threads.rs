//! The library's own threads, started in one place so that a test can
//! refuse a start, as a process at its thread limit does.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::EventApi;
use crate::driver::DriverError;

/// What the library's threads need of a backend: its contexts and capture
/// modes, and who a stream and its device are. Every
/// [`RawApi`](crate::backend::RawApi) backend has it from the checked
/// layer. A type made over [`EventApi`] directly (a test double, a
/// wrapper) implements it itself; every method has a default, for a
/// backend without contexts.
///
/// ```
/// use device_events_core::{EventApi, backend::ThreadApi, sim::Sim};
///
/// let stream = Sim::stream_create_non_blocking()?;
/// // A simulated stream has an identity, and its calls need no context.
/// assert!(Sim::stream_key(stream).is_some());
/// assert_eq!(Sim::in_context_of(stream, || 7)?, 7);
/// # Sim::stream_destroy(stream)?;
/// # Ok::<(), device_events_core::DriverError>(())
/// ```
pub trait ThreadApi: EventApi<Stream: Send + Sync> {
    /// Run `call` on this thread with `stream`'s context current, then
    /// give the thread back its own: how a calibration, taken on the
    /// library's thread, makes its events in the profiler's context.
    /// The default runs `call` as it is, for a backend whose calls need no
    /// current context.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the stream is not live or the context could not
    /// be bound; `call` did not run.
    fn in_context_of<T>(stream: Self::Stream, call: impl FnOnce() -> T) -> Result<T, DriverError> {
        let _ = stream;
        Ok(call())
    }

    /// [`EventApi::event_record`], on the caller's word that `stream`'s
    /// context is current on this thread: where the backend can rely on
    /// it, the record skips asking the driver which context is (one
    /// driver call). For a caller that keeps its context current, as a
    /// CubeCL server's thread does (each of its commands makes its
    /// context current first); a profiler says so with
    /// [`ProfilerConfig::context_current`](crate::ProfilerConfig::context_current).
    /// The default records as [`EventApi::event_record`] does.
    ///
    /// A caller whose word is wrong gets what the driver does with a
    /// record on a stream whose context is not current: CUDA's
    /// documentation asks only that the event and the stream be of one
    /// context, and some drivers are reported to refuse such a record
    /// (cuda-api-wrappers#314), which then reads as the window's error.
    /// The backend takes the word only for a stream that names its own
    /// context ([`RawApi::records_in_own_context`](crate::backend::RawApi::records_in_own_context)),
    /// and never for an event and a stream of different contexts.
    ///
    /// ```
    /// use device_events_core::{EventApi, backend::ThreadApi, tally::Tally};
    ///
    /// Tally::set_current(Some(1));
    /// let stream = Tally::stream_create_non_blocking()?;
    /// let event = Tally::event_create()?;
    /// let asked = Tally::calls("current");
    /// Tally::event_record_in_current(&event, stream)?; // context 1 is current
    /// assert_eq!(Tally::calls("current"), asked);
    /// assert_eq!(Tally::faults(), 0);
    /// # drop(event);
    /// # Tally::stream_destroy(stream)?;
    /// # Ok::<(), device_events_core::DriverError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`EventApi::event_record`].
    fn event_record_in_current(
        event: &Self::Event,
        stream: Self::Stream,
    ) -> Result<(), DriverError> {
        Self::event_record(event, stream)
    }

    /// Called on the library's own threads (the resolver, the
    /// calibrator) before their driver calls: such a thread takes part in
    /// no graph capture, so a backend with capture modes makes it relaxed
    /// for good, and its queries and waits never invalidate a user's
    /// capture elsewhere in the process. Cheap after the first call.
    fn own_thread() {}

    /// A stream's identity while it lives: the windows one profiler ends
    /// on one stream end in that order, so the resolver thread asks only
    /// the first of those pending. `None` (the default) has each window
    /// asked on its own.
    fn stream_key(stream: Self::Stream) -> Option<u64> {
        let _ = stream;
        None
    }

    /// The identity of a stream's context (its device): each device's
    /// anchors are taken on a thread of its own, so that one stuck behind
    /// a long kernel, or a hung device, delays no other device's. `None`
    /// (the default) shares one thread with every such backend's.
    fn context_key(stream: Self::Stream) -> Option<u64> {
        let _ = stream;
        None
    }
}

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
/// handlers unload the driver: `device-events-cuda`, `-hip` and `-opencl`
/// call it from an exit handler registered once the driver is loaded.
/// Afterwards windows not yet read resolve to `None` and calibrations
/// never run; nothing more is released (the process is ending: an anchor
/// stream, a gate's word or events in use then are left to it).
///
/// Where the backend can ask without waiting (CUDA, HIP, OpenCL), the
/// library's threads make no driver call that waits on the device: they
/// ask, and sleep briefly between asks (the bounds are the crate's
/// `src/tunables.rs`), looking for this stop each time. A calibration
/// behind a long kernel, or a dropped profiler's release, is left within
/// one such sleep, however long its work.
///
/// ```standalone_crate
/// use std::time::Duration;
///
/// // At the end of `main`, or in an exit handler of your own:
/// assert!(device_events_core::process::stop_driver_calls(Duration::from_millis(100)));
/// ```
pub fn stop_driver_calls(timeout: std::time::Duration) -> bool {
    STOPPING.store(true, Ordering::SeqCst);
    // `None`: a timeout past what `Instant` holds, so no deadline.
    let deadline = std::time::Instant::now().checked_add(timeout);
    while WORKING.load(Ordering::SeqCst) > 0 {
        if deadline.is_some_and(|deadline| std::time::Instant::now() >= deadline) {
            return false;
        }
        std::thread::sleep(crate::tunables::exit::STOP_POLL);
    }
    true
}

/// In a fork child: the parent's threads' calls in flight are not the
/// child's, and none of them will end there.
pub(crate) fn forget_the_parents_calls() {
    WORKING.store(0, Ordering::SeqCst);
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
/// use device_events_core::process::refuse_thread_starts;
/// use device_events_core::{EventApi, EventProfiler, sim::Sim};
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
