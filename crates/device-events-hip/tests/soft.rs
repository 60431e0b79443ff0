//! The HIP backend on the software driver alone: what needs its control API
//! or two devices.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

device_events_conformance::tests_run_on_the_software_driver!();

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
    let window = profiler.stop(s, token).unwrap();
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

/// A host word `stream` waits on until [`Held::release`]: the stream's
/// work is held for as long as the test says, however loaded the machine.
struct Held(*mut std::ffi::c_void);

// SAFETY: a host address, written atomically.
unsafe impl Send for Held {}

impl Held {
    fn on(stream: device_events_hip::HipStream) -> Self {
        let mut word = std::ptr::null_mut();
        // SAFETY: `word` is writable; freed in `Drop`, once the stream no
        // longer waits on it (the tests drain or destroy it first).
        check("hipExtMallocWithFlags", unsafe {
            cubecl_hip_sys::hipExtMallocWithFlags(
                &mut word,
                8,
                cubecl_hip_sys::hipMallocSignalMemory,
            )
        });
        stream
            .with_raw(|raw| {
                // SAFETY: the stream is held live meanwhile; signal memory
                // starts at 1: wait for 2.
                check("hipStreamWaitValue32", unsafe {
                    cubecl_hip_sys::hipStreamWaitValue32(
                        raw.cast(),
                        word,
                        2,
                        cubecl_hip_sys::hipStreamWaitValueGte,
                        u32::MAX,
                    )
                })
            })
            .unwrap();
        Self(word)
    }

    fn release(&self) {
        // SAFETY: live until `Drop`.
        unsafe { std::sync::atomic::AtomicU32::from_ptr(self.0.cast()) }
            .store(2, std::sync::atomic::Ordering::Release);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.release();
        // SAFETY: allocated in `on`, freed once.
        let _ = unsafe { cubecl_hip_sys::hipFree(self.0) };
    }
}

fn check(call: &'static str, status: cubecl_hip_sys::hipError_t) {
    device_events_hip::check(call, status).unwrap();
}

/// A stream of this crate's, or one made by hand and admitted (whose
/// `stream_destroy` forgets it), and the raw stream to destroy after.
fn made_or_admitted(admitted: bool) -> (device_events_hip::HipStream, Option<usize>) {
    if !admitted {
        return (support::stream(), None);
    }
    let mut raw = std::ptr::null_mut();
    // SAFETY: `raw` is writable.
    check("hipStreamCreateWithFlags", unsafe {
        cubecl_hip_sys::hipStreamCreateWithFlags(&mut raw, 1)
    });
    // SAFETY: a stream of device 0, destroyed by the caller once forgotten.
    let s = unsafe { Hip::stream_from_raw(raw.cast(), 0) }.unwrap();
    (s, Some(raw as usize))
}

/// Start `Hip::stream_destroy(s)` on a thread of its own, and return once
/// it has made its `nth` call of `call` since: draining the stream while
/// it is live (`hipStreamSynchronize`), or destroying it, out of the table
/// (`hipStreamDestroy`).
fn destroy_in_background(
    soft: &SoftDriver,
    s: device_events_hip::HipStream,
    call: &str,
    nth: u64,
) -> std::thread::JoinHandle<Result<(), device_events_core::DriverError>> {
    let calls = soft.call_count(call);
    let destroy = std::thread::spawn(move || Hip::stream_destroy(s));
    until_called(soft, call, calls + nth);
    destroy
}

/// Wait until `call` has been made `count` times since the last reset;
/// fail after 10 s.
fn until_called(soft: &SoftDriver, call: &str, count: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while soft.call_count(call) < count {
        assert!(
            std::time::Instant::now() < deadline,
            "no {call} within 10 s"
        );
        std::thread::yield_now();
    }
}

