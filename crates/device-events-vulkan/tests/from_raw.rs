//! A clock on a runtime's own device (`VulkanClock::from_raw`), on
//! lavapipe, with a ledger between it and the driver (`support`): the
//! objects it makes and destroys, its waits, and its gate's signal made to
//! fail.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::{Duration, Instant};

use device_events_core::StampClock;
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

#[test]
fn a_clock_dropped_with_its_gate_shut_opens_it_and_releases() {
    let runtime = Runtime::lavapipe();
    let mut clock = runtime.clock();
    assert!(clock.queue_stamp(true).unwrap(), "a gated stamp");

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
    assert!(!clock.queue_stamp(false).unwrap(), "an ungated stamp");
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
