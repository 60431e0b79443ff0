//! A point on a stream that other streams, or the host, can wait for.

use crate::EventApi;
use crate::driver::DriverError;
use crate::event::OwnedEvent;

/// A point recorded on a stream when the fence is made.
///
/// Creation never fails and never panics: a driver that refuses the event or
/// the record leaves that error in the fence, and the first wait returns it.
/// That keeps the call site where work is enqueued free of error plumbing,
/// while the place that depends on the point still learns it is not there.
///
/// Dropped, waited or not, the fence releases its event exactly once; a
/// release the driver refuses is logged under the backend's name.
///
/// ```
/// use device_events_core::{EventApi, EventFence, sim::Sim};
///
/// let producer = Sim::stream_create_non_blocking()?;
/// let consumer = Sim::stream_create_non_blocking()?;
/// Sim::enqueue_work(producer, std::time::Duration::from_micros(200));
///
/// let fence = EventFence::<Sim>::new(producer);
/// // The consumer's later work starts after the producer's; the host runs on.
/// fence.wait_async(consumer)?;
/// // Or the host blocks until the producer's work is done.
/// fence.wait_sync()?;
/// # drop(fence);
/// # Sim::stream_destroy(producer)?;
/// # Sim::stream_destroy(consumer)?;
/// # Ok::<(), device_events_core::DriverError>(())
/// ```
pub struct EventFence<A: EventApi> {
    point: Result<OwnedEvent<A>, DriverError>,
}

impl<A: EventApi> EventFence<A> {
    /// Record a point on `stream`, after everything queued there so far.
    pub fn new(stream: A::Stream) -> Self {
        let point = OwnedEvent::<A>::create()
            .and_then(|event| A::event_record(event.raw(), stream).map(|()| event));
        Self { point }
    }

    /// Make `stream` wait on the device until the point is reached; the host
    /// does not block.
    ///
    /// # Errors
    ///
    /// The error that kept the point from being recorded, or the driver's
    /// refusal of the dependency.
    pub fn wait_async(&self, stream: A::Stream) -> Result<(), DriverError> {
        A::stream_wait_event(stream, self.event()?)
    }

    /// Block the host until the device has reached the point.
    ///
    /// # Errors
    ///
    /// The error that kept the point from being recorded, or the fault the
    /// wait revealed on the fenced stream.
    pub fn wait_sync(&self) -> Result<(), DriverError> {
        A::event_wait(self.event()?)
    }

    /// The error met while recording the point, if any.
    pub fn error(&self) -> Option<&DriverError> {
        self.point.as_ref().err()
    }

    fn event(&self) -> Result<&A::Event, DriverError> {
        match &self.point {
            Ok(event) => Ok(event.raw()),
            Err(err) => Err(err.clone()),
        }
    }
}

impl<A: EventApi> std::fmt::Debug for EventFence<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventFence")
            .field("backend", &A::BACKEND)
            .field("error", &self.error())
            .finish()
    }
}
