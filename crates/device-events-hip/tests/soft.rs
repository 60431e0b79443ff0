//! The HIP backend on the software driver alone: what needs its control API
//! or two devices.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use device_events_conformance::soft::SoftDriver;
use device_events_core::{ErrorKind, EventApi};
use device_events_hip::Hip;
use support::bind;

device_events_conformance::contract_suite!(
    Hip,
    device_events_conformance::contract::Abi {
        bind,
        current: || {
            let mut device = 0;
            // SAFETY: `device` is writable.
            (unsafe { cubecl_hip_sys::hipGetDevice(&mut device) } == 0).then_some(device)
        },
        create: "hipEventCreateWithFlags",
        record: "hipEventRecord",
        synchronize: "hipEventSynchronize",
        stream_synchronize: "hipStreamSynchronize",
        stream_wait: "hipStreamWaitEvent",
        stream_destroy: "hipStreamDestroy",
        poisoning: (719, "hipErrorLaunchFailure"),
    }
);

device_events_conformance::lanes_suite!(
    Hip,
    device_events_conformance::lanes::LaneAbi::<Hip> {
        bind,
        work: |bytes| Box::new(support::Memset::new(bytes)),
        // `hipStreamPerThread` is refused (`the_per_thread_stream_is_not_admitted`).
        per_thread: None,
    },
    no_per_thread
);

#[test]
fn only_the_documented_functions_are_called() {
    let soft = SoftDriver::exclusive();
    bind(0);
    device_events_conformance::only_documented_functions_are_called::<Hip>(
        &soft,
        &[
            "hipInit",
            "hipGetDevice",
            "hipSetDevice",
            "hipEventCreateWithFlags",
            "hipEventRecord",
            "hipEventSynchronize",
            "hipEventQuery",
            "hipEventElapsedTime",
            "hipEventDestroy",
            "hipStreamCreateWithFlags",
            "hipStreamWaitEvent",
            "hipStreamSynchronize",
            "hipStreamDestroy",
            "hipStreamIsCapturing",
            "hipThreadExchangeStreamCaptureMode",
            "hipGetErrorName",
            "hipDeviceGetAttribute",
            "hipExtMallocWithFlags",
            "hipStreamWaitValue32",
            "hipFree",
        ],
        Hip::capture_status,
    );
}

device_events_conformance::anchoring_suite!(
    Hip,
    device_events_conformance::anchoring::GateCalls {
        wait_value: "hipStreamWaitValue32",
        record: "hipEventRecord",
    },
    bind(0)
);

#[test]
fn fences_and_profilers_leak_nothing() {
    let soft = SoftDriver::exclusive();
    bind(0);
    device_events_conformance::fences_and_profilers_leak_nothing::<Hip>(&soft);
}

#[test]
fn admitting_a_stream_of_a_device_that_does_not_exist_says_so() {
    let _soft = SoftDriver::exclusive();
    bind(0);
    // SAFETY: refused before anything uses the stream.
    let err =
        unsafe { device_events_hip::Hip::stream_from_raw(std::ptr::null_mut(), 7) }.unwrap_err();
    assert!(err.to_string().contains("device 7 does not exist"), "{err}");
    assert_eq!(err.kind(), ErrorKind::NoDevice);
}

#[test]
fn the_null_stream_of_another_device_is_used_with_that_device_bound() {
    let _soft = SoftDriver::exclusive();
    bind(1);
    let event = Hip::event_create().unwrap();
    bind(0);
    // SAFETY: the null stream of device 1 is always live.
    let null = unsafe { device_events_hip::Hip::stream_from_raw(std::ptr::null_mut(), 1) }.unwrap();
    Hip::event_record(&event, null).unwrap();
    Hip::stream_synchronize(null).unwrap();
    let mut event = event;
    Hip::event_destroy(&mut event).unwrap();
    Hip::stream_destroy(null).unwrap();
}

/// Run by the layout tests below, with the search pointed at one layout.
#[test]
#[ignore = "run by the layout tests, in a child process"]
fn child_finds_the_runtime_with_a_device() {
    let found = Hip::runtime().unwrap();
    Hip::probe().unwrap();
    eprintln!("{found}");
}

