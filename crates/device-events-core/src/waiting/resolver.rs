//! One thread per process that answers windows whose device work was not
//! done when their futures were first polled, so that the thread polling a
//! window's future (an async executor's worker) never blocks in a driver
//! wait.
//!
//! It never waits in the driver either: it asks whether a pending
//! window's end was reached (a reading that says "not ready" costs no
//! wait), and sleeps in between. Windows whose ends one profiler recorded
//! on one stream, from one thread, end in that order, so they form a lane:
//! only its first window is asked, and each answer is followed at once by
//! the next. (From one thread: a per-thread stream handle,
//! `CU_STREAM_PER_THREAD` or `hipStreamPerThread`, names each thread's own
//! stream.) A first window whose end was reached while its start was not
//! (it started on another stream, or after its end) waits apart: the
//! lane's later windows are asked past it. The
//! thread's work follows the number of lanes with pending windows, not
//! the number of windows. Each lane is answered on its own, a bounded time
//! after the device reaches its first end, whatever else pends: other
//! streams, devices, backends, or an event that never completes. A lane is
//! asked again after an interval that starts at [`FIRST`] and doubles up
//! to [`LAST`]: a window about to finish is seen within microseconds (the
//! thread yields rather than sleeps while an ask is due within [`TIGHT`]),
//! and one pending long is asked every [`LAST`], from a sleeping
//! thread. A lane that just answered one is asked again
//! after [`HOT`], and a busy one (whose windows waited behind queued work,
//! as a server timing every kernel's do) at that pace, or [`FOLLOW`] after
//! its reader's usual hand-over where that is later (up to [`SLOWEST`]),
//! from a sleep: its next window is not asked at once when handed over.
//! A lane stops being busy once two windows in a row, each handed over
//! [`QUIET`] or more after its last answer, are answered within
//! [`BEHIND_WORK`] of being handed over (one handed over sooner and
//! answered at once comes from a reader polling at the stream's own pace),
//! or once it answers none for [`HOT_FOR`]; until then a window on a
//! stream gone idle is answered up to [`SLOWEST`] after its end.
//!
//! Busy lanes' asks fall into one turn: one due within [`EARLY`] is
//! asked with another's. Handing a window over wakes the thread only where
//! that buys an earlier answer: not while it is awake (it takes the window
//! before it waits again), nor where its lane's next ask is planned anyway
//! (a window pending ahead of it, or a busy lane whose reader kept up, for
//! which the thread sleeps only until the pace's next ask).
//!
//! Having answered the last pending window, the thread stays awake for
//! [`YIELD_AFTER_LAST`], yielding, before it sleeps: a server reading windows one
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

use foldhash::HashMap;

use crate::tunables::resolver::{
    BEHIND_WORK, EARLY, FIRST, FOLLOW, HOT, HOT_FOR, LAST, QUIET, SLOWEST, TIGHT, YIELD_AFTER_LAST,
};

/// Work handed to the resolver thread.
pub(crate) trait Job: Send + Sync {
    /// Answer if the device got there, without waiting.
    fn attempt(&self) -> Attempt;

    /// No thread will ask it again (`attempt` panicked, or no resolver
    /// thread could be started): answer whoever waits all the same, with
    /// nothing, releasing what it holds.
    fn give_up(&self);

    /// The process is exiting: answer with nothing, releasing nothing (no
    /// driver call).
    fn forsake(&self);

    /// Where the job's window ends: jobs of one lane are answered in its
    /// order, only the first asked; `None` for a lane of its own.
    fn lane(&self) -> Option<Lane> {
        None
    }
}

/// A profiler's windows ending on one stream: its identity, and a window's
/// place in it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lane {
    pub(crate) key: LaneId,
    pub(crate) seq: u64,
}

/// A profiler, a stream as the backend names it, and the thread that
/// recorded the ends: one handle can name a stream of each thread (the
/// per-thread stream), whose ends keep no order across threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct LaneId {
    pub(crate) profiler: u64,
    pub(crate) stream: u64,
    pub(crate) thread: u64,
}

