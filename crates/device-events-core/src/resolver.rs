//! One thread per process that answers windows whose device work was not
//! done when their futures were first polled, so that the thread polling a
//! window's future (an async executor's worker) never blocks in a driver
//! wait.
//!
//! It never waits in the driver either: it asks each pending window whether
//! its end was reached (a reading that says "not ready" costs no wait), and
//! sleeps in between. So each window is answered on its own, a bounded time
//! after the device reaches its end, whatever else pends: other streams,
//! devices, backends, or an event that never completes. Each window is
//! asked again after an interval that starts at [`FIRST`] and doubles up to
//! [`LAST`]: windows about to finish are seen within microseconds (the
//! thread yields rather than sleeps while an ask is due within [`TIGHT`]),
//! and a window pending for a second is asked about twenty times a second,
//! from a sleeping thread. When a window is answered, every window handed
//! over after it is asked again soon, and the very next one at most
//! [`NEXT_LAST`] apart for [`NEXT_FOR`]: on a stream, windows finish in the
//! order they were closed.
//!
//! Having answered the last pending window, the thread stays awake for
//! [`LINGER`], yielding, before it sleeps: a server reading windows one
//! after another hands the next over within microseconds, and a thread
//! already awake takes it without a wake-up's latency.
//!
//! Bounded: one thread, whatever the number of windows, started on the
//! first window it is handed and gone once none pends and no profiler is
//! left. A window whose future was dropped is let go at its next turn: the
//! future releases its events itself.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::Waker;
use std::time::{Duration, Instant};

/// The first interval at which a window is asked again.
const FIRST: Duration = Duration::from_micros(5);
/// Until the next ask is this close, the thread yields instead of
/// sleeping: a sleep that short lasts the kernel's timer slack (50 µs on
/// Linux) instead. A window is in this tight phase for its first ~300 µs
/// only; windows pending longer are asked from a sleep.
const TIGHT: Duration = Duration::from_micros(200);
/// The longest: the most a long-pending window's answer can lag its end.
const LAST: Duration = Duration::from_millis(50);
/// The longest for the window handed over next after one just answered,
/// for [`NEXT_FOR`]: on a stream, the likeliest to finish next.
const NEXT_LAST: Duration = Duration::from_micros(100);
const NEXT_FOR: Duration = Duration::from_millis(20);
/// How long the thread stays awake, yielding, after answering the last
/// pending window, for the next to be handed over.
const LINGER: Duration = Duration::from_micros(50);

/// Work handed to the resolver thread.
pub(crate) trait Job: Send + Sync {
    /// Answer if the device got there, without waiting: `true` once the
    /// job is answered or no longer wanted, `false` to be asked again.
    fn attempt(&self) -> bool;

    /// `attempt` panicked: answer whoever waits all the same, with nothing.
    fn abandon(&self);

    /// The process is exiting: answer with nothing, releasing nothing (no
    /// driver call).
    fn forsake(&self);
}

/// Ask `job`; a job never panics by design, and one that did must neither
/// take the thread (and every waiter behind it) down nor leave its own
/// waiter pending forever.
fn attempt(job: &dyn Job) -> bool {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.attempt())) {
        Ok(done) => done,
        Err(_) => {
            log::warn!("device-events: a window's resolution panicked; it reads as None");
            job.abandon();
            true
        }
    }
}

struct Queue {
    /// Handed over, not yet taken by the thread.
    jobs: VecDeque<Arc<dyn Job>>,
    /// The process whose resolver thread is up, if one is: a child made by
    /// `fork` inherits this memory but not the thread.
    running: Option<u32>,
    /// Live profilers: while there are any, an idle thread stays for the
    /// next window instead of being started again.
    profilers: usize,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    jobs: VecDeque::new(),
    running: None,
    profilers: 0,
});
static WORK: Condvar = Condvar::new();

fn queue() -> MutexGuard<'static, Queue> {
    QUEUE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Hand `job` to the resolver thread, starting it if needed. Where no
/// thread can be started, every job queued is answered with nothing, at
/// once: the polling thread is the user's, never blocked or spun here.
pub(crate) fn submit(job: Arc<dyn Job>) {
    submit_via(job, |serve| {
        crate::threads::start("device-events-resolver", serve)
    });
}

/// [`submit`], starting the thread with `spawn`.
fn submit_via(job: Arc<dyn Job>, spawn: impl FnOnce(fn()) -> std::io::Result<()>) {
    if crate::threads::stopping() {
        job.forsake();
        return;
    }
    let mut q = queue();
    q.jobs.push_back(job);
    if q.running == Some(std::process::id()) {
        drop(q);
        WORK.notify_one();
        return;
    }
    q.running = Some(std::process::id());
    drop(q);
    if let Err(err) = spawn(serve) {
        let unanswered = stop_running();
        log::warn!(
            "device-events: no resolver thread could be started ({err}); \
             {} window(s) not read yet read None",
            unanswered.len()
        );
        // Without the queue's lock: a job's waker may hand over another.
        for job in unanswered {
            job.abandon();
        }
    }
}

/// No thread serves the queue any more: the jobs handed over and not yet
/// taken, for the caller to answer.
fn stop_running() -> VecDeque<Arc<dyn Job>> {
    let mut q = queue();
    q.running = None;
    std::mem::take(&mut q.jobs)
}

/// A pending window, as the thread tracks it.
struct Tracked {
    job: Arc<dyn Job>,
    /// Order of hand-over.
    seq: u64,
    next: Instant,
    interval: Duration,
    /// Asked at most [`NEXT_LAST`] apart until then.
    close_until: Option<Instant>,
}

