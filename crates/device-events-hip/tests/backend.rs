//! The HIP backend's own behaviour, on the runtime under test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

device_events_conformance::tests_run_on_the_software_driver!();

mod support;

use device_events_conformance::soft::{REAL_VAR, SoftDriver};
use device_events_core::{ErrorKind, EventApi, EventFence};
use device_events_hip::Hip;
use device_events_hip::runtime::RUNTIME_VAR;
use support::{bind, stream};

#[test]
fn an_event_is_waited_timed_and_released_from_another_thread() {
    let _soft = SoftDriver::unless_real();
    bind(0);
    let s = stream();
    let (start, end) = (Hip::event_create().unwrap(), Hip::event_create().unwrap());
    Hip::event_record(&start, s).unwrap();
    Hip::event_record(&end, s).unwrap();
    let outcome = std::thread::spawn(move || {
        let (mut start, mut end) = (start, end);
        Hip::event_wait(&end).unwrap();
        let elapsed = Hip::event_elapsed(&start, &end).is_ok();
        (
            elapsed,
            Hip::event_destroy(&mut start),
            Hip::event_destroy(&mut end),
        )
    })
    .join()
    .unwrap();
    assert_eq!(outcome, (true, Ok(()), Ok(())));
    Hip::stream_destroy(s).unwrap();
}

#[test]
fn a_fence_orders_a_stream_after_the_null_stream() {
    let _soft = SoftDriver::unless_real();
    bind(0);
    let s = stream();
    // SAFETY: the null stream of device 0 is always live.
    let null = unsafe { device_events_hip::Hip::stream_from_raw(std::ptr::null_mut(), 0) }.unwrap();
    let fence = EventFence::<Hip>::new(null);
    fence.wait_async(s).unwrap();
    fence.wait_sync().unwrap();
    Hip::stream_synchronize(s).unwrap();
    Hip::stream_destroy(s).unwrap();
    Hip::stream_destroy(null).unwrap();
}

/// Run in a child process with the loaders pointed nowhere.
#[test]
#[ignore = "run by a_missing_runtime_is_an_error_not_a_panic, in a process without a runtime"]
fn child_without_a_runtime() {
    let err = Hip::probe().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoDevice);
    assert!(err.to_string().contains("no HIP runtime found"), "{err}");
    let line = Hip::runtime().unwrap_err().to_string();
    assert!(
        line.contains("no HIP runtime found") && !line.contains('\n'),
        "{line}"
    );
    assert_eq!(
        Hip::stream_create_non_blocking().unwrap_err().kind(),
        ErrorKind::NoDevice
    );
    assert_eq!(Hip::event_create().unwrap_err().kind(), ErrorKind::NoDevice);
}

#[test]
fn a_missing_runtime_is_an_error_not_a_panic() {
    if std::env::var_os(REAL_VAR).is_some() {
        Hip::probe().unwrap();
        return;
    }
    device_events_conformance::run_without_driver(
        "child_without_a_runtime",
        &[
            "LD_LIBRARY_PATH",
            "ROCM_PATH",
            "HIP_PATH",
            "SOFT_DRIVER_LIB",
        ],
        // A runtime installed system-wide (CI installs AMD's) is hidden too.
        &[(RUNTIME_VAR, "/nonexistent/libamdhip64.so")],
    );
}
