//! A closed window's future: read at once when the device is past its
//! end, else handed to the resolver thread, which asks without waiting.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};

use crate::anchoring::AnchorApi;
use crate::events::pool::EventPool;
use crate::placement::Placement;
use crate::waiting::reading::{Inputs, Unread, end_reached, placement_or_none, read_window};
use crate::waiting::resolver::{self, Answer, Attempt, Job, Lane};

/// A closed window: a future resolving to its [`Placement`] once the
/// device has reached its end, or to `None` (logged) when it could not be
/// read.
///
/// From [`EventProfiler::stop`](crate::EventProfiler::stop) and
/// [`split`](crate::EventProfiler::split). Not boxed: closing a window and
/// reading it allocates nothing. Polling it never blocks: a window the
/// device has not reached is asked after by the library's resolver thread,
/// which wakes the task.
#[must_use = "a window's events go back only when its reading is dropped"]
pub struct PlacedWindow<A: AnchorApi> {
    pub(crate) resolving: Resolving<A>,
}

impl<A: AnchorApi> PlacedWindow<A> {
    /// The window's placement once the device has reached its end, or
    /// `None` (logged) when it could not be read.
    pub async fn resolve(self) -> Option<Placement> {
        self.await
    }

    /// The placement if the window can be read now, without waiting:
    /// `None` while the device has not reached its end (the resolver thread
    /// then asks for it, without waiting, until it has), `Some` with the
    /// reading once it has. After a
    /// `Some`, the window is spent: `resolve` gives `None`.
    ///
    /// ```
    /// use device_events_core::{EventApi, EventProfiler, OwnedStream, sim::Sim};
    /// use std::time::Duration;
    ///
    /// let stream = OwnedStream::<Sim>::new()?;
    /// let mut profiler = EventProfiler::<Sim>::new();
    /// let window = profiler.start(stream.get());
    /// Sim::enqueue_work(stream.get(), Duration::from_millis(20));
    /// let mut window = profiler.stop(stream.get(), window)?;
    /// assert!(window.try_resolve().is_none(), "20 ms of work still queued");
    /// let placed = loop {
    ///     // A server would do other work here instead of sleeping.
    ///     match window.try_resolve() {
    ///         Some(placed) => break placed.expect("read"),
    ///         None => std::thread::sleep(Duration::from_millis(1)),
    ///     }
    /// };
    /// assert!(placed.duration >= Duration::from_millis(20));
    /// # drop(profiler);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_resolve(&mut self) -> Option<Option<Placement>> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match Pin::new(&mut self.resolving).poll(&mut cx) {
            Poll::Ready(placed) => Some(placed),
            Poll::Pending => None,
        }
    }
}

impl<A: AnchorApi> Future for PlacedWindow<A> {
    type Output = Option<Placement>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Placement>> {
        Pin::new(&mut self.resolving).poll(cx)
    }
}

impl<A: AnchorApi> std::fmt::Debug for PlacedWindow<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacedWindow")
            .field("backend", &A::BACKEND)
            .finish_non_exhaustive()
    }
}

/// A closed window's reading: at once when the device is already past its
/// end, else by the resolver thread, which asks without waiting until it
/// is; neither thread blocks in a driver wait.
pub(crate) enum Resolving<A: AnchorApi> {
    /// Not read yet: the first poll reads it in place.
    Unread(Inputs<A>),
    /// Handed to the resolver thread.
    Pending(Handed<A>),
    /// Answered.
    Done,
}

/// The future's hold on a window handed to the resolver thread.
pub(crate) struct Handed<A: AnchorApi>(Arc<Pending<A>>);

impl<A: AnchorApi> Handed<A> {
    /// Hand `inputs` over in a spare of the profiler's, or in a new one.
    fn over(inputs: Inputs<A>) -> Self {
        let pool = Arc::clone(&inputs.pool);
        let made = Pending::of(&pool, Some(inputs));
        if let Some(mut spare) = pool.spare::<Pending<A>>()
            && let Some(reused) = Arc::get_mut(&mut spare)
        {
            *reused = made;
            return Self(spare);
        }
        // None free: one more is kept beside it, so that while the resolver
        // is still letting go of the last window's, the next window
        // handed over finds the one before it free.
        pool.keep_spare(Arc::new(Pending::of(&pool, None)) as Arc<dyn Any + Send + Sync>);
        Self(Arc::new(made))
    }
}

/// A window the resolver waits for.
pub(crate) struct Pending<A: AnchorApi> {
    /// Taken by the resolver when it starts, or by the future dropped
    /// before that, which then releases the events itself.
    inputs: Mutex<Option<Inputs<A>>>,
    /// Whether the resolver found its start reached: it stays so, and a
    /// "not ready" reading then means its end is ahead.
    start_reached: AtomicBool,
    answer: Answer<Option<Placement>>,
    lane: Option<Lane>,
    /// The process that handed it over: in a child made by `fork`, no
    /// resolver answers it, and its events are the parent's.
    process: u32,
    /// Where it goes once spent, for the next window handed over; not held
    /// alive by it, as the pool keeps it.
    pool: Weak<EventPool<A>>,
}

