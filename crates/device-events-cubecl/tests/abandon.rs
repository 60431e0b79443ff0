//! `abandon_profile` is the one call that needs no sync: CubeCL's servers
//! call it where a window will never be read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use cubecl_runtime::server::{ProfileError, ProfilingToken};
use device_events_core::OwnedStream;
use device_events_core::process::wait_for_calibrations;
use device_events_core::sim::Sim;
use device_events_cubecl::CubeProfiler;

/// The driver's waits so far: event and stream synchronizations.
fn waits() -> (u64, u64) {
    (
        Sim::calls_of("simEventSynchronize"),
        Sim::calls_of("simStreamSynchronize"),
    )
}

#[test]
fn abandoning_a_window_waits_for_nothing() {
    let _sim = Sim::exclusive();
    let s = OwnedStream::<Sim>::new().unwrap();
    let mut profiler = CubeProfiler::<Sim>::new();
    let token = profiler.start(s.get()).unwrap();
    let work = Duration::from_secs(2);
    Sim::enqueue_work(s.get(), work);
    assert!(wait_for_calibrations(Duration::from_secs(5)));
    let before = waits();
    let started = Instant::now();
    profiler.abandon(ProfilingToken { id: token.id });
    assert!(
        started.elapsed() < work / 2,
        "returned before the work is done"
    );
    assert_eq!(waits(), before, "no driver wait");
    assert_eq!(profiler.open_windows(), 0);
    let again = profiler.stop(s.get(), token);
    assert!(matches!(again, Err(ProfileError::NotRegistered { .. })));
}

#[test]
fn a_window_abandoned_before_its_launch_never_opens() {
    let _sim = Sim::exclusive();
    let s = OwnedStream::<Sim>::new().unwrap();
    let mut profiler = CubeProfiler::<Sim>::new();
    let token = profiler.start_at_launch(s.get()).unwrap();
    profiler.abandon(token);
    let records = Sim::calls_of("simEventRecord");
    profiler.launching(s.get());
    assert_eq!(Sim::calls_of("simEventRecord"), records, "nothing recorded");
    assert_eq!(profiler.open_windows(), 0);
}
