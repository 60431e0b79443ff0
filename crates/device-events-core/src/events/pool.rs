//! Recycled timing events, so a profiler in steady state creates none.
//!
//! `cuEventCreate` costs host time and contends across threads; a window needs
//! two events and an anchor one more, so they are kept and reused rather than
//! made per window.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};

use crate::EventApi;
use crate::driver::DriverError;
use crate::events::owned::OwnedEvent;
use crate::limits::Limits;

/// Idle events waiting to be reused, shared by a profiler and the futures it
/// hands out; it outlives both until the last of them is gone.
pub(crate) struct EventPool<A: EventApi> {
    idle: Mutex<Vec<OwnedEvent<A>>>,
    /// Events two holders share (a chain's boundary), each with its count
    /// of holders: slots are reused, so once warm a share allocates nothing.
    shared: Mutex<Shares<A>>,
    /// How many idle events a taker holds aside (see
    /// [`take_from`](Self::take_from)), counted against `max_idle`.
    aside: AtomicUsize,
    max_idle: usize,
    /// Spent shared states of windows handed to the resolver thread, kept
    /// for the next such window: once warm, handing one over allocates
    /// nothing. Of the waiting layer's type, named here by [`Any`].
    spares: Mutex<Vec<Arc<dyn Any + Send + Sync>>>,
    /// What a profiler's windows are read under: kept here, which every
    /// window holds already, rather than in each window, so a window is
    /// small enough to move without a copy loop.
    pub(crate) limits: Limits,
    /// The profiler whose windows these are (0 for other pools): each
    /// window's lane names it, read here rather than kept in every window.
    pub(crate) profiler: u64,
}

impl<A: EventApi> EventPool<A> {
    pub(crate) fn new(max_idle: usize) -> Arc<Self> {
        Self::for_windows(max_idle, Limits::NONE, 0)
    }

    /// The pool of profiler `profiler`, its windows read under `limits`.
    pub(crate) fn for_windows(max_idle: usize, limits: Limits, profiler: u64) -> Arc<Self> {
        Arc::new(Self {
            idle: Mutex::new(Vec::new()),
            shared: Mutex::new(Shares {
                slots: Vec::new(),
                free: Vec::new(),
            }),
            aside: AtomicUsize::new(0),
            max_idle,
            spares: Mutex::new(Vec::new()),
            limits,
            profiler,
        })
    }

    /// Keep `spare` for [`spare`](Self::spare), up to `max_idle` of them.
    pub(crate) fn keep_spare(&self, spare: Arc<dyn Any + Send + Sync>) {
        let mut spares = self.spares.lock();
        if spares.len() < self.max_idle {
            spares.push(spare);
        }
    }

