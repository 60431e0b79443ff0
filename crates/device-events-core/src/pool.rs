//! Recycled timing events, so a profiler in steady state creates none.
//!
//! `cuEventCreate` costs host time and contends across threads; a window needs
//! two events and an anchor one more, so they are kept and reused rather than
//! made per window.

use std::sync::{Arc, Mutex, PoisonError};

use crate::EventApi;
use crate::driver::DriverError;
use crate::event::OwnedEvent;

/// Idle events waiting to be reused, shared by a profiler and the futures it
/// hands out; it outlives both until the last of them is gone.
pub(crate) struct EventPool<A: EventApi> {
    idle: Mutex<Vec<OwnedEvent<A>>>,
    max_idle: usize,
}

impl<A: EventApi> EventPool<A> {
    pub(crate) fn new(max_idle: usize) -> Arc<Self> {
        Arc::new(Self {
            idle: Mutex::new(Vec::new()),
            max_idle,
        })
    }

    /// An idle event, or a new one when none is idle.
    pub(crate) fn take(self: &Arc<Self>) -> Result<PooledEvent<A>, DriverError> {
        self.take_new().map(|(event, _)| event)
    }

    /// As [`take`](Self::take), and whether the event was created for it.
    pub(crate) fn take_new(self: &Arc<Self>) -> Result<(PooledEvent<A>, bool), DriverError> {
        let reused = self.lock().pop();
        let created = reused.is_none();
        let event = match reused {
            Some(event) => event,
            None => OwnedEvent::create()?,
        };
        let event = PooledEvent {
            event: Some(event),
            pool: Arc::clone(self),
        };
        Ok((event, created))
    }

    /// How many events are idle now.
    pub(crate) fn idle(&self) -> usize {
        self.lock().len()
    }

    fn give_back(&self, event: OwnedEvent<A>) {
        let mut idle = self.lock();
        if idle.len() < self.max_idle {
            idle.push(event);
        } else {
            drop(idle);
            drop(event);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<OwnedEvent<A>>> {
        // The vector is valid whatever a panicking holder was doing: a push
        // or a pop either happened or did not.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An event on loan from a pool; it goes back when dropped, on every path.
pub(crate) struct PooledEvent<A: EventApi> {
    /// `Some` from construction until `Drop` takes it.
    event: Option<OwnedEvent<A>>,
    pool: Arc<EventPool<A>>,
}

impl<A: EventApi> PooledEvent<A> {
    pub(crate) fn raw(&self) -> &A::Event {
        match &self.event {
            Some(event) => event.raw(),
            None => unreachable!("a pooled event is only emptied by its own Drop"),
        }
    }
}

impl<A: EventApi> PooledEvent<A> {
    /// Release the event instead of returning it: it is unfit for the pool.
    pub(crate) fn discard(mut self) {
        drop(self.event.take());
    }
}

impl<A: EventApi> Drop for PooledEvent<A> {
    fn drop(&mut self) {
        if let Some(event) = self.event.take() {
            self.pool.give_back(event);
        }
    }
}
