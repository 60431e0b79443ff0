//! A backend unchanged but for being told of each record: how a check reads
//! a driver's own timestamps of events the code under test owns.

use std::marker::PhantomData;
use std::time::Duration;

use device_events_core::backend::{AnchorApi, EventQuery, FenceApi, Gate, HostStamp, ThreadApi};
use device_events_core::{DriverError, EventApi};

/// Told of each event right after the backend recorded it.
pub trait Note<A: EventApi>: Send + Sync + 'static {
    /// `event` was just recorded.
    fn recorded(event: &A::Event);
}

/// Backend `A`, calling `N::recorded` after each successful record, and
/// otherwise exactly `A`.
pub struct Noting<A, N>(PhantomData<fn() -> (A, N)>);

impl<A: EventApi, N: Note<A>> EventApi for Noting<A, N> {
    type Event = A::Event;
    type Stream = A::Stream;
    const BACKEND: &'static str = A::BACKEND;

    fn event_create() -> Result<A::Event, DriverError> {
        A::event_create()
    }
    fn event_destroy(event: &mut A::Event) -> Result<(), DriverError> {
        A::event_destroy(event)
    }
    fn event_record(event: &A::Event, stream: A::Stream) -> Result<(), DriverError> {
        A::event_record(event, stream)?;
        N::recorded(event);
        Ok(())
    }
    fn event_wait(event: &A::Event) -> Result<(), DriverError> {
        A::event_wait(event)
    }
    fn event_elapsed(start: &A::Event, end: &A::Event) -> Result<Duration, DriverError> {
        A::event_elapsed(start, end)
    }
    fn stream_wait_event(stream: A::Stream, event: &A::Event) -> Result<(), DriverError> {
        A::stream_wait_event(stream, event)
    }
    fn stream_synchronize(stream: A::Stream) -> Result<(), DriverError> {
        A::stream_synchronize(stream)
    }
    fn stream_create_non_blocking() -> Result<A::Stream, DriverError> {
        A::stream_create_non_blocking()
    }
    fn stream_destroy(stream: A::Stream) -> Result<(), DriverError> {
        A::stream_destroy(stream)
    }
}

impl<A: AnchorApi, N: Note<A>> AnchorApi for Noting<A, N> {
    fn gate(stream: A::Stream) -> Result<Option<Box<dyn Gate>>, DriverError> {
        A::gate(stream)
    }
    fn pairing(event: &A::Event) -> Result<Option<HostStamp>, DriverError> {
        A::pairing(event)
    }
    fn poll(event: &A::Event) -> Option<Result<bool, DriverError>> {
        A::poll(event)
    }
}

impl<A: EventQuery, N: Note<A>> EventQuery for Noting<A, N> {
    fn event_query(event: &A::Event) -> Result<bool, DriverError> {
        A::event_query(event)
    }
}

/// Fences make a new event each, as the default does.
impl<A: EventApi, N: Note<A>> FenceApi for Noting<A, N> {}

impl<A: ThreadApi, N: Note<A>> ThreadApi for Noting<A, N> {
    fn in_context_of<T>(stream: A::Stream, call: impl FnOnce() -> T) -> Result<T, DriverError> {
        A::in_context_of(stream, call)
    }
    fn own_thread() {
        A::own_thread();
    }
    fn stream_key(stream: A::Stream) -> Option<u64> {
        A::stream_key(stream)
    }
    fn context_key(stream: A::Stream) -> Option<u64> {
        A::context_key(stream)
    }
}