/// A stream being destroyed whose destroy is in the runtime, waiting for
/// `late`: work queued on the stream while its drain (before the destroy)
/// ran, so the drain did not wait for it. The fence recorded after `late`
/// is in the window where the runtime can no longer be asked about it.
struct Closing {
    /// Freed last: `hipFree` waits for every stream of the device.
    _early: Held,
    late: Held,
    fence: device_events_core::EventFence<Hip>,
    /// An event recorded after `late` too, to drop meanwhile.
    event: device_events_hip::HipEvent,
    destroy: std::thread::JoinHandle<Result<(), device_events_core::DriverError>>,
}

impl Closing {
    fn begin(soft: &SoftDriver) -> Self {
        let s = support::stream();
        let early = Held::on(s);
        // The drain waits for `early`.
        let destroy = destroy_in_background(soft, s, "hipStreamSynchronize", 1);
        let late = Held::on(s);
        let fence = device_events_core::EventFence::<Hip>::new(s);
        let event = Hip::event_create().unwrap();
        Hip::event_record(&event, s).unwrap();
        let destroys = soft.call_count("hipStreamDestroy");
        early.release();
        until_called(soft, "hipStreamDestroy", destroys + 1);
        Self {
            _early: early,
            late,
            fence,
            event,
            destroy,
        }
    }
}

