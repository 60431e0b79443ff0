//! The OpenCL backend's own behaviour: no loader or no platform is a clear
//! no-device error, statuses keep their OpenCL names, handles are checked,
//! and fences and windows hold up under threads on the real runtime.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

device_events_conformance::tests_need_an_installed_runtime!(
    "an OpenCL platform (PoCL)",
    "cargo xtask test-opencl"
);

mod support;

use device_events_core::{ErrorKind, EventApi, EventFence, OwnedStream};
use device_events_opencl::OpenCl;

fn assert_no_device() {
    let err = OpenCl::probe().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoDevice, "{err}");
    assert!(!err.to_string().contains('\n'), "one line: {err}");
    assert_eq!(
        OpenCl::stream_create_non_blocking().unwrap_err().kind(),
        ErrorKind::NoDevice
    );
    assert_eq!(
        OpenCl::event_create().unwrap_err().kind(),
        ErrorKind::NoDevice
    );
    // Nothing to leak: nothing was made.
    assert_eq!(OpenCl::live_events(), 0);
    eprintln!("{err}");
}

#[test]
#[ignore = "run by no_icd_loader_is_a_no_device_error, in a child process"]
fn child_without_a_loader() {
    assert_no_device();
}

/// The ICD loader hidden: an unloadable `libOpenCL.so.1` first on the
/// loader's path, as on a machine without one.
#[test]
fn no_icd_loader_is_a_no_device_error() {
    let dir = std::env::temp_dir().join(format!("device-events-no-opencl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("libOpenCL.so.1"), b"").unwrap();
    device_events_conformance::run_without_driver(
        "child_without_a_loader",
        &["OPENCL_DYLIB_PATH"],
        &[("LD_LIBRARY_PATH", dir.to_str().unwrap())],
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
#[ignore = "run by no_platform_is_a_no_device_error, in a child process"]
fn child_without_a_platform() {
    assert_no_device();
}

/// The loader present, no platform registered with it (`OCL_ICD_VENDORS`
/// pointed at an empty folder).
#[test]
fn no_platform_is_a_no_device_error() {
    let dir = std::env::temp_dir().join(format!("device-events-no-icd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    device_events_conformance::run_without_driver(
        "child_without_a_platform",
        &[],
        &[("OCL_ICD_VENDORS", dir.to_str().unwrap())],
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_status_keeps_its_opencl_name_and_class() {
    OpenCl::probe().expect("an OpenCL platform with a device");
    let s = OwnedStream::<OpenCl>::new().unwrap();
    let (start, end) = (
        OpenCl::event_create().unwrap(),
        OpenCl::event_create().unwrap(),
    );
    OpenCl::event_record(&start, s.get()).unwrap();
    // Never recorded: refused, as CUDA and HIP refuse it.
    let never = OpenCl::event_elapsed(&start, &end).unwrap_err();
    assert_eq!(never.kind(), ErrorKind::InvalidHandle, "{never}");
    let invalid_event = device_events_opencl::check("clWaitForEvents", Err::<(), _>(-58));
    assert_eq!(invalid_event.unwrap_err().kind(), ErrorKind::InvalidHandle);
    let (mut start, mut end) = (start, end);
    OpenCl::event_destroy(&mut start).unwrap();
    OpenCl::event_destroy(&mut end).unwrap();
}

#[test]
fn a_destroyed_queue_is_refused_before_the_runtime() {
    OpenCl::probe().expect("an OpenCL platform with a device");
    let s = OpenCl::stream_create_non_blocking().unwrap();
    OpenCl::stream_destroy(s).unwrap();
    let err = OpenCl::stream_synchronize(s).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidHandle, "{err}");
    assert_eq!(
        OpenCl::stream_destroy(s).unwrap_err().kind(),
        ErrorKind::InvalidHandle
    );
}

#[test]
fn waiting_on_a_never_recorded_event_completes_at_once() {
    OpenCl::probe().expect("an OpenCL platform with a device");
    let s = OwnedStream::<OpenCl>::new().unwrap();
    let mut never = OpenCl::event_create().unwrap();
    OpenCl::event_wait(&never).unwrap();
    OpenCl::stream_wait_event(s.get(), &never).unwrap();
    OpenCl::stream_synchronize(s.get()).unwrap();
    OpenCl::event_destroy(&mut never).unwrap();
}

/// `EventFence::is_complete` never waits, even while another thread waits
/// on the same fence: asking takes a moment, not the ~second of fills
/// ahead of it.
#[test]
fn asking_a_fence_never_waits_behind_another_threads_wait_on_it() {
    const BYTES: usize = 64 << 20;
    let stream = OwnedStream::<OpenCl>::new().unwrap();
    let fill = support::Fill::new(BYTES);
    let enqueue = |bytes| {
        <support::Fill as device_events_conformance::Workload<OpenCl>>::enqueue_bytes(
            &fill,
            stream.get(),
            bytes,
        )
    };
    // Size about a second of fills from a warm one timed here, enqueue
    // included (a driver may run the work inside it), at most 256.
    enqueue(BYTES).unwrap();
    OpenCl::stream_synchronize(stream.get()).unwrap();
    let started = std::time::Instant::now();
    enqueue(BYTES).unwrap();
    OpenCl::stream_synchronize(stream.get()).unwrap();
    let one = started.elapsed().max(std::time::Duration::from_micros(100));
    let fills = ((1.0 / one.as_secs_f64()).ceil() as usize).min(256);
    let queued = std::time::Instant::now();
    for _ in 0..fills {
        enqueue(BYTES).unwrap();
    }
    assert!(
        queued.elapsed() < std::time::Duration::from_millis(500),
        "queueing {fills} fills took {:?}: this driver runs work inside the \
         enqueue, and the check needs work in flight",
        queued.elapsed()
    );
    let fence = std::sync::Arc::new(EventFence::<OpenCl>::new(stream.get()));
    let waiter = {
        let fence = std::sync::Arc::clone(&fence);
        std::thread::spawn(move || fence.wait_sync())
    };
    // Let the other thread get into its wait.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let asked = std::time::Instant::now();
    let complete = fence.is_complete().unwrap();
    let took = asked.elapsed();
    waiter.join().unwrap().unwrap();
    assert!(!complete, "asked with the fills still running");
    // Tens of milliseconds of slack for a busy machine; the wait it must
    // not sit behind is most of a second.
    assert!(
        took < std::time::Duration::from_millis(200),
        "asking took {took:?}"
    );
}

/// A calibration on the library's thread asks its anchor marker whether it
/// is done (`clGetEventInfo`) and sleeps between asks, as on CUDA and HIP,
/// rather than block in `clWaitForEvents`: a marker queued behind a user
/// event no one has completed reads "not yet", at once, and "done" once
/// the event is.
#[test]
fn a_calibration_asks_its_anchor_instead_of_waiting_for_it() {
    use device_events_core::backend::AnchorApi;
    OpenCl::probe().expect("an OpenCL platform with a device");
    let s = OwnedStream::<OpenCl>::new().unwrap();
    let context = s
        .get()
        .with_raw(|queue| {
            cl3::command_queue::get_command_queue_info(queue, 0x1090) // CL_QUEUE_CONTEXT
                .map(|info| info.to_ptr() as cl3::types::cl_context)
        })
        .unwrap()
        .unwrap();
    let user = cl3::event::create_user_event(context).unwrap();
    s.get()
        .with_raw(|queue| {
            // SAFETY: a live queue; the wait list is one live user event of
            // its context.
            let barrier = unsafe {
                cl3::command_queue::enqueue_barrier_with_wait_list(queue, 1, &raw const user)
            }
            .unwrap();
            // SAFETY: the barrier's own event, not kept.
            unsafe { cl3::event::release_event(barrier) }.unwrap();
        })
        .unwrap();
    let mut anchor = OpenCl::event_create().unwrap();
    OpenCl::event_record(&anchor, s.get()).unwrap();
    let asked = std::time::Instant::now();
    let answer = <OpenCl as AnchorApi>::poll(&anchor).map(Result::unwrap);
    let took = asked.elapsed();
    cl3::event::set_user_event_status(user, 0).unwrap(); // CL_COMPLETE
    // SAFETY: made above, released once, its status set.
    unsafe { cl3::event::release_event(user) }.unwrap();
    assert_eq!(
        answer,
        Some(false),
        "asked, and not done behind the user event"
    );
    assert!(
        took < std::time::Duration::from_millis(200),
        "asking took {took:?}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while <OpenCl as AnchorApi>::poll(&anchor).map(Result::unwrap) != Some(true) {
        assert!(
            std::time::Instant::now() < deadline,
            "done once the event is"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    OpenCl::event_destroy(&mut anchor).unwrap();
}