/// The calling thread's number, for [`LaneId::thread`]: never reused in
/// the process.
pub(crate) fn this_thread() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static THIS: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    THIS.with(|this| *this)
}

/// What asking a job found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Answered, or no longer wanted.
    Done,
    /// The device has not reached the window's end: nor the later ends of
    /// its lane.
    EndAhead,
    /// Not yet, for a reason of its own (its anchor is still being
    /// taken, or its end was reached and its start was not): later
    /// windows of its lane may be readable.
    Waiting,
}

/// Ask `job`; a job never panics by design, and one that did must neither
/// take the thread (and every waiter behind it) down nor leave its own
/// waiter pending forever.
fn attempt(job: &dyn Job) -> Attempt {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.attempt())) {
        Ok(asked) => asked,
        Err(_) => {
            log::warn!("device-events: a window's resolution panicked; it reads as None");
            job.give_up();
            Attempt::Done
        }
    }
}

struct WindowQueue {
    /// Handed over, not yet taken by the thread.
    jobs: VecDeque<Arc<dyn Job>>,
    /// The process whose resolver thread is up, if one is: a child made by
    /// `fork` inherits this memory but not the thread.
    running: Option<u32>,
    /// Live profilers: while there are any, an idle thread stays for the
    /// next window instead of being started again.
    profilers: usize,
    /// The thread waits for a job or its next ask's time: a job handed
    /// over while it is awake is taken before it waits again, unwoken.
    asleep: bool,
    /// While it waits: lanes whose next window it will ask when it wakes
    /// anyway (a busy lane's next ask is planned before its window is
    /// handed over), so that handing one over wakes nothing.
    expecting: Vec<LaneId>,
}

static WINDOW_QUEUE: Mutex<WindowQueue> = Mutex::new(WindowQueue {
    jobs: VecDeque::new(),
    running: None,
    profilers: 0,
    asleep: false,
    expecting: Vec::new(),
});
static WINDOW_HANDED: Condvar = Condvar::new();

fn window_queue() -> MutexGuard<'static, WindowQueue> {
    WINDOW_QUEUE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The queue, locked, for [`crate::process::before_fork`]: no resolver thread
/// holds it as the process forks.
pub(crate) fn lock_for_fork() -> Box<dyn std::any::Any> {
    Box::new(window_queue())
}

/// In a child made by `fork`, the queue is the parent's: its thread is not
/// here, and the windows handed to it and not yet taken are the parent's,
/// their events of the parent's driver state. A resolver the child starts
/// must never ask them, nor release them (both driver calls, which CUDA
/// and ROCm do not support in a child): they are forgotten, not dropped,
/// and their futures, polled in the child, read `None`
/// (`placed_window::Pending`).
fn forget_the_parents(q: &mut WindowQueue) {
    if q.running.is_some_and(|pid| pid != std::process::id()) {
        q.running = None;
        q.asleep = false;
        q.expecting.clear();
        std::mem::forget(std::mem::take(&mut q.jobs));
    }
}

/// [`forget_the_parents`], at once: in a child made by `fork`.
pub(crate) fn forget_the_parents_now() {
    forget_the_parents(&mut window_queue());
}

/// Hand `job` to the resolver thread, starting it if needed. Where no
/// thread can be started, every job queued is answered with nothing, at
/// once: the polling thread is the user's, never blocked or spun here.
pub(crate) fn watch(job: Arc<dyn Job>) {
    watch_via(job, |answer_windows| {
        crate::threads::start("device-events-resolver", answer_windows)
    });
}