    /// A kept spare of type `T` that nobody else holds any more, to be
    /// written over; one still held elsewhere (the resolver letting go of
    /// it) stays for a later call.
    pub(crate) fn spare<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let mut spares = self.spares.lock();
        let at = spares.iter().rposition(|spare| {
            (**spare).is::<T>() && Arc::strong_count(spare) == 1 && Arc::weak_count(spare) == 0
        })?;
        let spare = spares.swap_remove(at);
        drop(spares);
        spare.downcast::<T>().ok()
    }

    /// An idle event, or a new one, in the current context, when none is
    /// idle.
    pub(crate) fn take(self: &Arc<Self>) -> Result<PooledEvent<A>, DriverError> {
        self.take_or(OwnedEvent::create)
    }

    /// An idle event, or one from `create` when none is idle.
    pub(crate) fn take_or(
        self: &Arc<Self>,
        create: impl FnOnce() -> Result<OwnedEvent<A>, DriverError>,
    ) -> Result<PooledEvent<A>, DriverError> {
        let reused = self.lock().pop();
        let event = match reused {
            Some(event) => event,
            None => create()?,
        };
        Ok(self.lend(event))
    }

    /// An idle event, else one from `create`, from `aside`: a single
    /// taker's own stock of this pool's idle events. A take needs no lock;
    /// an empty stock takes every event given back since, with one. The
    /// taker gives the event back with [`give_back`](Self::give_back), or
    /// lends it with [`lend`](Self::lend).
    #[inline]
    pub(crate) fn take_from(
        &self,
        aside: &mut Vec<OwnedEvent<A>>,
        create: impl FnOnce() -> Result<OwnedEvent<A>, DriverError>,
    ) -> Result<OwnedEvent<A>, DriverError> {
        if aside.is_empty() {
            self.refill(aside);
        }
        match aside.pop() {
            Some(event) => {
                self.aside.store(aside.len(), Ordering::Relaxed);
                Ok(event)
            }
            None => create(),
        }
    }

    /// Take every idle event into an empty `aside`.
    #[inline(never)]
    fn refill(&self, aside: &mut Vec<OwnedEvent<A>>) {
        let mut idle = self.lock();
        std::mem::swap(&mut *idle, aside);
        // Under the lock that emptied the pool: idle and aside together stay
        // within `max_idle`. Between refills it only shrinks, so a give-back
        // reading an older figure keeps too few, never too many.
        self.aside.store(aside.len(), Ordering::Relaxed);
    }

    /// `event`, of this pool, on loan: it comes back when dropped.
    pub(crate) fn lend(self: &Arc<Self>, event: OwnedEvent<A>) -> PooledEvent<A> {
        PooledEvent {
            event: Some(event),
            pool: Arc::clone(self),
        }
    }

    /// `event`, held by `holders` at once: it goes back to the idle
    /// events as the last lets go ([`release`](Self::release)).
    #[inline]
    pub(crate) fn share(&self, event: OwnedEvent<A>, holders: u32) -> u32 {
        let mut shared = self.shared.lock();
        let slot = Slot {
            event: Some(event),
            holders,
        };
        match shared.free.pop() {
            Some(at) => {
                shared.slots[at as usize] = slot;
                at
            }
            None => {
                shared.slots.push(slot);
                u32::try_from(shared.slots.len() - 1).unwrap_or(u32::MAX)
            }
        }
    }

    /// The shared event at `slot`, taken out to be read without the lock;
    /// `None` while its other holder has it out.
    pub(crate) fn take_shared(&self, slot: u32) -> Option<OwnedEvent<A>> {
        self.shared
            .lock()
            .slots
            .get_mut(slot as usize)
            .and_then(|slot| slot.event.take())
    }

    /// Put back the event [`take_shared`](Self::take_shared) took.
    pub(crate) fn put_back(&self, slot: u32, event: OwnedEvent<A>) {
        let mut shared = self.shared.lock();
        match shared.slots.get_mut(slot as usize) {
            Some(slot) => slot.event = Some(event),
            None => {
                drop(shared);
                drop(event);
            }
        }
    }

    /// One holder of `slot` lets go; the last gives its event back.
    pub(crate) fn release(&self, slot: u32) {
        let mut shared = self.shared.lock();
        let Some(held) = shared.slots.get_mut(slot as usize) else {
            return;
        };
        held.holders = held.holders.saturating_sub(1);
        if held.holders > 0 {
            return;
        }
        let event = held.event.take();
        shared.free.push(slot);
        drop(shared);
        self.give_back([event]);
    }

    /// How many events are idle now, `aside` included.
    pub(crate) fn idle(&self) -> usize {
        self.lock().len() + self.aside.load(Ordering::Relaxed)
    }

    /// Keep `events` for reuse, up to `max_idle`, with one lock; release the
    /// rest.
    #[inline]
    pub(crate) fn give_back<const N: usize>(&self, events: [Option<OwnedEvent<A>>; N]) {
        let mut excess = [const { None }; N];
        let mut idle = self.lock();
        let keep = self
            .max_idle
            .saturating_sub(self.aside.load(Ordering::Relaxed));
        for (event, spot) in events.into_iter().zip(&mut excess) {
            match event {
                Some(event) if idle.len() < keep => idle.push(event),
                event => *spot = event,
            }
        }
        drop(idle);
        drop(excess);
    }

    /// `parking_lot`'s: a lock and unlock with no poisoning to check, on
    /// every window's path. The vector is valid whatever a panicking holder
    /// was doing: a push or a pop either happened or did not.
    fn lock(&self) -> MutexGuard<'_, Vec<OwnedEvent<A>>> {
        self.idle.lock()
    }
}

/// The pool's shared events, in reused slots.
struct Shares<A: EventApi> {
    slots: Vec<Slot<A>>,
    /// Slots no one holds.
    free: Vec<u32>,
}

/// A shared event and how many hold it. `event` is `None` while a holder
/// has it out for a reading, and once the last has let go.
struct Slot<A: EventApi> {
    event: Option<OwnedEvent<A>>,
    holders: u32,
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
            None => unreachable!("a pooled event is only emptied as it is dropped"),
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
            self.pool.give_back([Some(event)]);
        }
    }
}
