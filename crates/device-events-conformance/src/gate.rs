//! The anchor's gate, on the software driver: used where the device has
//! stream memory operations, left alone where it has none, and never left
//! closed, errors included. Windows stay inside their stated bound either
//! way.

use std::time::{Duration, Instant};

use device_events_core::{AnchorApi, EventProfiler, ProfilerConfig};

use crate::Streams;
use crate::soft::SoftDriver;

/// A backend's names for the calls these checks count or fail.
#[derive(Clone, Copy, Debug)]
pub struct GateCalls {
    /// The stream wait on a value (`cuStreamWaitValue32_v2`,
    /// `hipStreamWaitValue32`).
    pub wait_value: &'static str,
    /// The event record (`cuEventRecord`, `hipEventRecord`).
    pub record: &'static str,
}

/// A profiler that re-anchors every few milliseconds, so that a handful of
/// windows meet several calibrations.
fn refreshing<A: AnchorApi>() -> EventProfiler<A> {
    EventProfiler::with_config(ProfilerConfig {
        anchor_max_age: Duration::from_millis(2),
        ..ProfilerConfig::default()
    })
}

/// `n` windows on `s`, each end checked against the driver's truth within
/// the window's stated bound.
fn windows_inside_their_bound<A: AnchorApi>(
    driver: &SoftDriver,
    profiler: &mut EventProfiler<A>,
    s: A::Stream,
    n: usize,
) {
    for i in 0..n {
        std::thread::sleep(Duration::from_millis(1));
        let token = profiler.start(s);
        let start = driver.last_recorded_event();
        let window = profiler.stop_placed(s, token).unwrap();
        let end = driver.last_recorded_event();
        let placed = pollster::block_on(window.resolve()).expect("a window read");
        let reference = Instant::now() - Duration::from_secs(1);
        for (event, at) in [
            (
                start,
                reference + placed.ticks.start_duration_since(reference),
            ),
            (end, reference + placed.ticks.end_duration_since(reference)),
        ] {
            let truth = driver.host_instant(driver.event_truth_ns(event).unwrap());
            let error = at
                .saturating_duration_since(truth)
                .max(truth.saturating_duration_since(at));
            // The truth's own pairing of clocks is good to well under 1 µs.
            assert!(
                error <= placed.uncertainty + Duration::from_micros(1),
                "window {i}: {error:?} from the truth, bound {:?}",
                placed.uncertainty
            );
        }
    }
}

/// Where the device has stream memory operations, the anchor is recorded
/// behind a gate, and windows stay inside their bound.
pub fn the_anchor_is_recorded_behind_a_gate<A: AnchorApi>(driver: &SoftDriver, calls: GateCalls) {
    let streams = Streams::<A>::new(1);
    let mut profiler = refreshing::<A>();
    windows_inside_their_bound(driver, &mut profiler, streams.get(0), 20);
    assert!(
        driver.call_count(calls.wait_value) >= 5,
        "the gate was used"
    );
    assert_eq!(driver.blocked_value_waits(), 0, "no stream is left waiting");
}

/// Where the device has none, the profiler brackets without a gate, and
/// windows stay inside their bound.
pub fn without_stream_memory_operations_the_anchor_is_bracketed<A: AnchorApi>(
    driver: &SoftDriver,
    calls: GateCalls,
) {
    driver.set_stream_mem_ops(false);
    let streams = Streams::<A>::new(1);
    let mut profiler = refreshing::<A>();
    windows_inside_their_bound(driver, &mut profiler, streams.get(0), 20);
    drop(profiler);
    driver.set_stream_mem_ops(true);
    assert_eq!(driver.call_count(calls.wait_value), 0, "no gate was tried");
}

/// A record that fails behind a closed gate, in an anchor refresh, leaves
/// no stream waiting: the gate opens on the error path, while the profiler
/// that holds it lives on.
pub fn a_failure_behind_a_closed_gate_leaves_no_stream_waiting<A: AnchorApi>(
    driver: &SoftDriver,
    calls: GateCalls,
) {
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    let mut profiler = refreshing::<A>();
    windows_inside_their_bound(driver, &mut profiler, s, 2);
    std::thread::sleep(Duration::from_millis(5));
    let waits = driver.call_count(calls.wait_value);
    // The next record is the refresh's first sample, queued behind the
    // gate; out of memory (2 in both ABIs) poisons nothing, so the profiler
    // keeps its previous anchor.
    assert!(driver.fail_call(calls.record, 1, 2));
    let token = profiler.start(s);
    assert_eq!(
        driver.call_count(calls.wait_value),
        waits + 1,
        "the refresh closed the gate before the failed record"
    );
    assert_eq!(driver.blocked_value_waits(), 0, "the gate was opened");
    let window = profiler.stop(s, token).unwrap();
    assert!(
        pollster::block_on(window.resolve()).is_some(),
        "the window is placed on the previous anchor"
    );
}