/// A runtime-only ROCm install has `libamdhip64.so.5` (or `.so.6`, `.so.7`),
/// no unversioned name and no `libhiprtc`: found on the loader's path.
#[test]
fn a_runtime_laid_out_as_a_rocm_5_soname_only_is_found_on_the_loader_path() {
    let dir = device_events_conformance::soft::laid_out_as(&["libamdhip64.so.5"]);
    device_events_conformance::run_without_driver(
        "child_finds_the_runtime_with_a_device",
        &["ROCM_PATH", "HIP_PATH"],
        &[("LD_LIBRARY_PATH", dir.to_str().unwrap())],
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The same under `$ROCM_PATH/lib`, with ROCm 7's soname.
#[test]
fn a_runtime_laid_out_as_a_rocm_7_soname_only_is_found_under_rocm_path() {
    let root = device_events_conformance::soft::laid_out_as(&[]);
    let lib = root.join("lib");
    std::fs::create_dir(&lib).unwrap();
    let soft = std::env::var_os(device_events_conformance::soft::LIB_VAR).unwrap();
    std::os::unix::fs::symlink(soft, lib.join("libamdhip64.so.7")).unwrap();
    device_events_conformance::run_without_driver(
        "child_finds_the_runtime_with_a_device",
        &["LD_LIBRARY_PATH", "HIP_PATH"],
        &[("ROCM_PATH", root.to_str().unwrap())],
    );
    let _ = std::fs::remove_dir_all(root);
}

/// Run by `a_runtime_already_loaded_is_used_not_a_second_copy`.
#[test]
#[ignore = "run by a_runtime_already_loaded_is_used_not_a_second_copy, in a child process"]
fn child_with_the_runtime_already_loaded() {
    // As the user's own bindings open it (cubecl-hip-sys: the bare soname).
    // SAFETY: the software driver's initialisers only set up its state.
    let _users = unsafe { libloading::Library::new("libamdhip64.so") }.unwrap();
    let found = Hip::runtime().unwrap();
    assert_eq!(
        found.path,
        std::path::PathBuf::from("libamdhip64.so"),
        "the runtime already loaded, not {}",
        found.path.display()
    );
    Hip::probe().unwrap();
}

/// With one runtime on the loader's path, already opened by the user's
/// bindings, and another copy under `$ROCM_PATH/lib` (searched first by
/// path), the backend uses the one already loaded: a second copy would not
/// know the user's streams.
#[test]
fn a_runtime_already_loaded_is_used_not_a_second_copy() {
    let root = device_events_conformance::soft::laid_out_as(&[]);
    let lib = root.join("lib");
    std::fs::create_dir(&lib).unwrap();
    let soft = std::env::var_os(device_events_conformance::soft::LIB_VAR).unwrap();
    // A copy, not a link: another file is another copy of the library.
    std::fs::copy(soft, lib.join("libamdhip64.so")).unwrap();
    device_events_conformance::run_without_driver(
        "child_with_the_runtime_already_loaded",
        &["HIP_PATH"],
        &[("ROCM_PATH", root.to_str().unwrap())],
    );
    let _ = std::fs::remove_dir_all(root);
}

/// Work of `ms` milliseconds on `stream` at 1 GB/s.
fn queue_ms(
    soft: &SoftDriver,
    work: &support::Memset,
    stream: device_events_hip::HipStream,
    ms: usize,
) {
    use device_events_conformance::Workload;
    soft.set_bandwidth(1e9);
    work.enqueue_bytes(stream, ms * 1_000_000).unwrap();
    soft.set_bandwidth(10e9);
}

/// ROCm's runtime reads the stream of an event's last record when the
/// event is asked, freed once `hipStreamDestroy` returned (ROCm/clr#157):
/// a fence whose stream is gone is answered without asking, and complete,
/// since the destroy waited for the stream's work.
#[test]
fn a_fence_asked_after_its_stream_was_destroyed_is_complete_without_asking() {
    let soft = SoftDriver::exclusive();
    bind(0);
    let work = support::Memset::new(64 << 20);
    let misuses = soft.counts().misuses;
    for wait_first in [false, true] {
        let s = support::stream();
        queue_ms(&soft, &work, s, 10);
        let fence = device_events_core::EventFence::<Hip>::new(s);
        Hip::stream_destroy(s).unwrap();
        let asked = soft.call_count("hipEventQuery") + soft.call_count("hipEventSynchronize");
        if wait_first {
            fence.wait_sync().unwrap();
        }
        assert!(fence.is_complete().unwrap());
        fence.wait_sync().unwrap();
        assert_eq!(
            soft.call_count("hipEventQuery") + soft.call_count("hipEventSynchronize"),
            asked,
            "the runtime was asked about an event whose stream it freed"
        );
    }
    device_events_core::process::release_idle_events();
    assert_eq!(soft.counts().misuses, misuses);
}

/// Forgetting an admitted stream drains it, so a fence recorded there
/// reads complete without the runtime being asked, and a capture the
/// owner begins on the stream afterwards is left alone.
#[test]
fn a_fence_on_a_forgotten_stream_that_still_lives_leaves_its_capture_alone() {
    let soft = SoftDriver::exclusive();
    bind(0);
    let work = support::Memset::new(64 << 20);
    let raw = {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is writable.
        device_events_hip::check("hipStreamCreateWithFlags", unsafe {
            cubecl_hip_sys::hipStreamCreateWithFlags(&mut raw, 1)
        })
        .unwrap();
        raw
    };
    // SAFETY: a stream of device 0, destroyed below after it is forgotten.
    let s = unsafe { Hip::stream_from_raw(raw.cast(), 0) }.unwrap();
    queue_ms(&soft, &work, s, 10);
    let fence = device_events_core::EventFence::<Hip>::new(s);
    Hip::stream_destroy(s).unwrap();
    let violations = soft.capture_violations();
    // SAFETY: the stream still lives; `graph` is writable and destroyed once.
    unsafe {
        device_events_hip::check(
            "hipStreamBeginCapture",
            cubecl_hip_sys::hipStreamBeginCapture(
                raw,
                cubecl_hip_sys::hipStreamCaptureMode_hipStreamCaptureModeGlobal,
            ),
        )
        .unwrap();
        assert!(fence.is_complete().unwrap());
        let mut graph = std::ptr::null_mut();
        device_events_hip::check(
            "hipStreamEndCapture",
            cubecl_hip_sys::hipStreamEndCapture(raw, &mut graph),
        )
        .unwrap();
        device_events_hip::check("hipGraphDestroy", cubecl_hip_sys::hipGraphDestroy(graph))
            .unwrap();
    }
    assert_eq!(soft.capture_violations(), violations);
    drop(fence);
    device_events_core::process::release_idle_events();
    // SAFETY: forgotten above, destroyed once.
    device_events_hip::check("hipStreamDestroy", unsafe {
        cubecl_hip_sys::hipStreamDestroy(raw)
    })
    .unwrap();
}

/// `hipStreamPerThread` names another stream on each thread, which the
/// runtime destroys as that thread exits: not admitted.
#[test]
fn the_per_thread_stream_is_not_admitted() {
    let _soft = SoftDriver::exclusive();
    bind(0);
    // SAFETY: refused before anything uses it.
    let err = unsafe { Hip::stream_from_raw(0x2 as _, 0) }.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidHandle, "{err}");
}

/// In a process of its own: a profiler whose first calibration waits
/// behind 10 s of work on the one hardware queue it shares with the
/// user's stream is dropped, and the process exits at once.
#[test]
#[ignore = "run in a process of its own by the test below"]
fn child_exits_with_a_calibration_in_flight() {
    let soft = SoftDriver::get().unwrap();
    soft.set_hw_queues(1);
    bind(0);
    let s = support::stream();
    let work = support::Memset::new(10_000_000_000);
    queue_ms(soft, &work, s, 10_000);
    let mut profiler = device_events_core::EventProfiler::<Hip>::new();
    let token = profiler.start(s);
    profiler.abandon(token).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(
        !device_events_core::process::wait_for_calibrations(std::time::Duration::ZERO),
        "the calibration waits behind the work"
    );
    drop(profiler);
    std::process::exit(0);
}

/// Using the runtime during the host program's termination is undefined
/// (NVIDIA says so of CUDA; clr tears its runtime down in its own exit
/// handlers). A process that exits with a calibration stuck behind long
/// work leaves no library thread in the runtime as its exit handler tears
/// it down, and none calls it after.
#[test]
fn exiting_with_a_calibration_in_flight_leaves_the_runtime_before_its_teardown() {
    let report =
        device_events_conformance::soft::exit_report("child_exits_with_a_calibration_in_flight");
    assert_eq!(
        report,
        device_events_conformance::soft::ExitReport::default(),
        "calls in flight as the runtime's exit handler began, or made after"
    );
}

/// In a process of its own: a calibrated profiler is dropped while 10 s of
/// work runs on another stream of its device, on the one hardware queue
/// its anchor stream shares, so that its release (which drains the anchor
/// stream) waits behind the work; the process exits meanwhile.
#[test]
#[ignore = "run in a process of its own by the test below"]
fn child_exits_while_a_dropped_profiler_is_released() {
    let soft = SoftDriver::get().unwrap();
    soft.set_hw_queues(1);
    bind(0);
    let s = support::stream();
    let mut profiler = device_events_core::EventProfiler::<Hip>::new();
    let token = profiler.start(s);
    let window = profiler.stop_placed(s, token).unwrap();
    assert!(pollster::block_on(window.resolve()).is_some());
    assert!(device_events_core::process::wait_for_calibrations(
        std::time::Duration::from_secs(10)
    ));
    let busy = support::stream();
    let work = support::Memset::new(10_000_000_000);
    queue_ms(soft, &work, busy, 10_000);
    // Its anchor stream and gate are released on the calibrator thread.
    drop(profiler);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(
        !device_events_core::process::wait_for_calibrations(std::time::Duration::ZERO),
        "the release drains the anchor stream behind the work, in flight at exit"
    );
    std::process::exit(0);
}

/// clr's `hipFree` waits for every stream of the device: a dropped
/// profiler's release never waits so, and the process exits with no
/// library thread in the runtime however long the device's work.
#[test]
fn exiting_while_a_dropped_profiler_is_released_leaves_the_runtime_first() {
    let report = device_events_conformance::soft::exit_report(
        "child_exits_while_a_dropped_profiler_is_released",
    );
    assert_eq!(
        report,
        device_events_conformance::soft::ExitReport::default(),
        "calls in flight as the runtime's exit handler began, or made after"
    );
}
