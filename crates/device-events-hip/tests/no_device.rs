//! AMD's own HIP runtime on a machine without an AMD GPU: it is found and
//! reports its version, and every way in to a fence or a window says "no
//! device" as an error, with no panic, abort or hang.
//!
//! Ignored by plain `cargo test`: it holds only where a real runtime is
//! installed and no GPU is present. `cargo xtask test` installs Debian's
//! `libamdhip64-5` (ROCm 5.2.3) and runs it with `--ignored`, the software
//! driver off every search path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::mpsc;
use std::time::Duration;

use device_events_core::{DriverError, ErrorKind, EventApi, EventProfiler, FencePool, OwnedStream};
use device_events_hip::Hip;

/// Runs `body` on its own thread: a runtime that hangs fails the test in
/// 30 s rather than stalling CI.
fn within_30s<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || done.send(body()));
    result
        .recv_timeout(Duration::from_secs(30))
        .expect("the runtime answered within 30 s")
}

fn assert_no_device<T: std::fmt::Debug>(what: &str, outcome: Result<T, DriverError>) {
    let err = outcome.expect_err(what);
    assert_eq!(err.kind(), ErrorKind::NoDevice, "{what}: {err}");
    eprintln!("{what}: {err}");
}

#[test]
#[ignore = "needs AMD's HIP runtime and no AMD GPU; cargo xtask test runs it"]
fn amds_runtime_is_found_and_reports_its_version() {
    let found = within_30s(Hip::runtime).unwrap();
    eprintln!("{found}, driver version {}", found.driver_version);
    assert!(
        found.runtime_version >= 50_000_000,
        "ROCm 5.0 or later: {found}"
    );
    assert!(found.driver_version > 0, "{found:?}");
}

#[test]
#[ignore = "needs AMD's HIP runtime and no AMD GPU; cargo xtask test runs it"]
fn probing_without_a_gpu_is_a_no_device_error() {
    let err = within_30s(Hip::probe).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoDevice, "{err}");
    // What AMD's runtime answers `hipInit` with no GPU.
    assert_eq!(err.status(), Some(101), "{err}");
    assert!(err.to_string().contains("hipErrorInvalidDevice"), "{err}");
}

#[test]
#[ignore = "needs AMD's HIP runtime and no AMD GPU; cargo xtask test runs it"]
fn every_way_to_a_fence_or_window_is_a_no_device_error() {
    within_30s(|| {
        // A fence or window needs a stream; none can be had, or admitted.
        assert_no_device("a stream", OwnedStream::<Hip>::new());
        assert_no_device("a raw stream", Hip::stream_create_non_blocking());
        // SAFETY: the null stream; refused, as device 0 does not exist.
        assert_no_device("the null stream", unsafe {
            Hip::stream_from_raw(std::ptr::null_mut(), 0)
        });
        assert_no_device("an event", Hip::event_create());
        // Pools and profilers ask the runtime for nothing until used.
        let pool = FencePool::<Hip>::new();
        let profiler = EventProfiler::<Hip>::new();
        assert_eq!(profiler.open_windows(), 0);
        drop((pool, profiler));
    });
}