fn serve() {
    let mut tracked: Vec<Tracked> = Vec::new();
    let mut seq = 0u64;
    // When the thread last answered a window.
    let mut answered_at: Option<Instant> = None;
    let mut q = queue();
    loop {
        let now = Instant::now();
        tracked.extend(q.jobs.drain(..).map(|job| {
            seq += 1;
            Tracked {
                job,
                seq,
                next: now,
                interval: FIRST,
                close_until: None,
            }
        }));
        if tracked.is_empty() {
            if q.profilers == 0 {
                q.running = None;
                return;
            }
            // Just answered the last: a server reading windows one after
            // another hands the next over within microseconds, and a
            // thread already awake takes it without a wake-up's latency.
            if let Some(at) = answered_at.take() {
                drop(q);
                while at.elapsed() < LINGER {
                    std::thread::yield_now();
                    if !queue().jobs.is_empty() {
                        break;
                    }
                }
                q = queue();
                continue;
            }
            q = WORK.wait(q).unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        drop(q);
        let Some(working) = crate::threads::working() else {
            // The process is exiting: no more asks, and nothing released;
            // whoever waits hears `None`.
            let queued = stop_running();
            for job in tracked.iter().map(|t| &t.job).chain(&queued) {
                job.forsake();
            }
            return;
        };
        let mut answered = None;
        tracked.retain_mut(|t| {
            if t.next > now {
                return true;
            }
            if attempt(&*t.job) {
                // `tracked` is in hand-over order: the first is the lowest.
                answered.get_or_insert(t.seq);
                return false;
            }
            let close = t.close_until.is_some_and(|until| now < until);
            t.interval = (t.interval * 2).min(if close { NEXT_LAST } else { LAST });
            t.next = now + t.interval;
            true
        });
        drop(working);
        if let Some(first) = answered {
            answered_at = Some(now);
            // Handed over after one just answered: on its stream, likely
            // next, and the very next one likeliest.
            let later = tracked.iter_mut().skip_while(|t| t.seq < first);
            for (i, t) in later.enumerate() {
                t.interval = FIRST;
                t.next = t.next.min(now + FIRST);
                if i == 0 {
                    t.close_until = Some(now + NEXT_FOR);
                }
            }
        }
        let until = tracked.iter().map(|t| t.next).min();
        q = queue();
        if q.jobs.is_empty()
            && let Some(until) = until
        {
            let left = until.saturating_duration_since(Instant::now());
            if left > TIGHT {
                q = WORK
                    .wait_timeout(q, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            } else if !left.is_zero() {
                drop(q);
                std::thread::yield_now();
                q = queue();
            }
        }
    }
}

/// Whether the thread that waits for windows' device work on behalf of
/// their futures is up. It starts at the first window read before its
/// device work is done, and stops once no profiler is left and no window
/// waits.
///
/// ```
/// // No profiler yet, so no resolver thread.
/// assert!(!device_events_core::resolver_running());
/// ```
pub fn resolver_running() -> bool {
    queue().running == Some(std::process::id())
}

/// A profiler's hold on the resolver: it keeps an idle thread alive.
pub(crate) struct Hold;

impl Hold {
    pub(crate) fn new() -> Self {
        queue().profilers += 1;
        Self
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        queue().profilers -= 1;
        WORK.notify_all();
    }
}

/// Where a job leaves its answer and finds whom to wake.
pub(crate) struct Answer<T> {
    state: Mutex<SlotState<T>>,
}

enum SlotState<T> {
    Waiting(Option<Waker>),
    Done(T),
    Taken,
}

impl<T> Answer<T> {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(SlotState::Waiting(None)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, SlotState<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Leave the answer and wake the waiter.
    pub(crate) fn fill(&self, value: T) {
        let previous = std::mem::replace(&mut *self.lock(), SlotState::Done(value));
        if let SlotState::Waiting(Some(waker)) = previous {
            waker.wake();
        }
    }

    /// The answer if it is there; else remember `waker` for it.
    pub(crate) fn take_or_wait(&self, waker: &Waker) -> Option<T> {
        let mut state = self.lock();
        match std::mem::replace(&mut *state, SlotState::Taken) {
            SlotState::Done(value) => Some(value),
            SlotState::Waiting(_) => {
                *state = SlotState::Waiting(Some(waker.clone()));
                None
            }
            SlotState::Taken => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records how it was answered, and whether the queue's lock was free.
    #[derive(Default)]
    struct Noted {
        attempted: Mutex<bool>,
        abandoned_with_lock_free: Mutex<Option<bool>>,
    }

    impl Job for Noted {
        fn attempt(&self) -> bool {
            *self
                .attempted
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = true;
            false
        }
        fn forsake(&self) {}
        fn abandon(&self) {
            *self
                .abandoned_with_lock_free
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(QUEUE.try_lock().is_ok());
        }
    }

    #[test]
    fn without_a_thread_jobs_are_answered_at_once_without_waiting_in_place() {
        let job = Arc::new(Noted::default());
        submit_via(Arc::clone(&job) as Arc<dyn Job>, |_| {
            Err(std::io::Error::other("no threads here"))
        });
        let attempted = *job.attempted.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(!attempted, "the polling thread never asks the driver");
        let abandoned = *job
            .abandoned_with_lock_free
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        assert_eq!(abandoned, Some(true), "answered, with the lock free");
        assert!(!resolver_running());
    }
}
