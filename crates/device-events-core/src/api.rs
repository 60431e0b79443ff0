use std::time::Duration;

use crate::driver::DriverError;

/// The device event calls an [`EventFence`](super::EventFence) and an
/// [`EventProfiler`](super::EventProfiler) are built from.
///
/// CUDA and HIP share one event model: a timestamp is queued on a stream, the
/// device stamps it when the stream gets there, and the span between two
/// stamps is read back later. A backend spells those calls once; fence
/// lifetime, profiling windows and the anchor that puts device time on the
/// host clock are written once, in this crate, above them.
///
/// It holds only what those two types need. Memory, launches and modules have
/// seams of their own; growing this trait to cover them would turn it into
/// the device API instead of the device's *event* API.
///
/// # Example
///
/// A fence over the simulated backend (feature `sim`):
///
/// ```
/// use device_events_core::{EventApi, EventFence, sim::Sim};
///
/// let stream = Sim::stream_create_non_blocking()?;
/// let fence = EventFence::<Sim>::new(stream);
/// fence.wait_sync()?;
/// drop(fence);
/// Sim::stream_destroy(stream)?;
/// # Ok::<(), device_events_core::DriverError>(())
/// ```
pub trait EventApi: Send + Sync + 'static {
    /// A timestamp recorded on the device.
    ///
    /// A driver handle, not thread-affine state: it is recorded on one thread
    /// and waited on from another, so each backend asserts `Send + Sync` on
    /// its own newtype, where the argument can be specific.
    type Event: Send + Sync;

    /// The queue an event is recorded into.
    ///
    /// Not bound by `Send`: streams stay with the profiler, inside a server
    /// that the backend already declares `Send` as a whole. Only events travel
    /// between threads on their own.
    type Stream: Copy;

    /// The backend's name, as a reader of a log line sees it.
    const BACKEND: &'static str;

    /// Create an event with timing enabled.
    ///
    /// The timestamp is the point: the flag that would make this a cheaper,
    /// synchronization-only event removes exactly what a profiler reads.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver refuses, which happens when the device
    /// is already failing or out of resources.
    fn event_create() -> Result<Self::Event, DriverError>;

    /// Release an event. Called only from the event's own `Drop`.
    ///
    /// # Errors
    ///
    /// [`DriverError`], which the caller can only log: a destructor has no
    /// one to report to.
    fn event_destroy(event: &mut Self::Event) -> Result<(), DriverError>;

    /// Queue the timestamp on `stream`; returns once it is queued.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the stream refuses it. A stream that is capturing
    /// a graph is the case callers screen for beforehand.
    fn event_record(event: &Self::Event, stream: Self::Stream) -> Result<(), DriverError>;

    /// Block the calling thread until the device has reached `event`.
    ///
    /// # Errors
    ///
    /// [`DriverError`]: the fault the wait uncovered on the event's stream.
    fn event_wait(event: &Self::Event) -> Result<(), DriverError>;

    /// Device time from `start` to `end`; both must have been reached.
    ///
    /// A negative reading is clamped to zero rather than trusted: the device
    /// clock is monotonic, but a negative value would panic the conversion to
    /// [`Duration`], and a profiler is not worth a panic.
    ///
    /// # Errors
    ///
    /// [`DriverError`], including the driver's own "not ready" when either
    /// event has not been reached yet.
    fn event_elapsed(start: &Self::Event, end: &Self::Event) -> Result<Duration, DriverError>;

    /// Make `stream` wait on the device for `event`; the host does not block
    /// for the device's work. One exception, on HIP: while another thread
    /// destroys the stream `event` was last recorded on, the call waits on
    /// the host for that destroy to return (which waits for that stream's
    /// work), and then adds no device wait, the work being done. ROCm's
    /// runtime would silently drop a wait on an event of a stream it is
    /// destroying; a short host wait that a race brings is kept rather
    /// than a dependency lost, or an error every caller would have to
    /// retry. From inside `with_raw` that wait is refused instead.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver refuses the dependency.
    fn stream_wait_event(stream: Self::Stream, event: &Self::Event) -> Result<(), DriverError>;

    /// Block the host until all work queued on `stream` has completed.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when work on the stream failed.
    fn stream_synchronize(stream: Self::Stream) -> Result<(), DriverError>;

    /// Create a stream that does not synchronize with the legacy default one.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver refuses the stream.
    fn stream_create_non_blocking() -> Result<Self::Stream, DriverError>;

    /// Release a stream made by [`stream_create_non_blocking`](Self::stream_create_non_blocking).
    ///
    /// # Errors
    ///
    /// [`DriverError`], which the caller can only log: this runs from a `Drop`.
    fn stream_destroy(stream: Self::Stream) -> Result<(), DriverError>;
}

/// A backend that can tell whether the device has reached an event without
/// waiting for it (`cuEventQuery`, `hipEventQuery`, OpenCL's
/// `CL_EVENT_COMMAND_EXECUTION_STATUS`). Kept apart from [`EventApi`],
/// whose shape is fixed, for the checks that must never block.
pub trait EventQuery: EventApi {
    /// `Ok(true)` once the device has reached the event's last record (or
    /// it was never recorded), `Ok(false)` before; never waits.
    ///
    /// # Errors
    ///
    /// The driver's error for anything but "not ready".
    fn event_query(event: &Self::Event) -> Result<bool, DriverError>;
}
