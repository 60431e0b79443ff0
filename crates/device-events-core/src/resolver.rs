//! One thread per process that does the blocking waits of windows whose
//! device work is not done yet, so that the thread polling a window's
//! future (an async executor's worker) never blocks in a driver wait.
//!
//! Bounded: one thread, whatever the number of windows, started on the
//! first wait it is handed and gone once its queue is empty and no profiler
//! is left. A job whose future was dropped before it ran is never run: the
//! future releases its events itself.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::Waker;

/// Work handed to the resolver thread.
pub(crate) trait Job: Send + Sync {
    /// Do the blocking part and wake whoever waits for it.
    fn run(&self);

    /// `run` panicked: answer whoever waits all the same, with nothing.
    fn abandon(&self);
}

/// Run `job`; a job never panics by design, and one that did must neither
/// take the thread (and every waiter behind it) down nor leave its own
/// waiter pending forever.
fn run_job(job: &dyn Job) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run())).is_err() {
        log::warn!("device-events: a window's resolution panicked; it reads as None");
        job.abandon();
    }
}

struct Queue {
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
/// thread can be started the job runs here, blocking: a late answer beats
/// none.
pub(crate) fn submit(job: Arc<dyn Job>) {
    submit_via(job, |serve| {
        std::thread::Builder::new()
            .name("device-events-resolver".into())
            .spawn(serve)
            .map(drop)
    });
}

/// [`submit`], starting the thread with `spawn`.
fn submit_via(job: Arc<dyn Job>, spawn: impl FnOnce(fn()) -> std::io::Result<()>) {
    let mut q = queue();
    q.jobs.push_back(job);
    if q.running == Some(std::process::id()) {
        drop(q);
        WORK.notify_one();
        return;
    }
    q.running = Some(std::process::id());
    drop(q);
    if spawn(serve).is_err() {
        log::warn!("device-events: no resolver thread could be started; waiting in place");
        queue().running = None;
        loop {
            // Out of the queue first: the lock is not held while a job
            // waits, or every other profiler's `submit` would wait too.
            let next = queue().jobs.pop_front();
            let Some(job) = next else { break };
            run_job(&*job);
        }
    }
}

fn serve() {
    let mut q = queue();
    loop {
        if let Some(job) = q.jobs.pop_front() {
            drop(q);
            run_job(&*job);
            drop(job);
            q = queue();
        } else if q.profilers == 0 {
            q.running = None;
            return;
        } else {
            q = WORK.wait(q).unwrap_or_else(PoisonError::into_inner);
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

    /// Checks, as it runs, that the queue's lock is free.
    struct LockFree(Mutex<Option<bool>>);

    impl Job for LockFree {
        fn run(&self) {
            *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(QUEUE.try_lock().is_ok());
        }
        fn abandon(&self) {}
    }

    #[test]
    fn without_a_thread_jobs_run_in_place_without_the_queue_lock() {
        let job = Arc::new(LockFree(Mutex::new(None)));
        submit_via(Arc::clone(&job) as Arc<dyn Job>, |_| {
            Err(std::io::Error::other("no threads here"))
        });
        let free = *job.0.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(free, Some(true), "the job ran, with the lock free");
        assert!(!resolver_running());
    }
}
