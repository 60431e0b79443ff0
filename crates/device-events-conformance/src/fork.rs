//! `fork` right after the library was handed work: a child made by `fork`
//! has none of its parent's threads, and must never hand the parent's
//! events to the driver (CUDA and ROCm support no use of a parent's
//! handles in a child, a release included). Each check runs in a test
//! binary of its own: a child of a process running other tests could
//! inherit a lock one of them held.

use std::time::{Duration, Instant};

use device_events_core::sim::Sim;
use device_events_core::{Backend, EventApi, EventProfiler};

use crate::Workload;
use crate::soft::SoftDriver;

/// The exit status of `child`, or `None` when it had not exited normally
/// within `within` (killed then): a child that hangs fails the check
/// instead of hanging it.
pub fn status_of(child: libc::pid_t, within: Duration) -> Option<i32> {
    let deadline = Instant::now() + within;
    let mut status = 0;
    loop {
        // SAFETY: `child` is this process's child; `status` is writable.
        let reaped = unsafe { libc::waitpid(child, &raw mut status, libc::WNOHANG) };
        if reaped == child {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        assert_eq!(reaped, 0, "waitpid failed");
        if Instant::now() > deadline {
            // SAFETY: `child` is this process's unreaped child.
            unsafe {
                libc::kill(child, libc::SIGKILL);
                libc::waitpid(child, &raw mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// In a fork child: a window of the simulated device read within 2 s, which
/// starts the child's own resolver thread.
fn read_a_simulated_window() -> bool {
    let mut profiler = EventProfiler::<Sim>::new();
    let Ok(s) = Sim::stream_create_non_blocking() else {
        return false;
    };
    let token = profiler.start(s);
    Sim::enqueue_work(s, Duration::from_millis(1));
    let Ok(window) = profiler.stop(s, token) else {
        return false;
    };
    let (sent, answer) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sent.send(pollster::block_on(window.resolve()).is_some());
    });
    answer.recv_timeout(Duration::from_secs(2)).unwrap_or(false)
}

/// Forks made by [`a_child_forked_right_after_a_hand_over_asks_none_of_its_parents_events`].
pub const FORKS: usize = 50;

/// `docs/design.md`'s promise after `fork`: the child forgets the parent's
/// work. [`FORKS`] times, a window on `stream` behind 2 ms of `work` is
/// handed to the resolver thread and the process forks at once, so that
/// the window is often still queued, not yet taken by the parent's
/// resolver thread. Each child reads a window of the simulated device,
/// which starts a resolver of its own, and counts the driver calls it made
/// meanwhile (each a misuse to the software driver, which refuses every
/// call of a fork child). None may make any: the parent's events are
/// neither asked nor released there. Prints the children's counts.
///
/// # Panics
///
/// When a child made a driver call, did not read its own window, or hung.
pub fn a_child_forked_right_after_a_hand_over_asks_none_of_its_parents_events<A: Backend>(
    soft: &SoftDriver,
    stream: A::Stream,
    work: &dyn Workload<A>,
) {
    type Misuses = unsafe extern "C" fn() -> u64;
    // Resolved before the forks: a child looks nothing up.
    // SAFETY: the driver's counter of misuses, of this C signature.
    let misuses = unsafe { soft.function::<Misuses>(b"soft_driver_misuses\0") }
        .expect("the software driver counts misuses");
    let mut profiler = EventProfiler::<A>::new();
    // The anchor first: the windows handed over are then asked at once.
    let token = profiler.start(stream);
    let first = profiler.stop(stream, token).expect("a window");
    assert!(pollster::block_on(first.resolve()).is_some());
    let mut children = Vec::new();
    for _ in 0..FORKS {
        let token = profiler.start(stream);
        work.enqueue_bytes(stream, 20_000_000).expect("work");
        let mut window = profiler.stop(stream, token).expect("a window");
        assert!(window.try_resolve().is_none(), "2 ms of work still queued");
        // SAFETY: the child reads a simulated window, counts, and leaves
        // with `_exit`; the other threads are the library's, fenced off by
        // the backend's fork handlers; the test binary runs no other test.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            // SAFETY: a plain read of the driver's counter.
            let before = unsafe { misuses() };
            let read = read_a_simulated_window();
            // Time for the child's resolver to ask anything else it found.
            std::thread::sleep(Duration::from_millis(20));
            // SAFETY: as above.
            let made = unsafe { misuses() } - before;
            let code = if read {
                i32::try_from(made.min(200)).unwrap_or(200)
            } else {
                255
            };
            // SAFETY: leaves the child at once, with the count as its status.
            unsafe { libc::_exit(code) };
        }
        children.push(status_of(child, Duration::from_secs(10)));
        assert!(
            pollster::block_on(window.resolve()).is_some(),
            "the parent reads its window"
        );
    }
    drop(profiler);
    let made: Vec<_> = children.iter().filter(|c| **c != Some(0)).collect();
    eprintln!(
        "{} of {FORKS} children made driver calls (counted misuses, each; 255: own window \
         unread; None: hung): {made:?}",
        made.len()
    );
    assert!(
        made.is_empty(),
        "children asked or released their parent's events: {made:?}"
    );
}
