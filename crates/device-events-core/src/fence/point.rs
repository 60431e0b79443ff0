//! A window's recorded start or end: an event of its own, or one it shares
//! with the next window of a chain, recorded once for both.

use std::sync::Arc;

use crate::EventApi;
use crate::fence::event_pool::PooledEvent;
use crate::fence::owned_event::OwnedEvent;

pub(crate) enum Point<A: EventApi> {
    /// An event of the profiler's pool that the window holds alone; the
    /// window's inputs give it back.
    Own(OwnedEvent<A>),
    /// The boundary of two chained windows; back to the pool with the last.
    Shared(Arc<PooledEvent<A>>),
    /// Given back already, as the inputs holding it are dropped.
    Returned,
}

impl<A: EventApi> Point<A> {
    pub(crate) fn raw(&self) -> &A::Event {
        match self {
            Self::Own(event) => event.raw(),
            Self::Shared(event) => event.raw(),
            Self::Returned => unreachable!("a point is returned only as it is dropped"),
        }
    }

    /// The event of its own, leaving the point returned.
    pub(crate) fn take_own(&mut self) -> Option<OwnedEvent<A>> {
        match std::mem::replace(self, Self::Returned) {
            Self::Own(event) => Some(event),
            other => {
                *self = other;
                None
            }
        }
    }
}