/// [`watch`], starting the thread with `spawn`.
fn watch_via(job: Arc<dyn Job>, spawn: impl FnOnce(fn()) -> std::io::Result<()>) {
    if crate::threads::stopping() {
        job.forsake();
        return;
    }
    let mut q = window_queue();
    // Where no fork handler ran (none registered): the parent's windows
    // are forgotten here, before this one joins them.
    forget_the_parents(&mut q);
    let lane = job.lane().map(|lane| lane.key);
    q.jobs.push_back(job);
    if q.running == Some(std::process::id()) {
        // Awake, it takes the job before it waits again; asleep with this
        // lane's next ask planned, it takes it then: a wake-up (a system
        // call here, a context switch there) only where it buys an
        // earlier answer.
        let wake = q.asleep && !lane.is_some_and(|lane| q.expecting.contains(&lane));
        drop(q);
        if wake {
            WINDOW_HANDED.notify_one();
        }
        return;
    }
    q.running = Some(std::process::id());
    drop(q);
    if let Err(err) = spawn(answer_windows) {
        let unanswered = stop_running();
        log::warn!(
            "device-events: no resolver thread could be started ({err}); \
             {} window(s) not read yet read None",
            unanswered.len()
        );
        // Without the queue's lock: a job's waker may hand over another.
        for job in unanswered {
            job.give_up();
        }
    }
}

/// No thread serves the queue any more: the jobs handed over and not yet
/// taken, for the caller to answer.
fn stop_running() -> VecDeque<Arc<dyn Job>> {
    let mut q = window_queue();
    q.running = None;
    std::mem::take(&mut q.jobs)
}

/// A lane as the thread tracks it: windows whose ends one profiler
/// recorded on one stream end in the order recorded, so only the first is
/// asked, and an answer is followed at once by the next.
struct Track {
    /// By record order, with when each was handed over.
    jobs: VecDeque<(u64, Arc<dyn Job>, Instant)>,
    next: Instant,
    interval: Duration,
    /// When it last answered one: kept a while after it empties, so that
    /// a busy stream's next window is asked at the busy pace.
    answered: Option<Instant>,
    /// Answered in a row, up to two, that had waited past [`BEHIND_WORK`]
    /// (positive: their ends were queued behind work, not just launched)
    /// or not (negative).
    streak: i8,
    /// Set by two in a row behind work, cleared by two in a row that were
    /// not (one can be a launch's tail, or a window that happened to end
    /// just as it was handed over); with an answer under [`HOT_FOR`] ago,
    /// it makes the lane busy.
    behind_work: bool,
    /// How many of its first windows were found waiting for a reason of
    /// their own (their starts) when last asked: a window handed over
    /// behind only such is asked as the first of a lane would be.
    waiting_apart: usize,
    /// How long after its last answer its reader handed the next window
    /// over, when none was pending: a busy lane's next window is expected
    /// then, and asked [`FOLLOW`] after.
    handed_after: Option<Duration>,
}

impl Track {
    fn new(now: Instant) -> Self {
        Self {
            jobs: VecDeque::new(),
            next: now,
            interval: FIRST,
            answered: None,
            streak: 0,
            behind_work: false,
            waiting_apart: 0,
            handed_after: None,
        }
    }

    /// Whether its stream is busy: it last answered one under [`HOT_FOR`]
    /// ago, and since two in a row had waited past [`BEHIND_WORK`], no two
    /// in a row have not, as a server timing every kernel's do. Its windows
    /// are then asked every [`HOT`], from a sleep, rather than at once. (A
    /// window read right after `stop` on a stream idle for [`HOT_FOR`]
    /// waits only for its launch, and is asked at once; on a stream busy
    /// until lately, once two such windows in a row have been, each after
    /// a quiet spell of [`QUIET`].)
    fn busy(&self, now: Instant) -> bool {
        self.behind_work
            && self
                .answered
                .is_some_and(|at| now.saturating_duration_since(at) < HOT_FOR)
    }

    /// Whether to ask it this turn: its ask is due, or, hot (it just
    /// answered one, or is busy), due within [`EARLY`], so that the
    /// thread wakes once for every busy stream rather than once for each.
    fn due(&self, now: Instant) -> bool {
        self.next <= now || (self.interval == HOT && self.next <= now + EARLY)
    }

    /// When a busy lane's next window is asked: [`HOT`] after its last
    /// answer, or [`FOLLOW`] after its reader's last hand-over came, where
    /// that is later, up to [`SLOWEST`]. One ask, from one wake-up, finds
    /// the window there, and its end most often reached.
    fn paced(&self) -> Option<Instant> {
        let wait = self
            .handed_after
            .map_or(HOT, |after| (after + FOLLOW).clamp(HOT, SLOWEST));
        Some(self.answered? + wait)
    }

