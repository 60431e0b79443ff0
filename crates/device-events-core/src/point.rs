//! A window's recorded start or end: an event of its own, or one it shares
//! with the next window of a chain, recorded once for both.

use std::sync::Arc;

use crate::EventApi;
use crate::pool::PooledEvent;

pub(crate) enum Point<A: EventApi> {
    Own(PooledEvent<A>),
    /// The boundary of two chained windows; back to the pool with the last.
    Shared(Arc<PooledEvent<A>>),
}

impl<A: EventApi> Point<A> {
    pub(crate) fn raw(&self) -> &A::Event {
        match self {
            Self::Own(event) => event.raw(),
            Self::Shared(event) => event.raw(),
        }
    }
}