impl<A: AnchorApi> Pending<A> {
    /// A window's shared state with `inputs` (none: a spare), of this
    /// process, going back to `pool` once spent.
    fn of(pool: &Arc<EventPool<A>>, inputs: Option<Inputs<A>>) -> Self {
        Self {
            lane: inputs.as_ref().and_then(Inputs::lane),
            inputs: Mutex::new(inputs),
            start_reached: AtomicBool::new(false),
            answer: Answer::new(),
            process: std::process::id(),
            pool: Arc::downgrade(pool),
        }
    }

    /// Whether it was handed over in a parent of this process, made by
    /// `fork`: then no thread of this process answers it.
    fn inherited(&self) -> bool {
        self.process != std::process::id()
    }

    /// Let go of the events without releasing them: in a child made by
    /// `fork` they are the parent's, and CUDA and ROCm support no call on
    /// them there, a release included. Leaked on purpose.
    fn leave_to_the_parent(&self) {
        let inputs = self
            .inputs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        std::mem::forget(inputs);
    }
}

impl<A: AnchorApi> Job for Pending<A> {
    fn attempt(&self) -> Attempt {
        let mut inputs = self.inputs.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(taken) = inputs.as_ref() else {
            // The future was dropped, and released the events itself.
            return Attempt::Done;
        };
        A::own_thread();
        let read = read_window(taken);
        if let Err(why) = &read
            && why.is_not_ready()
        {
            log::trace!("{}: window not read yet: {why}", A::BACKEND);
            // Not ready is "its end is ahead" only when the end was not
            // reached: a window whose start waits on another stream, or
            // comes after its end, holds back no later window of its lane.
            if matches!(why, Unread::NoAnchorYet) {
                return Attempt::Waiting;
            }
            let mut start_reached = self.start_reached.load(Ordering::Relaxed);
            let end_reached = end_reached(taken, &mut start_reached);
            self.start_reached.store(start_reached, Ordering::Relaxed);
            return if end_reached {
                Attempt::Waiting
            } else {
                Attempt::EndAhead
            };
        }
        // The events go back before the waiter hears: a caller that counts
        // handles right after resolving sees them released.
        drop(inputs.take());
        drop(inputs);
        self.answer.fill(placement_or_none::<A>(read));
        Attempt::Done
    }

    fn forsake(&self) {
        let inputs = self
            .inputs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // Releasing them would call the driver, which is going away.
        std::mem::forget(inputs);
        self.answer.fill(None);
    }

    fn lane(&self) -> Option<Lane> {
        self.lane
    }

    fn give_up(&self) {
        // The events go back (or are released) whatever the reading left.
        drop(
            self.inputs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        self.answer.fill(None);
    }
}

// Nothing of it is ever pinned in place: the inputs move to the resolver.
impl<A: AnchorApi> Unpin for Resolving<A> {}

impl<A: AnchorApi> Future for Resolving<A> {
    type Output = Option<Placement>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Placement>> {
        let this = self.get_mut();
        if let Self::Unread(inputs) = this {
            let read = read_window(inputs);
            let why = match read {
                Err(why) if why.is_not_ready() => why,
                read => {
                    // The events go back before the caller hears.
                    *this = Self::Done;
                    return Poll::Ready(placement_or_none::<A>(read));
                }
            };
            log::debug!(
                "{}: window not read yet, handed to the resolver thread: {why}",
                A::BACKEND
            );
            if let Self::Unread(inputs) = std::mem::replace(this, Self::Done) {
                let handed = Handed::over(inputs);
                // The waker first: the resolver may answer at once.
                let _ = handed.0.answer.take_or_wait(cx.waker());
                resolver::watch(Arc::clone(&handed.0) as Arc<dyn Job>);
                *this = Self::Pending(handed);
            }
            return Poll::Pending;
        }
        match this {
            Self::Pending(Handed(pending)) => {
                if let Some(placed) = pending.answer.take_or_wait(cx.waker()) {
                    // Spent: a later poll is ready with `None` at once,
                    // where the taken answer would leave it waiting for a
                    // wake that never comes.
                    *this = Self::Done;
                    return Poll::Ready(placed);
                }
                if !pending.inherited() {
                    return Poll::Pending;
                }
                // Forked since it was handed over: the parent's resolver
                // answers it there, and none will here. Its drop leaves
                // the events to the parent.
                log::warn!(
                    "{}: a window handed over before this process was forked reads None \
                     here: it is the parent's to read",
                    A::BACKEND
                );
                *this = Self::Done;
                Poll::Ready(None)
            }
            _ => Poll::Ready(None),
        }
    }
}

impl<A: AnchorApi> Drop for Handed<A> {
    /// Dropped unresolved: the events go back now, unless the resolver is
    /// already waiting on them, when they go back as it finishes.
    fn drop(&mut self) {
        if self.0.inherited() {
            self.0.leave_to_the_parent();
            return;
        }
        let inputs = self
            .0
            .inputs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(inputs);
        // Reused once the resolver lets go of it too, holding no waker of
        // the user's meanwhile.
        self.0.answer.forget();
        if let Some(pool) = self.0.pool.upgrade() {
            pool.keep_spare(Arc::clone(&self.0) as Arc<dyn Any + Send + Sync>);
        }
    }
}