    /// When a window handed over now would be asked with no wake-up of
    /// its own: one pending before it is asked at its planned time (a
    /// later end is not reached sooner), and a busy lane's next window
    /// at its pace, where its reader keeps up with it.
    fn expects(&self, now: Instant) -> Option<Instant> {
        if self.jobs.len() > self.waiting_apart {
            return Some(self.next);
        }
        let keeps_up = self
            .handed_after
            .is_some_and(|after| after + FOLLOW <= SLOWEST);
        let at = self.paced()?;
        (keeps_up && self.busy(now) && at > now).then_some(at)
    }

    /// Put `job` in record order; most come last. A lane that had none
    /// pending is asked from the start again, or, busy, at its pace.
    fn insert(&mut self, now: Instant, seq: u64, job: Arc<dyn Job>) {
        if self.jobs.len() <= self.waiting_apart {
            if self.busy(now) {
                self.interval = HOT;
                self.next = self.paced().unwrap_or(now);
            } else {
                self.interval = FIRST;
                self.next = now;
            }
        }
        if self.jobs.is_empty() {
            self.handed_after = self.answered.map(|at| now.saturating_duration_since(at));
        }
        let at = self
            .jobs
            .iter()
            .rposition(|(s, ..)| *s < seq)
            .map_or(0, |i| i + 1);
        self.waiting_apart = self.waiting_apart.min(at);
        self.jobs.insert(at, (seq, job, now));
    }

    /// Ask the first, and the next after each answered or waiting for a
    /// reason of its own, up to the first whose end is ahead; whether any
    /// was answered, and whether the lane is busy.
    fn ask(&mut self, now: Instant) -> Option<bool> {
        let busy = self.busy(now);
        let mut answered = false;
        let mut at = 0;
        while let Some((_, job, handed)) = self.jobs.get(at) {
            // The process is exiting: no more asks (the round's end
            // answers every job with nothing).
            if crate::threads::stopping() {
                break;
            }
            match attempt(&**job) {
                Attempt::Done => {
                    let waited = now.saturating_duration_since(*handed);
                    // Answered at once, handed over soon after the last
                    // answer: a reader polling at the stream's own pace,
                    // a moment before the window's end; not a stream gone
                    // idle, which says so after a quiet spell.
                    let at_pace = waited <= BEHIND_WORK
                        && self
                            .answered
                            .is_some_and(|last| handed.saturating_duration_since(last) < QUIET);
                    // Counted up to two either way: all that is asked of it.
                    if !at_pace {
                        self.streak = if waited > BEHIND_WORK {
                            (self.streak.max(0) + 1).min(2)
                        } else {
                            (self.streak.min(0) - 1).max(-2)
                        };
                    }
                    if self.streak.abs() == 2 {
                        self.behind_work = self.streak > 0;
                    }
                    self.jobs.remove(at);
                    answered = true;
                }
                Attempt::EndAhead => break,
                Attempt::Waiting => at += 1,
            }
        }
        self.waiting_apart = at;
        if answered {
            self.answered = Some(now);
        }
        // Just answered one, with more pending, or busy: the next ends soon,
        // and is asked at a pace that answers it well within a millisecond,
        // from a sleep. Else, at doubling intervals.
        self.interval = if answered || busy {
            HOT
        } else {
            (self.interval * 2).min(LAST)
        };
        self.next = now + self.interval;
        answered.then_some(busy)
    }
}

