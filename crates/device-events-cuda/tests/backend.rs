//! The CUDA backend's own behaviour, on the driver under test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

device_events_conformance::tests_run_on_the_software_driver!();

mod support;

use cudarc::driver::result;
use device_events_conformance::soft::{REAL_VAR, SoftDriver};
use device_events_core::{ErrorKind, EventApi, EventFence};
use device_events_cuda::Cuda;
use support::{bind, stream};

#[test]
fn an_event_is_waited_timed_and_released_from_a_thread_with_no_context() {
    let _soft = SoftDriver::unless_real();
    bind(0);
    let s = stream();
    let (start, end) = (Cuda::event_create().unwrap(), Cuda::event_create().unwrap());
    Cuda::event_record(&start, s).unwrap();
    Cuda::event_record(&end, s).unwrap();
    let outcome = std::thread::spawn(move || {
        assert_eq!(
            result::ctx::get_current().unwrap(),
            None,
            "a fresh thread has no context"
        );
        let (mut start, mut end) = (start, end);
        Cuda::event_wait(&end).unwrap();
        let elapsed = Cuda::event_elapsed(&start, &end);
        let released = (
            Cuda::event_destroy(&mut start),
            Cuda::event_destroy(&mut end),
        );
        let still_none = result::ctx::get_current().unwrap().is_none();
        (elapsed.is_ok(), released, still_none)
    })
    .join()
    .unwrap();
    assert_eq!(outcome, (true, (Ok(()), Ok(())), true));
    Cuda::stream_destroy(s).unwrap();
}

#[test]
fn a_fence_is_waited_on_from_a_thread_with_no_context() {
    let _soft = SoftDriver::unless_real();
    bind(0);
    let s = stream();
    let fence = EventFence::<Cuda>::new(s);
    std::thread::spawn(move || fence.wait_sync().unwrap())
        .join()
        .unwrap();
    Cuda::stream_destroy(s).unwrap();
}

#[test]
fn creating_without_a_current_context_is_an_error_not_a_panic() {
    let _soft = SoftDriver::unless_real();
    bind(0);
    let (stream, event) = std::thread::spawn(|| {
        (
            Cuda::stream_create_non_blocking().unwrap_err(),
            Cuda::event_create().unwrap_err(),
        )
    })
    .join()
    .unwrap();
    assert!(stream.to_string().contains("no CUDA context"), "{stream}");
    assert_eq!(event.call(), "cuEventCreate");
}

/// Run in a child process with the loaders pointed nowhere: the backend
/// reports a missing driver as an error of the no-device class.
#[test]
#[ignore = "run by a_missing_driver_is_an_error_not_a_panic, in a process without a driver"]
fn child_without_a_driver() {
    let err = Cuda::probe().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoDevice);
    assert!(err.to_string().contains("no CUDA driver found"), "{err}");
    let err = Cuda::stream_create_non_blocking().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoDevice);
    let err = Cuda::event_create().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoDevice);
}

#[test]
fn a_missing_driver_is_an_error_not_a_panic() {
    if std::env::var_os(REAL_VAR).is_some() {
        // The machine's own driver cannot be hidden from the loader here:
        // the probe must find it instead.
        Cuda::probe().unwrap();
        return;
    }
    device_events_conformance::run_without_driver(
        "child_without_a_driver",
        &["LD_LIBRARY_PATH", "SOFT_DRIVER_LIB"],
        &[],
    );
}
