//! Every driver call of a fence lifecycle and of a profiling session made to
//! fail in turn: nothing panics, nothing leaks, every error is seen.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use device_events_core::sim::Sim;
use device_events_core::{ErrorKind, EventFence, EventProfiler, OwnedStream};
use support::{logs, setup};

/// A stream the scenario owns, released on every path.
type Stream = OwnedStream<Sim>;

fn stream() -> Result<Stream, String> {
    OwnedStream::new().map_err(|e: device_events_core::DriverError| e.to_string())
}

/// Errors the scenario was handed, as text.
type Seen = Vec<String>;

fn fence_lifecycle() -> Seen {
    let mut seen = Seen::new();
    let (a, b) = match (stream(), stream()) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => return [a.err(), b.err()].into_iter().flatten().collect(),
    };
    Sim::enqueue_work(a.get(), Duration::from_micros(50));
    let fence = EventFence::<Sim>::new(a.get());
    seen.extend(fence.wait_async(b.get()).err().map(|e| e.to_string()));
    seen.extend(fence.wait_sync().err().map(|e| e.to_string()));
    seen
}

fn profiling_session() -> Seen {
    let mut seen = Seen::new();
    let s = match stream() {
        Ok(s) => s,
        Err(e) => return vec![e],
    };
    let mut profiler = EventProfiler::<Sim>::new();
    let outer = profiler.start(s.get());
    Sim::enqueue_work(s.get(), Duration::from_micros(50));
    let inner = profiler.start(s.get());
    let mut pending = Vec::new();
    for token in [inner, outer] {
        match profiler.stop(s.get(), token) {
            Ok(timing) => pending.push(timing),
            Err(e) => seen.push(e.to_string()),
        }
    }
    for timing in pending {
        // `None` is reported through the log, which the sweep reads.
        let _ = pollster::block_on(timing.resolve());
    }
    seen
}

#[derive(Default, Debug, PartialEq)]
struct Tally {
    points: usize,
    panics: usize,
    leaks: usize,
    lost: usize,
}

fn sweep(scenario: fn() -> Seen) -> Tally {
    let calls = {
        let _sim = setup();
        let seen = scenario();
        assert!(
            seen.is_empty(),
            "the scenario fails with no fault injected: {seen:?}"
        );
        Sim::counts().calls
    };
    assert!(calls > 3, "the scenario makes driver calls");
    let mut tally = Tally::default();
    for n in 1..=calls {
        for kind in [
            ErrorKind::NotReady,
            ErrorKind::DevicePoisoned,
            ErrorKind::OutOfResources,
            ErrorKind::Other,
        ] {
            let _sim = setup();
            Sim::fail_call(n, kind);
            tally.points += 1;
            let Ok(seen) = catch_unwind(AssertUnwindSafe(scenario)) else {
                tally.panics += 1;
                continue;
            };
            // A calibration still running holds the anchor's stream.
            assert!(device_events_core::process::wait_for_calibrations(
                Duration::from_secs(5)
            ));
            let counts = Sim::counts();
            if counts.live_events + counts.live_streams + counts.bad_releases > 0 {
                tally.leaks += 1;
            }
            if let Some(injected) = Sim::injected() {
                let text = injected.to_string();
                let reached = seen
                    .iter()
                    .chain(logs().iter())
                    .any(|line| line.contains(&text));
                if !reached {
                    eprintln!("lost at call {n} ({kind:?}): {text}");
                    tally.lost += 1;
                }
            }
        }
    }
    tally
}

#[test]
fn every_failure_in_a_fence_lifecycle_is_survived_and_seen() {
    let tally = sweep(fence_lifecycle);
    assert!(tally.points > 0);
    assert_eq!(
        (tally.panics, tally.leaks, tally.lost),
        (0, 0, 0),
        "{tally:?}"
    );
}

#[test]
fn every_failure_in_a_profiling_session_is_survived_and_seen() {
    let tally = sweep(profiling_session);
    assert!(tally.points > 0);
    assert_eq!(
        (tally.panics, tally.leaks, tally.lost),
        (0, 0, 0),
        "{tally:?}"
    );
}