fn answer_windows() {
    let mut lanes: HashMap<LaneKey, Track> = HashMap::default();
    // Jobs with no lane of their own each get one.
    let mut solo = 0u64;
    // When the thread last answered a window of a lane that was not busy.
    let mut answered_at: Option<Instant> = None;
    let mut q = window_queue();
    loop {
        let now = Instant::now();
        for job in q.jobs.drain(..) {
            let (key, seq) = match job.lane() {
                Some(lane) => (LaneKey::Shared(lane.key), lane.seq),
                None => {
                    solo += 1;
                    (LaneKey::Solo(solo), 0)
                }
            };
            let lane = lanes.entry(key).or_insert_with(|| Track::new(now));
            lane.insert(now, seq, job);
        }
        // Idle lanes are kept only while their pace still matters.
        lanes.retain(|_, lane| {
            !lane.jobs.is_empty() || lane.answered.is_some_and(|at| now < at + HOT_FOR)
        });
        if lanes.values().all(|lane| lane.jobs.is_empty()) {
            if q.profilers == 0 && lanes.is_empty() {
                q.running = None;
                return;
            }
            // Just answered the last: a server reading windows one after
            // another hands the next over within microseconds, and a
            // thread already awake takes it without a wake-up's latency.
            if let Some(at) = answered_at.take() {
                drop(q);
                while at.elapsed() < YIELD_AFTER_LAST {
                    std::thread::yield_now();
                    if !window_queue().jobs.is_empty() {
                        break;
                    }
                }
                q = window_queue();
                continue;
            }
            // Awake again when a job comes, a busy lane's next window is
            // due to be asked, or idle lanes are let go.
            let forget = lanes.values().filter_map(|lane| lane.answered).min();
            q = sleep(q, &lanes, now, forget.map(|at| at + HOT_FOR));
            continue;
        }
        drop(q);
        // Every lock the asks take is taken inside it: a fork waits for
        // the round to end (`fork_gate`).
        let work = crate::fork_gate::library_work();
        let Some(working) = crate::threads::working() else {
            // The process is exiting: no more asks, and nothing released;
            // whoever waits hears `None`.
            let queued = stop_running();
            let tracked = lanes
                .values()
                .flat_map(|lane| lane.jobs.iter().map(|(_, job, _)| job));
            for job in tracked.chain(&queued) {
                job.forsake();
            }
            return;
        };
        for lane in lanes.values_mut() {
            if !lane.jobs.is_empty() && lane.due(now) && lane.ask(now) == Some(false) {
                answered_at = Some(now);
            }
        }
        drop(working);
        drop(work);
        let until = lanes
            .values()
            .filter(|lane| !lane.jobs.is_empty())
            .map(|lane| lane.next)
            .min();
        q = window_queue();
        if q.jobs.is_empty()
            && let Some(until) = until
        {
            let asked = Instant::now();
            let left = until.saturating_duration_since(asked);
            if left > TIGHT {
                q = sleep(q, &lanes, asked, Some(until));
            } else if !left.is_zero() {
                drop(q);
                std::thread::yield_now();
                q = window_queue();
            }
        }
    }
}

/// Wait for a job, at most until `until` or the next ask planned for a
/// busy lane's next window, whichever comes first; those lanes' windows
/// are then handed over without waking the thread. `now` was read just
/// before (no driver call since): the clock is not read again.
fn sleep(
    mut q: MutexGuard<'static, WindowQueue>,
    lanes: &HashMap<LaneKey, Track>,
    now: Instant,
    mut until: Option<Instant>,
) -> MutexGuard<'static, WindowQueue> {
    q.expecting.clear();
    for (key, lane) in lanes {
        if let (LaneKey::Shared(id), Some(at)) = (key, lane.expects(now)) {
            q.expecting.push(*id);
            until = Some(until.map_or(at, |until| until.min(at)));
        }
    }
    q.asleep = true;
    let mut q = match until {
        Some(until) => {
            let left = until.saturating_duration_since(now);
            WINDOW_HANDED
                .wait_timeout(q, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0
        }
        None => WINDOW_HANDED
            .wait(q)
            .unwrap_or_else(PoisonError::into_inner),
    };
    q.asleep = false;
    q
}

/// Where a lane's jobs come from.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum LaneKey {
    Shared(LaneId),
    Solo(u64),
}

