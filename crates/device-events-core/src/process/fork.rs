//! Around `fork`: the library's threads fenced off and its process-wide
//! locks taken before it, given back after, so that a child never waits on
//! a lock one of the parent's threads held; in the child, the parent's
//! threads' work is forgotten.
//!
//! What is taken, in this order (a library thread takes them in no other):
//! 1. the library's threads' work (`fork_gate`): the handler waits until
//!    neither the resolver nor a calibrator is inside a piece of work, the
//!    only place they take any other lock of the library's (a window's own,
//!    a profiler's anchor, an event pool, a handle table's entry across a
//!    driver call); their sleeps between asks, a wait in the driver and an
//!    enqueue (which a full queue holds) lie outside it, so a fork waits
//!    for one round of asks, never for the device. An enqueue holds one
//!    lock outside: its anchor stream's table entry, read, which a child
//!    never removes (see `fork_gate`);
//! 2. the calibrator's queue;
//! 3. the resolver's queue;
//! 4. with the `sim` feature, the simulated device's state.
//!
//! A `pthread_atfork` prepare handler of your own that calls into the
//! library must run before this one: glibc runs prepare handlers in the
//! reverse order of their registration, and the backends register theirs
//! once their driver is loaded (at the first call), so a handler registered
//! earlier runs after it, with these locks held, and a call of it into the
//! library (a profiler's `start`, a window's `resolve`, a profiler made or
//! dropped, `wait_for_calibrations`) deadlocks. Documented, not avoided: the
//! locks must be held across the fork itself, and nothing runs between the
//! last prepare handler and the fork. Register yours after the backend's
//! first call, or do that work before calling `fork`.

use std::any::Any;
use std::cell::RefCell;

thread_local! {
    /// On the thread that forks, between [`before_fork`] and the handler
    /// after it: the library's locks it holds.
    static FORKING: RefCell<Forking> = const {
        RefCell::new(Forking { depth: 0, locks: Vec::new(), process: 0 })
    };
}

/// What [`before_fork`] took, on the thread that forks.
struct Forking {
    /// How many handlers took them: backends each register the three.
    depth: usize,
    locks: Vec<Box<dyn Any>>,
    /// The process that took them: the parent, seen from the child.
    process: u32,
}

/// For `fork`, before it (`pthread_atfork`'s `prepare`): wait until no
/// library thread (the resolver, a calibrator) is inside a piece of work,
/// keep them out, and take the locks they share process-wide (the
/// calibrator's and the resolver's queues), so that no library thread
/// holds a lock of the library's as the process forks, but for an anchor
/// stream's table entry read by an enqueue, which no child removes (an
/// enqueue can wait for the device). A child has none
/// of the parent's threads: a lock one of them held would stay held there,
/// and the child's first profiler, its first window read, or its drop of
/// an inherited window, profiler or fence would wait on it for good. The
/// wait is for one round of asks at most: the library's threads sleep
/// between asks, wait in the driver, and enqueue, outside their pieces of
/// work.
/// `device-events-cuda`, `-hip` and `-opencl` register the three handlers
/// once the driver is loaded; a process that uses none of them and forks
/// while the library's threads run registers them itself. Each call is
/// paired with [`after_fork_in_parent`] or [`after_fork_in_child`]; nested
/// calls take the locks once.
///
/// A prepare handler of your own that calls into the library must be
/// registered after this one (see the module's documentation): one that
/// runs after it finds these locks held, and deadlocks.
///
/// ```
/// use device_events_core::process::{after_fork_in_parent, before_fork};
///
/// // What `pthread_atfork` does around a `fork`, in the parent.
/// before_fork();
/// after_fork_in_parent();
/// ```
pub fn before_fork() {
    let _ = FORKING.try_with(|forking| {
        let mut forking = forking.borrow_mut();
        forking.depth += 1;
        if forking.depth == 1 {
            forking.process = std::process::id();
            forking.locks = vec![
                Box::new(crate::fork_gate::close_for_fork()),
                crate::anchoring::calibrator::lock_for_fork(),
                crate::waiting::resolver::lock_for_fork(),
            ];
            #[cfg(feature = "sim")]
            forking.locks.push(crate::testing::sim::lock_for_fork());
        }
    });
}

/// For `fork`, after it in the parent (`pthread_atfork`'s `parent`): give
/// back what [`before_fork`] took.
///
/// ```
/// device_events_core::process::before_fork();
/// device_events_core::process::after_fork_in_parent();
/// ```
pub fn after_fork_in_parent() {
    let _ = release_fork_locks();
}

/// For `fork`, after it in the child (`pthread_atfork`'s `child`): give
/// back what [`before_fork`] took, and forget the parent's threads' work
/// (their calibrations, their calls in flight, the windows handed to the
/// resolver and not yet taken), none of which goes on in the child: its
/// profilers take their own anchors, on threads of its own. Forgotten, not
/// dropped: their events and streams are the parent's, which CUDA and ROCm
/// do not let a child use, and releasing one would be a driver call too.
///
/// ```
/// // `pthread_atfork` runs it in the child; in the process that took the
/// // locks, it only gives them back.
/// device_events_core::process::before_fork();
/// device_events_core::process::after_fork_in_child();
/// ```
pub fn after_fork_in_child() {
    // Only in a child: the parent's threads' work goes on in the parent.
    if release_fork_locks().is_some_and(|parent| parent != std::process::id()) {
        crate::threads::forget_the_parents_calls();
        crate::anchoring::calibrator::forget_the_parents_now();
        crate::waiting::resolver::forget_the_parents_now();
    }
}

/// Drop the locks [`before_fork`] took, once its last nested call is
/// answered: then the process that took them.
fn release_fork_locks() -> Option<u32> {
    FORKING
        .try_with(|forking| {
            let mut forking = forking.borrow_mut();
            forking.depth = forking.depth.checked_sub(1)?;
            (forking.depth == 0).then(|| {
                forking.locks.clear();
                forking.process
            })
        })
        .ok()
        .flatten()
}
