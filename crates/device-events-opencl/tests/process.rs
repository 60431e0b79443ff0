//! The OpenCL backend's exit and fork handlers, as CUDA's and HIP's: at
//! the process's exit no library thread is left in the runtime, and a child
//! made by `fork` inherits no library call in flight. Its own binary: a
//! child of a process running other tests could inherit a lock one of them
//! held.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

device_events_conformance::tests_need_an_installed_runtime!(
    "an OpenCL platform (PoCL)",
    "cargo xtask test-opencl"
);

use std::time::{Duration, Instant};

use device_events_conformance::fork::status_of;

use device_events_core::process::{stop_driver_calls, wait_for_calibrations};
use device_events_core::{AnchorConfig, EventProfiler, OwnedStream, ProfilerConfig};
use device_events_opencl::OpenCl;

/// A profiler whose first calibration takes `samples` brackets, each a
/// marker recorded and asked after: seconds of anchoring on PoCL, in
/// flight on the calibrator thread when this returns.
fn calibrating(samples: usize) -> (OwnedStream<OpenCl>, EventProfiler<OpenCl>) {
    OpenCl::probe().expect("an OpenCL platform with a device: cargo xtask test installs PoCL");
    let stream = OwnedStream::<OpenCl>::new().unwrap();
    let mut profiler = EventProfiler::<OpenCl>::with_config(ProfilerConfig {
        anchor: AnchorConfig {
            calibration_samples: samples,
            // The brackets alone: the driver's stamps are not asked for.
            driver_pairing: device_events_core::DriverPairing::Off,
            ..AnchorConfig::default()
        },
        ..ProfilerConfig::default()
    });
    let token = profiler.start(stream.get());
    profiler.abandon(token).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        !wait_for_calibrations(Duration::ZERO),
        "the calibration is in flight"
    );
    (stream, profiler)
}

/// Registered before the runtime loads, so it runs after every exit
/// handler registered since, the library's and the runtime's: whether a
/// library thread is still inside work that calls the runtime then. A
/// child that finds one leaves with status 3.
extern "C" fn no_library_thread_in_the_runtime() {
    if !stop_driver_calls(Duration::ZERO) {
        // SAFETY: ends the process at once, with the finding as its status.
        unsafe { libc::_exit(3) };
    }
}

/// In a process of its own: exits while a calibration of a million
/// samples is in flight.
#[test]
#[ignore = "run in a process of its own by the test below"]
fn child_exits_with_a_calibration_in_flight() {
    // SAFETY: registers a function of no arguments that does not unwind.
    unsafe { libc::atexit(no_library_thread_in_the_runtime) };
    let held = calibrating(1_000_000);
    std::mem::forget(held);
    std::process::exit(0);
}

/// Using the runtime while its exit handlers tear it down is undefined: a
/// process that exits with a calibration in flight has no library thread
/// inside work that calls the runtime once the exit handlers have run.
#[test]
fn exiting_with_a_calibration_in_flight_leaves_the_runtime_before_its_teardown() {
    let child = "child_exits_with_a_calibration_in_flight";
    let mut process = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", child, "--ignored", "--test-threads=1"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = process.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = process.kill();
            let _ = process.wait();
            panic!("{child} did not exit within 60 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        status.success(),
        "{child}: {status} (3: a library thread was still in the runtime after the exit handlers)"
    );
}

/// A child made by `fork` during a calibration has none of the parent's
/// threads: the fork handlers leave it no library call in flight, so its
/// own exit handler does not wait for the parent's calibration to leave
/// the runtime (it never would).
#[test]
fn a_child_forked_during_a_calibration_has_no_library_call_in_flight() {
    let (stream, profiler) = calibrating(20_000);
    // SAFETY: the child only asks the library's counters and leaves with
    // `_exit`; the other threads are the library's (fenced off by the fork
    // handlers) and the other test's, which only waits for a process.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        let none = stop_driver_calls(Duration::ZERO);
        // SAFETY: leaves the child at once, with the finding as its status.
        unsafe { libc::_exit(i32::from(!none)) };
    }
    let status = status_of(child, Duration::from_secs(10));
    drop(profiler);
    assert!(
        wait_for_calibrations(Duration::from_secs(120)),
        "the calibration ended"
    );
    drop(stream);
    assert_eq!(
        status,
        Some(0),
        "1: the child inherited the parent's calibration in flight; None: hung, killed"
    );
}
