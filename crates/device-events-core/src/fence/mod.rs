//! Fences: a point recorded on a stream that other streams, or the host,
//! wait for. The events they are made of live in `events/`.

pub(crate) mod event_fence;
pub(crate) mod kept_event;

use crate::EventApi;
use crate::driver::DriverError;

/// How a backend reuses fences' events. Every [`RawApi`](crate::backend::RawApi)
/// backend has it from the checked layer, which keeps idle events per
/// context. A type made over [`EventApi`] directly (a test double, a
/// wrapper) implements it itself; the defaults make a new event for each
/// fence and destroy it after.
///
/// ```
/// use device_events_core::{EventApi, EventFence, backend::FenceApi, sim::Sim};
///
/// let stream = Sim::stream_create_non_blocking()?;
/// let mut event = Sim::fence_event(stream)?;
/// // The simulated backend keeps none: the event comes back, to destroy.
/// let mut event = Sim::keep_event(event).expect("not kept");
/// Sim::event_destroy(&mut event)?;
/// let (mut event, recorded) = Sim::fence_recorded(stream)?;
/// recorded?;
/// Sim::event_destroy(&mut event)?;
/// EventFence::<Sim>::new(stream).wait_sync()?;
/// # Sim::stream_destroy(stream)?;
/// # Ok::<(), device_events_core::DriverError>(())
/// ```
pub trait FenceApi: EventApi {
    /// An event for a fence on `stream`: an idle one of the stream's
    /// context, kept from a fence that was dropped, or a new one. The
    /// default makes a new one, in the thread's current context.
    ///
    /// # Errors
    ///
    /// The driver's refusal of a new event.
    fn fence_event(stream: Self::Stream) -> Result<Self::Event, DriverError> {
        let _ = stream;
        Self::event_create()
    }

    /// An event for a fence on `stream`, as [`fence_event`](Self::fence_event),
    /// recorded there, with the record's outcome: the fence keeps the
    /// event either way, and gives it back when dropped. A checked backend
    /// looks the stream up once for both. `Err` when there is no event.
    ///
    /// # Errors
    ///
    /// As [`fence_event`](Self::fence_event); the record's error is the
    /// inner one.
    fn fence_recorded(
        stream: Self::Stream,
    ) -> Result<(Self::Event, Result<(), DriverError>), DriverError> {
        let event = Self::fence_event(stream)?;
        let recorded = Self::event_record(&event, stream);
        Ok((event, recorded))
    }

    /// [`fence_recorded`](Self::fence_recorded), on the caller's word that
    /// `stream`'s context is current on this thread, as
    /// [`ThreadApi::event_record_in_current`](crate::backend::ThreadApi::event_record_in_current)
    /// takes it: where the backend can rely on it, the record skips asking
    /// the driver which context is current (one driver call). The event is
    /// the stream's context's either way, so even a wrong word gives the
    /// driver a record of an event and a stream of one context; one the
    /// driver refuses as an invalid handle (drivers have, with another
    /// context current) is made again with the stream's context bound. The
    /// default is [`fence_recorded`](Self::fence_recorded).
    ///
    /// # Errors
    ///
    /// As [`fence_recorded`](Self::fence_recorded).
    fn fence_recorded_in_current(
        stream: Self::Stream,
    ) -> Result<(Self::Event, Result<(), DriverError>), DriverError> {
        Self::fence_recorded(stream)
    }

    /// Keep a dropped fence's event for [`fence_event`](Self::fence_event);
    /// `Some` gives it back, to be destroyed. The default keeps none.
    fn keep_event(event: Self::Event) -> Option<Self::Event> {
        Some(event)
    }

    /// Whether `stream` captures a graph now (its capture active, or
    /// invalidated and not yet ended): where it does, a host wait in place
    /// of a stream wait would leave the graph without the ordering. The
    /// default, for a backend without capture, says no.
    ///
    /// # Errors
    ///
    /// The driver's refusal to say, or a stream that is not live.
    fn stream_captures(stream: Self::Stream) -> Result<bool, DriverError> {
        let _ = stream;
        Ok(false)
    }
}