/// Until a destroy (or forget) of its stream has drained the stream, a
/// fence recorded there is not complete, and a wait on it returns only once
/// the work is done: asked of the runtime while the drain runs (the stream
/// still live), and not asked at all once the runtime destroys the stream.
#[test]
fn a_fence_is_complete_only_once_a_destroy_of_its_stream_has_drained_it() {
    let soft = SoftDriver::exclusive();
    bind(0);
    for admitted in [false, true] {
        let (s, raw) = made_or_admitted(admitted);
        let held = Held::on(s);
        let fence = device_events_core::EventFence::<Hip>::new(s);
        let destroy = destroy_in_background(&soft, s, "hipStreamSynchronize", 1);
        assert!(
            !fence.is_complete().unwrap(),
            "read complete while its stream's work is held (admitted: {admitted})"
        );
        let waiter = std::thread::spawn(move || {
            fence.wait_sync().unwrap();
            std::time::Instant::now()
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        let released = std::time::Instant::now();
        held.release();
        destroy.join().unwrap().unwrap();
        let waited_until = waiter.join().unwrap();
        assert!(
            waited_until >= released,
            "wait_sync returned {:?} before the stream's work was let go (admitted: {admitted})",
            released - waited_until
        );
        drop(held);
        if let Some(raw) = raw {
            // SAFETY: forgotten and drained above; destroyed once.
            check("hipStreamDestroy", unsafe {
                cubecl_hip_sys::hipStreamDestroy(raw as _)
            });
        }
    }
    device_events_core::process::release_idle_events();
}

/// Once the runtime is destroying the stream (which it no longer counts as
/// valid), a fence recorded there reads not complete without the runtime
/// being asked, a wait on it waits for the destroy, and an event recorded
/// there and dropped meanwhile is destroyed once the destroy has returned,
/// the thread that dropped it never waiting.
#[test]
fn a_fence_in_a_stream_the_runtime_is_destroying_is_not_complete_and_not_asked() {
    let soft = SoftDriver::exclusive();
    bind(0);
    let closing = Closing::begin(&soft);
    let asked = soft.call_count("hipEventQuery") + soft.call_count("hipEventSynchronize");
    assert!(!closing.fence.is_complete().unwrap());
    assert_eq!(
        soft.call_count("hipEventQuery") + soft.call_count("hipEventSynchronize"),
        asked
    );
    let destroyed = soft.call_count("hipEventDestroy");
    let mut event = closing.event;
    Hip::event_destroy(&mut event).unwrap();
    assert_eq!(
        soft.call_count("hipEventDestroy"),
        destroyed,
        "destroyed while its stream is"
    );
    let fence = closing.fence;
    let waiter = std::thread::spawn(move || {
        fence.wait_sync().unwrap();
        soft_now()
    });
    std::thread::sleep(std::time::Duration::from_millis(20));
    let released = soft_now();
    closing.late.release();
    closing.destroy.join().unwrap().unwrap();
    assert!(
        waiter.join().unwrap() >= released,
        "the wait returned before the work was done"
    );
    assert_eq!(soft.call_count("hipEventDestroy"), destroyed + 1);
    drop(closing.late);
    device_events_core::process::release_idle_events();
}

/// The software driver's clock, which its truths are on.
fn soft_now() -> u64 {
    SoftDriver::get().unwrap().host_now_ns()
}

/// clr adds no wait on an event whose stream it is destroying: a stream
/// made to wait on such a fence waits for the destroy's end instead, on the
/// host, so its later work never runs before the destroyed stream's.
#[test]
fn a_wait_on_a_fence_of_a_stream_being_destroyed_is_never_dropped() {
    let soft = SoftDriver::exclusive();
    bind(0);
    let closing = Closing::begin(&soft);
    let w = support::stream();
    let fence = closing.fence;
    let waiter = std::thread::spawn(move || {
        fence.wait_async(w).unwrap();
        let after = device_events_core::EventFence::<Hip>::new(w);
        let recorded = SoftDriver::get().unwrap().last_recorded_event();
        (after, recorded)
    });
    std::thread::sleep(std::time::Duration::from_millis(20));
    let released = soft_now();
    closing.late.release();
    closing.destroy.join().unwrap().unwrap();
    let (after, recorded) = waiter.join().unwrap();
    after.wait_sync().unwrap();
    let reached = soft.event_truth_ns(recorded).unwrap();
    assert!(
        reached >= released,
        "the waiter's later work ran {} ns before the stream it waits for was let go",
        released - reached
    );
    drop((after, closing.event, closing.late));
    Hip::stream_destroy(w).unwrap();
    device_events_core::process::release_idle_events();
}

/// A stream wait on a fence of a stream being destroyed waits for that
/// destroy holding no stream: the waiting stream's own destroy, meanwhile,
/// returns without waiting for the other stream's work.
#[test]
fn a_stream_waiting_out_anothers_destroy_can_itself_be_destroyed() {
    let soft = SoftDriver::exclusive();
    bind(0);
    let closing = Closing::begin(&soft);
    let w = support::stream();
    let fence = closing.fence;
    let waiter = std::thread::spawn(move || fence.wait_async(w).map_err(|e| e.kind()));
    std::thread::sleep(std::time::Duration::from_millis(20));
    let destroyed_w =
        device_events_conformance::within(std::time::Duration::from_secs(10), move || {
            Hip::stream_destroy(w).is_ok()
        });
    closing.late.release();
    closing.destroy.join().unwrap().unwrap();
    assert_eq!(
        destroyed_w,
        Some(true),
        "the waiter's destroy waited for the other stream"
    );
    // Its stream gone meanwhile, or waited for: either is an answer.
    let _ = waiter.join().unwrap();
    drop((closing.event, closing.late));
    device_events_core::process::release_idle_events();
}

/// From inside `with_raw`, a wait for a fence whose stream the runtime is
/// destroying is refused rather than waited for: that destroy could be
/// waiting for a call on the stream this thread holds.
#[test]
fn a_wait_from_inside_with_raw_for_a_stream_being_destroyed_is_refused() {
    let soft = SoftDriver::exclusive();
    bind(0);
    let closing = Closing::begin(&soft);
    let other = support::stream();
    let refused = other
        .with_raw(|_| closing.fence.wait_sync().map_err(|e| e.to_string()))
        .unwrap();
    let err = refused.unwrap_err();
    assert!(err.contains("inside with_raw"), "{err}");
    closing.late.release();
    closing.destroy.join().unwrap().unwrap();
    closing.fence.wait_sync().unwrap();
    drop((closing.fence, closing.event, closing.late));
    Hip::stream_destroy(other).unwrap();
    device_events_core::process::release_idle_events();
}

/// clr's `hipEventDestroy` and `hipStreamWaitEvent` check the stream of the
/// event's last record and then use it with no lock held: that stream is
/// held across each call, so a destroy of it waits for the call, and the
/// runtime never uses a stream it is freeing (counted on the software
/// driver with the gap between the check and the use widened to 300 ms).
#[test]
fn an_event_destroyed_or_waited_on_holds_the_stream_it_was_recorded_on() {
    let soft = SoftDriver::exclusive();
    bind(0);
    for wait in [false, true] {
        let (s, w) = (support::stream(), support::stream());
        let mut event = Hip::event_create().unwrap();
        Hip::event_record(&event, s).unwrap();
        soft.set_check_to_use_ns(300_000_000);
        let gaps = soft.check_to_use_gaps();
        let user = std::thread::spawn(move || {
            if wait {
                Hip::stream_wait_event(w, &event)
            } else {
                Hip::event_destroy(&mut event)
            }
        });
        // Past the runtime's check, inside its gap.
        while soft.check_to_use_gaps() == gaps {
            std::thread::yield_now();
        }
        Hip::stream_destroy(s).unwrap();
        user.join().unwrap().unwrap();
        soft.set_check_to_use_ns(0);
        Hip::stream_destroy(w).unwrap();
    }
}

/// Run by the test below, with the runtime playing ROCm 5.6.
#[test]
#[ignore = "run by the test below, in a child process"]
fn child_with_a_rocm_5_6_runtime() {
    let err = Hip::probe().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Other, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("5.6.0") && text.contains("older than ROCm 5.7"),
        "{text}"
    );
    let err = Hip::stream_create_non_blocking().unwrap_err();
    assert!(err.to_string().contains("older than ROCm 5.7"), "{err}");
    // What it is, still said.
    assert_eq!(Hip::runtime().unwrap().runtime_version, 50_600_000);
}

/// Before ROCm 5.7 `hipEventDestroy` reads the stream of the event's last
/// record unchecked, so a fence dropped after its stream would read freed
/// memory: a runtime with a device and an older version is refused, with
/// its version and the reason in the error.
#[test]
fn a_runtime_older_than_rocm_5_7_is_refused_with_a_clear_error() {
    device_events_conformance::run_without_driver(
        "child_with_a_rocm_5_6_runtime",
        &[],
        &[("SOFT_DRIVER_HIP_VERSION", "50600000")],
    );
}

/// A fence's event is made with `hipEventDisableTiming`, the fast kind to
/// record, query and wait on: the runtime refuses its elapsed time, which a
/// window's event gives.
#[test]
fn a_fences_event_has_no_timing_and_a_windows_has() {
    let soft = SoftDriver::exclusive();
    bind(0);
    let s = support::stream();
    let elapsed_of_itself = |event: usize| {
        let mut ms = 0.0f32;
        // SAFETY: a live event, recorded and reached; `ms` is writable.
        unsafe { cubecl_hip_sys::hipEventElapsedTime(&mut ms, event as _, event as _) }
    };
    let fence = device_events_core::EventFence::<Hip>::new(s);
    let fenced = soft.last_recorded_event();
    fence.wait_sync().unwrap();
    assert_eq!(
        elapsed_of_itself(fenced),
        cubecl_hip_sys::hipError_t_hipErrorInvalidHandle,
        "a fence's event has timing"
    );
    let mut profiler = device_events_core::EventProfiler::<Hip>::new();
    let token = profiler.start(s);
    let started = soft.last_recorded_event();
    let window = profiler.stop(s, token).unwrap();
    assert!(pollster::block_on(window.resolve()).is_some());
    assert_eq!(elapsed_of_itself(started), cubecl_hip_sys::HIP_SUCCESS);
    drop((fence, profiler));
    Hip::stream_destroy(s).unwrap();
}
