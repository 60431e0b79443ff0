//! The library's threads' work, fenced off from `fork`: a child made by
//! `fork` has none of the parent's threads, so a lock one of them held as
//! the process forked would stay held in the child for good (a window's
//! own lock across its ask, a profiler's anchor, an event pool, a handle
//! table's entry during a driver call, ...).
//!
//! Rather than take each such lock around the fork, the fork handler
//! ([`crate::process::before_fork`]) closes this gate: the library's
//! threads (the resolver and the calibrators) take every lock of theirs
//! only inside a piece of [`LibraryWork`] (an enqueue's, below, excepted),
//! and the handler waits until
//! none is inside one. Their pieces make no driver call that waits on the
//! device: between asks they sleep outside the gate
//! ([`outside_library_work`]), holding no lock, so a fork waits at most
//! for one round of asks, however long the device's work. Nor does a
//! piece destroy a stream whose work may be unfinished (a stream's
//! destroy waits for its last command on HIP): an anchor stream the driver
//! would not let drain is left to the process, and so is one no event
//! could be made to drain, after asking again from sleeps outside the
//! gate (a lost device's, whose destroy has nothing to wait for, and one
//! that never had work are destroyed at once). Nor does a piece enqueue:
//! a driver holds an enqueue while the device's queue is full, which a
//! hung device's work sharing it can keep full, so an anchor's record, its
//! gate's wait and a drain's record are made outside the gate too. Such a
//! call holds the anchor stream's table entry, which a fork may copy held.
//! Nothing in the child waits for that hold: the stream is held by the
//! calibration or release the parent's thread was running, on that
//! thread's stack, which the child never unwinds; and a child's drop of a
//! profiler leaves any anchor stream the parent made to the process's end
//! (CUDA and ROCm let no child use it).
//!
//! The order, written down: this gate first, then the calibrator's queue,
//! then the resolver's. A library thread enters the gate holding no queue
//! lock (it may take one inside); nothing else enters it.

use std::cell::Cell;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

struct Entries {
    /// Library threads inside a piece of work.
    inside: usize,
    /// A fork is waiting for them to leave, or under way: none enters.
    forking: bool,
}

static GATE: Mutex<Entries> = Mutex::new(Entries {
    inside: 0,
    forking: false,
});
static GATE_CHANGED: Condvar = Condvar::new();

thread_local! {
    /// This thread's nested holds of the gate.
    static HELD: Cell<usize> = const { Cell::new(0) };
}

fn gate() -> MutexGuard<'static, Entries> {
    GATE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn held() -> usize {
    HELD.try_with(Cell::get).unwrap_or(0)
}

fn set_held(n: usize) {
    let _ = HELD.try_with(|held| held.set(n));
}

fn enter() {
    let mut gate = gate();
    while gate.forking {
        gate = GATE_CHANGED
            .wait(gate)
            .unwrap_or_else(PoisonError::into_inner);
    }
    gate.inside += 1;
}

fn leave() {
    let mut gate = gate();
    gate.inside = gate.inside.saturating_sub(1);
    if gate.inside == 0 && gate.forking {
        GATE_CHANGED.notify_all();
    }
}

/// A library thread inside a piece of work that may take the library's
/// locks: a fork waits for it to end. Nested holds count once.
pub(crate) struct LibraryWork(());

/// Enter a piece of [`LibraryWork`], waiting while a fork is under way.
/// Never called holding a queue lock: the fork handler takes those after
/// this gate.
pub(crate) fn library_work() -> LibraryWork {
    let depth = held();
    if depth == 0 {
        enter();
    }
    set_held(depth + 1);
    LibraryWork(())
}

impl Drop for LibraryWork {
    fn drop(&mut self) {
        let depth = held().saturating_sub(1);
        set_held(depth);
        if depth == 0 {
            leave();
        }
    }
}

/// Run `wait` outside this thread's piece of [`LibraryWork`], if it is in
/// one: a sleep between asks, or a wait in the driver, during which the
/// thread holds none of the library's locks, so that a fork need not wait
/// for the device. Back inside after it, once any fork under way is done.
pub(crate) fn outside_library_work<T>(wait: impl FnOnce() -> T) -> T {
    /// Back inside on every path, unwinding included.
    struct Reenter(usize);
    impl Drop for Reenter {
        fn drop(&mut self) {
            if self.0 > 0 {
                enter();
            }
            set_held(self.0);
        }
    }
    let depth = held();
    set_held(0);
    if depth > 0 {
        leave();
    }
    let _back = Reenter(depth);
    wait()
}

/// The gate, closed: no library thread is inside a piece of work, and
/// none enters until it is dropped (in the parent, or in the child, where
/// none of the parent's threads is left).
pub(crate) struct HeldForFork(MutexGuard<'static, Entries>);

/// Close the gate for a fork, once every library thread has left its piece
/// of work (the calling thread's own, if it is inside one, excepted).
pub(crate) fn close_for_fork() -> HeldForFork {
    let mine = usize::from(held() > 0);
    let mut gate = gate();
    gate.forking = true;
    let gate = GATE_CHANGED
        .wait_while(gate, |gate| gate.inside > mine)
        .unwrap_or_else(PoisonError::into_inner);
    HeldForFork(gate)
}

impl Drop for HeldForFork {
    fn drop(&mut self) {
        self.0.forking = false;
        GATE_CHANGED.notify_all();
    }
}
