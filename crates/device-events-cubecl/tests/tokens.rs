//! CubeCL's tokens carry the core's key: a spent one is refused, even once
//! its window's slot holds another.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cubecl_runtime::server::{ProfileError, ProfilingToken, ServerError};
use device_events_core::OwnedStream;
use device_events_core::sim::Sim;
use device_events_cubecl::CubeProfiler;

#[test]
fn a_spent_token_is_refused_once_its_slot_holds_another_window() {
    let _sim = Sim::exclusive();
    let s = OwnedStream::<Sim>::new().unwrap();
    let mut profiler = CubeProfiler::<Sim>::new();
    let spent = profiler.start(s.get()).unwrap();
    let spent = ProfilingToken { id: spent.id };
    drop(
        profiler
            .stop(s.get(), ProfilingToken { id: spent.id })
            .unwrap(),
    );
    let live = profiler.start(s.get()).unwrap();
    let again = profiler.stop(s.get(), spent);
    assert!(matches!(again, Err(ProfileError::NotRegistered { .. })));
    assert_eq!(profiler.open_windows(), 1, "the live window is untouched");
    assert!(profiler.stop(s.get(), live).is_ok());
}

#[test]
fn a_token_this_profiler_never_made_is_refused() {
    let _sim = Sim::exclusive();
    let s = OwnedStream::<Sim>::new().unwrap();
    let mut profiler = CubeProfiler::<Sim>::new();
    let live = profiler.start(s.get()).unwrap();
    for id in [live.id ^ 1, live.id + (1 << 32), u64::MAX, 1 << 63] {
        let read = profiler.stop(s.get(), ProfilingToken { id });
        assert!(
            matches!(read, Err(ProfileError::NotRegistered { .. })),
            "{id:#x}"
        );
    }
    assert!(profiler.stop(s.get(), live).is_ok());
}

#[test]
fn a_failure_fails_every_open_window_and_spares_a_later_one() {
    let _sim = Sim::exclusive();
    let s = OwnedStream::<Sim>::new().unwrap();
    let mut profiler = CubeProfiler::<Sim>::new();
    let open = profiler.start(s.get()).unwrap();
    let waiting = profiler.start_at_launch(s.get()).unwrap();
    profiler.failure(&ServerError::Skipped);
    let later = profiler.start(s.get()).unwrap();
    assert_eq!(profiler.open_windows(), 3);
    for token in [open, waiting] {
        let read = profiler.stop(s.get(), token);
        assert!(matches!(read, Err(ProfileError::Server(_))));
    }
    assert!(profiler.stop(s.get(), later).is_ok());
    assert_eq!(profiler.open_windows(), 0);
}

/// A window opened at its launch is failed once: counted once, read once
/// as the server's error, and gone after.
#[test]
fn a_failure_fails_a_window_opened_at_its_launch_once() {
    let _sim = Sim::exclusive();
    let s = OwnedStream::<Sim>::new().unwrap();
    let mut profiler = CubeProfiler::<Sim>::new();
    let token = profiler.start_at_launch(s.get()).unwrap();
    profiler.launching(s.get());
    profiler.failure(&ServerError::Skipped);
    assert_eq!(profiler.open_windows(), 1);
    let read = profiler.stop(s.get(), token);
    assert!(matches!(read, Err(ProfileError::Server(_))));
    assert_eq!(profiler.open_windows(), 0);
}
