//! A clock on a runtime's own device (`VulkanClock::from_raw`), on
//! lavapipe, with a ledger between it and the driver (`support`): the
//! objects it makes and destroys, its waits, and its gate's signal made to
//! fail.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::{Duration, Instant};

use device_events_core::ErrorKind;
use device_events_core::backend::StampClock;
use support::Runtime;

device_events_conformance::tests_need_an_installed_runtime!(
    "Mesa's lavapipe (Vulkan on the CPU)",
    "cargo xtask test"
);

/// What a clock makes: its command pool (its two command buffers go with
/// it), its query pool, its two events, its gate and its fence.
const OBJECTS: usize = 6;

/// Far longer than lavapipe takes to run a batch with nothing ahead of it.
const LONG: Duration = Duration::from_secs(10);

/// Every object the clock made was destroyed once, and none while a
/// submission could still use it.
fn released_once_and_unused(runtime: &Runtime) {
    assert_eq!(runtime.misuses(), Vec::<String>::new());
    let made = runtime.made();
    assert_eq!(made.len(), OBJECTS, "made: {made:?}");
    assert_eq!(
        runtime.destroyed(),
        made,
        "each object the clock made, destroyed once"
    );
}

/// Poll `written` until it says so, for at most [`LONG`].
fn written_in_time(mut written: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + LONG;
    while Instant::now() < deadline {
        if written() {
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    false
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is writable, and the clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut t) };
    Duration::new(
        u64::try_from(t.tv_sec).unwrap(),
        u32::try_from(t.tv_nsec).unwrap(),
    )
}

#[test]
fn a_clock_dropped_with_its_gate_shut_opens_it_and_releases() {
    let runtime = Runtime::lavapipe();
    let mut clock = runtime.clock();
    clock.gate().expect("a gate").close().unwrap();
    clock.queue_stamp().unwrap();

    drop(clock);

    // Its stamp could only complete through the gate: every object was
    // destroyed once its submission had.
    released_once_and_unused(&runtime);
}

#[test]
fn a_clock_dropped_with_a_stamp_in_flight_waits_for_it_and_releases() {
    let runtime = Runtime::lavapipe();
    let mut hold = runtime.hold_queue();
    let mut clock = runtime.clock();
    clock.queue_stamp().unwrap();
    let waits = runtime.fence_waits();

    let dropping = std::thread::spawn(move || drop(clock));

    // The stamp is queued behind the hold: the drop waits for its fence.
    let deadline = Instant::now() + LONG;
    while runtime.fence_waits() == waits && !dropping.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the drop neither waited nor returned"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        !dropping.is_finished(),
        "the drop returned while its stamp was still queued"
    );
    hold.release();
    dropping.join().unwrap();
    released_once_and_unused(&runtime);
}

#[test]
fn a_gate_whose_signal_fails_once_is_opened_by_a_retry() {
    let runtime = Runtime::lavapipe();
    let mut clock = runtime.clock();
    clock.gate().expect("a gate").close().unwrap();
    clock.queue_stamp().unwrap();
    runtime.fail_signals(1);

    let opened = clock.gate().unwrap().open();

    assert!(opened.is_ok(), "{opened:?}");
    assert!(
        written_in_time(|| clock.stamp_written().unwrap()),
        "the stamp stayed behind its gate"
    );
}

#[test]
fn a_gate_left_shut_by_a_lasting_signal_failure_opens_on_the_clocks_next_call() {
    let runtime = Runtime::lavapipe();
    let mut clock = runtime.clock();
    clock.gate().expect("a gate").close().unwrap();
    clock.queue_stamp().unwrap();
    runtime.fail_signals(u32::MAX);
    let err = clock.gate().unwrap().open().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfResources, "{err}");

    runtime.fail_signals(0);

    // Not dropped, nor opened by hand: the queue goes on.
    assert!(
        written_in_time(|| clock.stamp_written().unwrap()),
        "the stamp stayed behind its gate, and the queue with it"
    );
}

#[test]
fn a_gate_left_shut_by_another_signal_error_opens_on_the_clocks_next_call() {
    let runtime = Runtime::lavapipe();
    let mut clock = runtime.clock();
    clock.gate().expect("a gate").close().unwrap();
    clock.queue_stamp().unwrap();
    runtime.fail_signals_with(1, ash::vk::Result::ERROR_UNKNOWN);
    let err = clock.gate().unwrap().open().unwrap_err();
    assert_eq!(err.call(), "vkSignalSemaphore", "{err}");

    // Not dropped, nor opened by hand: the queue goes on.
    assert!(
        written_in_time(|| clock.stamp_written().unwrap()),
        "the stamp stayed behind its gate, and the queue with it"
    );
}

#[test]
fn a_failing_signal_is_tried_again_a_bounded_number_of_times_from_sleeps() {
    let runtime = Runtime::lavapipe();
    let mut clock = runtime.clock();
    clock.gate().expect("a gate").close().unwrap();
    clock.queue_stamp().unwrap();
    runtime.fail_signals(u32::MAX);
    let (cpu, wall) = (thread_cpu(), Instant::now());

    let err = clock.gate().unwrap().open().unwrap_err();

    let (cpu, wall) = (thread_cpu() - cpu, wall.elapsed());
    assert_eq!(err.kind(), ErrorKind::OutOfResources, "{err}");
    let tries = runtime.signals();
    assert!((2..=10).contains(&tries), "{tries} tries");
    assert!(
        cpu < wall / 2,
        "{cpu:?} of CPU over {wall:?}: the retries spun a core"
    );
    runtime.fail_signals(0);
}
