//! A child made by `fork` has the parent's memory but none of its threads:
//! the resolver thread the parent runs is not the child's, and a window the
//! child reads late still gets a thread of its own. Its own binary: a child
//! of a process with other test threads could inherit a lock one of them
//! held.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use device_events_core::process::{resolver_running, wait_for_calibrations};
use device_events_core::sim::Sim;
use device_events_core::{EventApi, EventProfiler};
use support::{OnWait, WaitHook};

/// Start a window behind `work` and read it, within two seconds.
fn read_late_window<
    A: device_events_core::backend::AnchorApi<Stream = device_events_core::sim::SimStream>
        + device_events_core::backend::FenceApi,
>(
    profiler: &mut EventProfiler<A>,
    work: Duration,
) -> bool {
    let s = Sim::stream_create_non_blocking().unwrap();
    let token = profiler.start(s);
    Sim::enqueue_work(s, work);
    let window = profiler.stop(s, token).unwrap();
    let (sent, answer) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sent.send(pollster::block_on(window.resolve()).is_some());
    });
    answer.recv_timeout(Duration::from_secs(2)).unwrap_or(false)
}

#[test]
fn a_forked_child_resolves_windows_on_a_thread_of_its_own() {
    let _sim = Sim::exclusive();
    let mut profiler = EventProfiler::<Sim>::new();
    assert!(read_late_window(&mut profiler, Duration::from_millis(20)));
    assert!(resolver_running(), "the parent's resolver thread is up");
    // SAFETY: the child only reads a window and exits; this binary has no
    // other test thread that could hold a lock across the fork.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        let read = read_late_window(&mut profiler, Duration::from_millis(20));
        // SAFETY: leaves the child at once, with the outcome as its status.
        unsafe { libc::_exit(if read { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: `child` is this process's child; `status` is writable.
    let waited = unsafe { libc::waitpid(child, &mut status, 0) };
    assert_eq!(waited, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child read its window (status {status:#x})"
    );
}

/// Holds every wait in the driver while set: a calibration in flight.
static HOLD: AtomicBool = AtomicBool::new(false);

struct Hold;

impl WaitHook for Hold {
    fn waited() {
        while HOLD.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// What `docs/design.md` promises after `fork`: a calibration the parent had in
/// flight is not the child's to wait for; the child's profiler takes its
/// own anchor, reads its windows, and sees its calibrations end.
#[test]
fn a_child_forked_during_a_calibration_takes_its_own_anchor() {
    let _sim = Sim::exclusive();
    let mut profiler = EventProfiler::<OnWait<Hold>>::new();
    let s = Sim::stream_create_non_blocking().unwrap();
    HOLD.store(true, Ordering::Release);
    // The first window begins a calibration, which waits on the hold.
    let token = profiler.start(s);
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        !wait_for_calibrations(Duration::ZERO),
        "a calibration is in flight"
    );
    // SAFETY: the child only profiles and exits; the only other threads
    // are the library's, and the calibrator is parked in the hold, outside
    // any lock.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        // The child's own calibrations must not wait on the parent's hold.
        HOLD.store(false, Ordering::Release);
        let read = read_late_window(&mut profiler, Duration::from_millis(5));
        let idle = wait_for_calibrations(Duration::from_secs(2));
        // SAFETY: leaves the child at once, with the outcome as its status.
        unsafe { libc::_exit(i32::from(!read) | (i32::from(!idle) << 1)) };
    }
    HOLD.store(false, Ordering::Release);
    let mut status = 0;
    // SAFETY: `child` is this process's child; `status` is writable.
    let waited = unsafe { libc::waitpid(child, &mut status, 0) };
    assert_eq!(waited, child);
    assert!(
        libc::WIFEXITED(status),
        "the child exited (status {status:#x})"
    );
    let code = libc::WEXITSTATUS(status);
    assert!(code & 1 == 0, "the child read its window");
    assert!(code & 2 == 0, "the child's calibrations ended");
    let _ = profiler.stop(s, token);
    drop(profiler);
    assert!(wait_for_calibrations(Duration::from_secs(2)));
}