/// Whether the thread that waits for windows' device work on behalf of
/// their futures is up. It starts at the first window read before its
/// device work is done, and stops once no profiler is left and no window
/// waits.
///
/// ```
/// // No profiler yet, so no resolver thread.
/// assert!(!device_events_core::process::resolver_running());
/// ```
pub fn resolver_running() -> bool {
    window_queue().running == Some(std::process::id())
}

/// A live profiler, as the resolver counts it: it keeps an idle thread alive.
pub(crate) struct KeepAlive;

impl KeepAlive {
    pub(crate) fn new() -> Self {
        window_queue().profilers += 1;
        Self
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        window_queue().profilers -= 1;
        WINDOW_HANDED.notify_all();
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

    /// Leave the answer and wake the waiter. The waker is the user's
    /// code, run with no lock of the library's held, and outside the
    /// resolver's piece of work: a fork never waits on it.
    pub(crate) fn fill(&self, value: T) {
        let previous = std::mem::replace(&mut *self.lock(), SlotState::Done(value));
        if let SlotState::Waiting(Some(waker)) = previous {
            crate::fork_gate::outside_library_work(|| waker.wake());
        }
    }

    /// Nobody waits any more: the answer and the waiter's waker let go
    /// (dropped with no lock held, as they may run the user's code).
    pub(crate) fn forget(&self) {
        let previous = std::mem::replace(&mut *self.lock(), SlotState::Taken);
        drop(previous);
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
        given_up_with_lock_free: Mutex<Option<bool>>,
    }

    impl Job for Noted {
        fn attempt(&self) -> Attempt {
            *self
                .attempted
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = true;
            Attempt::EndAhead
        }
        fn forsake(&self) {}
        fn give_up(&self) {
            *self
                .given_up_with_lock_free
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(WINDOW_QUEUE.try_lock().is_ok());
        }
    }

    /// Answered whenever asked.
    struct Reached;

    impl Job for Reached {
        fn attempt(&self) -> Attempt {
            Attempt::Done
        }
        fn forsake(&self) {}
        fn give_up(&self) {}
    }

    /// One window handed to `lane` at `at`, answered `after` later.
    fn answer_one(lane: &mut Track, seq: u64, at: Instant, after: Duration) {
        lane.insert(at, seq, Arc::new(Reached));
        assert_eq!(lane.jobs.len(), 1);
        lane.ask(at + after);
        assert!(lane.jobs.is_empty());
    }

    #[test]
    fn a_busy_lane_stays_busy_through_one_window_that_ends_as_it_is_handed_over() {
        let start = Instant::now();
        let mut lane = Track::new(start);
        let behind = BEHIND_WORK * 4;
        let at = |us| start + Duration::from_micros(us);
        answer_one(&mut lane, 0, at(0), behind);
        assert!(
            !lane.busy(at(200)),
            "one window behind work can be a launch's tail"
        );
        answer_one(&mut lane, 1, at(200), behind);
        assert!(lane.busy(at(400)), "two in a row make the stream busy");
        // Handed over after a quiet spell, each answered at once.
        let quiet = QUIET.as_micros() as u64;
        answer_one(&mut lane, 2, at(400 + quiet), Duration::ZERO);
        assert!(
            lane.busy(at(600 + quiet)),
            "one answered at once on a busy stream ended as it was handed over"
        );
        answer_one(&mut lane, 3, at(600 + 2 * quiet), Duration::ZERO);
        assert!(
            !lane.busy(at(800 + 2 * quiet)),
            "two in a row answered at once after quiet spells: idle"
        );
    }

    #[test]
    fn a_busy_lane_whose_reader_polls_at_the_streams_pace_stays_busy() {
        let start = Instant::now();
        let (mut lane, answered) = busy_lane(start);
        // Each handed over 500 µs after the last answer, a moment before
        // its end, and answered at once: a server reading each window
        // about as it ends.
        let mut handed = answered;
        for seq in 2..10 {
            handed += Duration::from_micros(500);
            answer_one(&mut lane, seq, handed, Duration::ZERO);
        }
        assert!(lane.busy(handed + Duration::from_micros(10)));
    }

    #[test]
    fn a_lane_answered_at_once_for_long_turns_busy_after_two_behind_work() {
        let start = Instant::now();
        let mut lane = Track::new(start);
        let at = |us| start + Duration::from_micros(us);
        for seq in 0..300 {
            answer_one(&mut lane, seq, at(seq), Duration::ZERO);
        }
        answer_one(&mut lane, 300, at(300), BEHIND_WORK * 4);
        assert!(
            !lane.busy(at(450)),
            "one behind work after a long quick run"
        );
        answer_one(&mut lane, 301, at(500), BEHIND_WORK * 4);
        assert!(
            lane.busy(at(700)),
            "two behind work in a row, however long idle before"
        );
    }

    /// A lane made busy: two windows answered behind work, the last at
    /// `at(200) + behind`.
    fn busy_lane(start: Instant) -> (Track, Instant) {
        let mut lane = Track::new(start);
        let behind = BEHIND_WORK * 4;
        answer_one(&mut lane, 0, start, behind);
        let last = start + Duration::from_micros(200);
        answer_one(&mut lane, 1, last, behind);
        (lane, last + behind)
    }

    #[test]
    fn a_busy_lane_whose_reader_keeps_up_plans_its_next_ask_before_the_window_comes() {
        let start = Instant::now();
        let (mut lane, answered) = busy_lane(start);
        // Its reader handed the next window over soon after the answer.
        let soon = answered + Duration::from_micros(10);
        answer_one(&mut lane, 2, soon, BEHIND_WORK * 4);
        let answered = soon + BEHIND_WORK * 4;
        let now = answered + Duration::from_micros(10);
        assert_eq!(
            lane.expects(now),
            Some(answered + HOT),
            "its next window is asked at the pace, with no wake-up of its own"
        );
    }

    #[test]
    fn a_busy_lane_whose_reader_came_late_wakes_the_thread_for_its_next_window() {
        let start = Instant::now();
        let (mut lane, answered) = busy_lane(start);
        // Handed over after the pace's ask was due: the reader lags.
        let late = answered + HOT * 2;
        answer_one(&mut lane, 2, late, BEHIND_WORK * 4);
        let now = late + BEHIND_WORK * 4 + Duration::from_micros(10);
        assert_eq!(
            lane.expects(now),
            None,
            "no wake-up planned that would find nothing"
        );
    }

    #[test]
    fn a_window_handed_behind_one_pending_needs_no_wake_up() {
        let start = Instant::now();
        let mut lane = Track::new(start);
        lane.insert(start, 0, Arc::new(Noted::default()));
        lane.ask(start);
        assert_eq!(
            lane.expects(start),
            Some(lane.next),
            "a later end is not reached before the pending one is asked"
        );
    }

    #[test]
    fn a_busy_lane_due_soon_is_asked_in_another_lanes_turn() {
        let start = Instant::now();
        let (mut lane, answered) = busy_lane(start);
        lane.insert(answered, 2, Arc::new(Noted::default()));
        assert!(!lane.due(lane.next - EARLY - Duration::from_micros(1)));
        assert!(
            lane.due(lane.next - EARLY / 2),
            "asked early rather than by a wake-up of its own"
        );
    }

    #[test]
    fn an_idle_lane_is_asked_at_its_own_time_only() {
        let start = Instant::now();
        let mut lane = Track::new(start);
        lane.insert(start, 0, Arc::new(Noted::default()));
        lane.ask(start);
        assert!(!lane.due(lane.next - Duration::from_micros(1)));
    }

    #[test]
    fn without_a_thread_jobs_are_answered_at_once_without_waiting_in_place() {
        let job = Arc::new(Noted::default());
        watch_via(Arc::clone(&job) as Arc<dyn Job>, |_| {
            Err(std::io::Error::other("no threads here"))
        });
        let attempted = *job.attempted.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(!attempted, "the polling thread never asks the driver");
        let given_up = *job
            .given_up_with_lock_free
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        assert_eq!(given_up, Some(true), "answered, with the lock free");
        assert!(!resolver_running());
    }
}
