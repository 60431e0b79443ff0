//! A point on a stream that other streams, or the host, can wait for.

use std::sync::Arc;

use super::FenceApi;
use crate::EventApi;
use crate::driver::DriverError;
use crate::events::owned::OwnedEvent;
use crate::events::pool::{EventPool, PooledEvent};
use crate::fence::kept_event::KeptEvent;

/// The event behind a fence: its own (kept for reuse by the backend when
/// dropped), or one on loan from a [`FencePool`].
enum FenceEvent<A: EventApi> {
    Owned(KeptEvent<A>),
    Pooled(PooledEvent<A>),
}

impl<A: EventApi> FenceEvent<A> {
    fn raw(&self) -> &A::Event {
        match self {
            Self::Owned(event) => event.raw(),
            Self::Pooled(event) => event.raw(),
        }
    }
}

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
    point: Result<FenceEvent<A>, DriverError>,
}

impl<A: FenceApi> EventFence<A> {
    /// Record a point on `stream`, after everything queued there so far.
    ///
    /// Its event is of the stream's context, whatever the thread's current
    /// one: an idle one of that context, kept from a fence dropped before,
    /// where the backend keeps them (CUDA, HIP, OpenCL keep a bounded
    /// number per backend; see
    /// [`release_idle_events`](crate::process::release_idle_events)), else a new one.
    pub fn new(stream: A::Stream) -> Self {
        Self::kept(KeptEvent::recorded(stream))
    }

    /// As [`new`](Self::new), on the caller's word that `stream`'s context
    /// is current on this thread, as a CubeCL server's is (each of its
    /// commands makes its context current first): where the backend can
    /// rely on it (CUDA), the record skips asking the driver which context
    /// is current, one driver call fewer. The event is the stream's
    /// context's whatever the word, so a wrong one still gives the driver
    /// a record of an event and a stream of one context. CUDA's
    /// documentation asks no more, but drivers have refused such a record
    /// with another context current (cuda-api-wrappers #314): a record
    /// refused as an invalid handle is made again with the stream's
    /// context bound.
    ///
    /// ```
    /// use device_events_core::{EventApi, EventFence, sim::Sim};
    ///
    /// let stream = Sim::stream_create_non_blocking()?;
    /// Sim::enqueue_work(stream, std::time::Duration::from_micros(200));
    /// EventFence::<Sim>::new_in_current(stream).wait_sync()?;
    /// # Sim::stream_destroy(stream)?;
    /// # Ok::<(), device_events_core::DriverError>(())
    /// ```
    pub fn new_in_current(stream: A::Stream) -> Self {
        Self::kept(KeptEvent::recorded_in_current(stream))
    }

    /// The fence of an event kept whatever the record's outcome: dropped
    /// with the fence, it goes back to the backend's idle events.
    fn kept(made: Result<(KeptEvent<A>, Result<(), DriverError>), DriverError>) -> Self {
        let point = match made {
            Ok((event, Ok(()))) => Ok(FenceEvent::Owned(event)),
            Ok((_, Err(err))) | Err(err) => Err(err),
        };
        Self { point }
    }
}

impl<A: EventApi> EventFence<A> {
    fn record(point: Result<FenceEvent<A>, DriverError>, stream: A::Stream) -> Self {
        let point = point.and_then(|point| A::event_record(point.raw(), stream).map(|()| point));
        Self { point }
    }

    /// Make `stream` wait on the device until the point is reached; the host
    /// does not block for the device's work, except on HIP while another
    /// thread destroys the fenced stream: then this waits on the host for
    /// that destroy to return, as
    /// [`EventApi::stream_wait_event`] says.
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

/// Events kept for fences, so that a fence in steady state creates and
/// destroys none: half of a fence's driver calls are its event's creation and
/// release.
///
/// A pool belongs to one context (one device): its events are made in the
/// context current when the pool first needs one, and a backend refuses to
/// record an event on a stream of another context. Keep one per context,
/// beside the streams it serves.
///
/// ```
/// use device_events_core::{EventApi, FencePool, sim::Sim};
///
/// let stream = Sim::stream_create_non_blocking()?;
/// let pool = FencePool::<Sim>::new();
/// for _ in 0..3 {
///     pool.fence(stream).wait_sync()?;
/// }
/// assert_eq!(pool.idle(), 1, "one event served all three fences");
/// # drop(pool);
/// # Sim::stream_destroy(stream)?;
/// # Ok::<(), device_events_core::DriverError>(())
/// ```
pub struct FencePool<A: EventApi> {
    events: Arc<EventPool<A>>,
}

impl<A: EventApi> Default for FencePool<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: crate::api::EventQuery> EventFence<A> {
    /// Whether the device has passed the fence, without waiting: for a
    /// server that polls instead of parking a thread.
    ///
    /// ```
    /// use device_events_core::{EventApi, EventFence, OwnedStream, sim::Sim};
    /// use std::time::Duration;
    ///
    /// let stream = OwnedStream::<Sim>::new()?;
    /// Sim::enqueue_work(stream.get(), Duration::from_millis(20));
    /// let fence = EventFence::<Sim>::new(stream.get());
    /// assert!(!fence.is_complete()?);
    /// fence.wait_sync()?;
    /// assert!(fence.is_complete()?);
    /// # Ok::<(), device_events_core::DriverError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The error the fence's creation or record met, or the driver's.
    pub fn is_complete(&self) -> Result<bool, DriverError> {
        A::event_query(self.event()?)
    }
}

impl<A: EventApi> FencePool<A> {
    /// An empty pool keeping up to 1024 idle events.
    pub fn new() -> Self {
        Self {
            events: EventPool::new(1024),
        }
    }

    /// Events idle in the pool.
    pub fn idle(&self) -> usize {
        self.events.idle()
    }
}

impl<A: FenceApi> FencePool<A> {
    /// A fence on `stream`, as [`EventFence::new`], with a pooled event that
    /// goes back to the pool when the fence is dropped. A new one is made
    /// as a fence's are (without timing, in the stream's context).
    pub fn fence(&self, stream: A::Stream) -> EventFence<A> {
        let event = self
            .events
            .take_or(|| A::fence_event(stream).map(OwnedEvent::adopt));
        EventFence::record(event.map(FenceEvent::Pooled), stream)
    }
}

impl<A: EventApi> std::fmt::Debug for FencePool<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencePool")
            .field("backend", &A::BACKEND)
            .field("idle", &self.idle())
            .finish()
    }
}
