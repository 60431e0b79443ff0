//! Around `fork`: the library's process-wide locks taken before it and
//! given back after, so that a child never waits on a lock one of the
//! parent's threads locks; in the child, the parent's threads' work is
//! forgotten.

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

/// For `fork`, before it (`pthread_atfork`'s `prepare`): take the locks the
/// library's threads share process-wide (the calibrator's and the
/// resolver's queues), so that no library thread holds one as the process
/// forks. A child has none of the parent's threads: a lock one of them
/// held would stay held there, and the child's first profiler, or its first
/// window read, would wait on it for good. `device-events-cuda` and `-hip`
/// register the three handlers once the driver is loaded; a process that
/// uses neither and forks while the library's threads run registers them
/// itself. Each call is paired with [`after_fork_in_parent`] or
/// [`after_fork_in_child`]; nested calls take the locks once.
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
/// (their calibrations, their calls in flight), none of which goes on in
/// the child: its profilers take their own anchors, on threads of its own.
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
