//! A window's recorded start or end: an event of its own, or one it shares
//! with the next window of a chain, recorded once for both.

use std::sync::Arc;

use crate::EventApi;
use crate::events::owned::OwnedEvent;
use crate::events::pool::EventPool;

pub(crate) enum Point<A: EventApi> {
    /// An event of the profiler's pool that the window holds alone; the
    /// window's inputs give it back.
    Own(OwnedEvent<A>),
    /// The boundary of two chained windows, held in the pool's shared
    /// slots; back to the idle events with the last holder.
    Shared(SharedEvent<A>),
    /// Given back already, as the inputs holding it are dropped.
    Returned,
}

/// One holder's hold on a shared event: the pool (shared already by the
/// profiler and its windows) and the event's slot there, so a share
/// allocates nothing.
pub(crate) struct SharedEvent<A: EventApi> {
    pool: Arc<EventPool<A>>,
    slot: u32,
}

impl<A: EventApi> SharedEvent<A> {
    /// `event` shared by two holders: the window it closes and the one it
    /// opens.
    #[inline]
    pub(crate) fn pair(pool: &Arc<EventPool<A>>, event: OwnedEvent<A>) -> (Self, Self) {
        let slot = pool.share(event, 2);
        let hold = || Self {
            pool: Arc::clone(pool),
            slot,
        };
        (hold(), hold())
    }
}

impl<A: EventApi> Drop for SharedEvent<A> {
    fn drop(&mut self) {
        self.pool.release(self.slot);
    }
}

/// A point's event, at hand for a reading; a shared one goes back to its
/// slot when this is dropped.
pub(crate) enum Lent<'a, A: EventApi> {
    Own(&'a OwnedEvent<A>),
    Shared(&'a SharedEvent<A>, Option<OwnedEvent<A>>),
}

impl<A: EventApi> Lent<'_, A> {
    pub(crate) fn raw(&self) -> &A::Event {
        match self {
            Self::Own(event) => event.raw(),
            Self::Shared(_, Some(event)) => event.raw(),
            Self::Shared(_, None) => unreachable!("a lent event is only emptied as it is dropped"),
        }
    }
}

impl<A: EventApi> Drop for Lent<'_, A> {
    fn drop(&mut self) {
        if let Self::Shared(shared, event) = self
            && let Some(event) = event.take()
        {
            shared.pool.put_back(shared.slot, event);
        }
    }
}

impl<A: EventApi> Point<A> {
    /// The point's event for a reading, or `None` while the other holder of
    /// a shared one is reading it.
    pub(crate) fn lend(&self) -> Option<Lent<'_, A>> {
        match self {
            Self::Own(event) => Some(Lent::Own(event)),
            Self::Shared(shared) => shared
                .pool
                .take_shared(shared.slot)
                .map(|event| Lent::Shared(shared, Some(event))),
            Self::Returned => None,
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
