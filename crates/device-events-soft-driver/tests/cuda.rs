//! The software driver's CUDA ABI, held to the driver's documented behaviour
//! through cudarc's `result` API, loaded dynamically as a user's program does.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

device_events_conformance::tests_run_on_the_software_driver!();

mod support;

use std::time::{Duration, Instant};

use cudarc::driver::result::{self, DriverError, stream::StreamKind};
use cudarc::driver::sys::{self, CUresult};
use device_events_conformance::soft::SoftDriver;
use support::{Hold, SURELY, WHILE_HELD, context, event, reached_within};

fn stream() -> sys::CUstream {
    result::stream::create(StreamKind::NonBlocking).unwrap()
}

fn err(code: CUresult) -> DriverError {
    DriverError(code)
}

/// `bytes` of device memory and a memset of them on `stream`.
fn memset(stream: sys::CUstream, bytes: usize) -> sys::CUdeviceptr {
    // SAFETY: the allocation is only ever used for this memset.
    unsafe {
        let ptr = result::malloc_sync(bytes).unwrap();
        result::memset_d8_async(ptr, 0, bytes, stream).unwrap();
        ptr
    }
}

#[test]
fn it_loads_through_cudarc_and_says_it_is_no_gpu() {
    let _soft = SoftDriver::exclusive();
    context(0);
    let device = result::device::get(0).unwrap();
    let name = result::device::get_name(device).unwrap();
    assert!(
        name.contains("software driver") && name.contains("no GPU"),
        "{name}"
    );
    assert!(result::device::get_count().unwrap() >= 1);
}

#[test]
fn a_thread_without_a_current_context_gets_invalid_context() {
    let _soft = SoftDriver::exclusive();
    context(0);
    let other =
        std::thread::spawn(|| result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).err())
            .join()
            .unwrap();
    assert_eq!(other, Some(err(CUresult::CUDA_ERROR_INVALID_CONTEXT)));
}

#[test]
fn a_memset_occupies_its_stream_for_its_size_over_the_bandwidth() {
    let soft = SoftDriver::exclusive();
    context(0);
    soft.set_bandwidth(1e9);
    let (s, start, end) = (stream(), event(), event());
    let host = Instant::now();
    // SAFETY: events and stream are live and of the current context.
    unsafe {
        result::event::record(start, s).unwrap();
        memset(s, 4_000_000); // 4 ms at 1 GB/s
        result::event::record(end, s).unwrap();
        result::stream::synchronize(s).unwrap();
        let ms = result::event::elapsed(start, end).unwrap();
        assert!((4.0..5.0).contains(&ms), "{ms} ms");
    }
    assert!(host.elapsed() >= Duration::from_millis(4));
    soft.set_bandwidth(10e9);
}

#[test]
fn an_event_is_not_ready_until_its_stream_reaches_it() {
    let soft = SoftDriver::exclusive();
    context(0);
    soft.set_bandwidth(1e9);
    let (s, e) = (stream(), event());
    // SAFETY: event and stream are live and of the current context.
    unsafe {
        memset(s, 20_000_000); // 20 ms
        result::event::record(e, s).unwrap();
        assert_eq!(
            result::event::query(e),
            Err(err(CUresult::CUDA_ERROR_NOT_READY))
        );
        result::event::synchronize(e).unwrap();
        assert_eq!(result::event::query(e), Ok(()));
    }
    soft.set_bandwidth(10e9);
}

#[test]
fn a_never_recorded_event_queries_complete() {
    let _soft = SoftDriver::exclusive();
    context(0);
    // SAFETY: the event is live.
    unsafe { assert_eq!(result::event::query(event()), Ok(())) };
}

#[test]
fn elapsed_time_is_quantised_to_half_a_microsecond() {
    let _soft = SoftDriver::exclusive();
    context(0);
    let (s, a, b) = (stream(), event(), event());
    // SAFETY: events and stream are live and of the current context.
    unsafe {
        result::event::record(a, s).unwrap();
        memset(s, 12_345);
        result::event::record(b, s).unwrap();
        result::event::synchronize(b).unwrap();
        let ms = f64::from(result::event::elapsed(a, b).unwrap());
        let half_us = ms * 2000.0;
        assert!((half_us - half_us.round()).abs() < 1e-3, "{ms} ms");
    }
}

#[test]
fn elapsed_time_refuses_unrecorded_untimed_and_unreached_events() {
    let soft = SoftDriver::exclusive();
    context(0);
    soft.set_bandwidth(1e9);
    let (s, a, b) = (stream(), event(), event());
    let untimed = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).unwrap();
    // SAFETY: events and stream are live and of the current context.
    unsafe {
        result::event::record(a, s).unwrap();
        assert_eq!(
            result::event::elapsed(a, b),
            Err(err(CUresult::CUDA_ERROR_INVALID_HANDLE))
        );
        result::event::record(untimed, s).unwrap();
        assert_eq!(
            result::event::elapsed(a, untimed),
            Err(err(CUresult::CUDA_ERROR_INVALID_HANDLE))
        );
        memset(s, 20_000_000);
        result::event::record(b, s).unwrap();
        assert_eq!(
            result::event::elapsed(a, b),
            Err(err(CUresult::CUDA_ERROR_NOT_READY))
        );
        result::stream::synchronize(s).unwrap();
        assert!(result::event::elapsed(a, b).unwrap() >= 20.0);
    }
    soft.set_bandwidth(10e9);
}

#[test]
fn a_stream_wait_orders_the_waiting_stream_after_the_event() {
    let soft = SoftDriver::exclusive();
    context(0);
    soft.set_bandwidth(1e9);
    let (producer, consumer, done, after) = (stream(), stream(), event(), event());
    // SAFETY: events and streams are live and of the current context.
    unsafe {
        memset(producer, 10_000_000); // 10 ms
        result::event::record(done, producer).unwrap();
        result::stream::wait_event(
            consumer,
            done,
            sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
        )
        .unwrap();
        result::event::record(after, consumer).unwrap();
        result::event::synchronize(after).unwrap();
        assert_eq!(result::event::query(done), Ok(()));
        let ms = result::event::elapsed(done, after).unwrap();
        assert!(ms >= 0.0, "{ms}");
        let truth_done = soft.event_truth_ns(done as usize).unwrap();
        let truth_after = soft.event_truth_ns(after as usize).unwrap();
        assert!(truth_after >= truth_done);
    }
    soft.set_bandwidth(10e9);
}

#[test]
fn waiting_on_a_never_recorded_event_completes_at_once() {
    let _soft = SoftDriver::exclusive();
    context(0);
    let (s, never, e) = (stream(), event(), event());
    // SAFETY: events and stream are live and of the current context.
    unsafe {
        result::stream::wait_event(s, never, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
            .unwrap();
        result::event::record(e, s).unwrap();
        let started = Instant::now();
        result::event::synchronize(e).unwrap();
        assert!(started.elapsed() < Duration::from_millis(100));
    }
}

#[test]
fn capture_turns_records_into_graph_nodes() {
    let soft = SoftDriver::exclusive();
    context(0);
    let (s, e) = (stream(), event());
    // SAFETY: event and stream are live and of the current context.
    unsafe {
        result::stream::begin_capture(s, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .unwrap();
        assert_eq!(
            result::stream::is_capturing(s).unwrap(),
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
        );
        result::event::record(e, s).unwrap();
        let graph = result::stream::end_capture(s).unwrap();
        assert!(!graph.is_null());
        assert_eq!(sys::cuGraphDestroy(graph), CUresult::CUDA_SUCCESS);
        // Its last record is a graph node, never a timestamp.
        assert_eq!(
            result::event::query(e),
            Err(err(CUresult::CUDA_ERROR_CAPTURED_EVENT))
        );
        assert_eq!(
            result::event::synchronize(e),
            Err(err(CUresult::CUDA_ERROR_CAPTURED_EVENT))
        );
    }
    assert_eq!(soft.counts().graphs, 0);
}

/// Rows `cuEventQuery`, `cuEventSynchronize`: asking an event recorded in a
/// capture is the programming guide's example of what even RELAXED mode
/// forbids: 907, and the capture is invalidated ('Invalidation').
#[test]
fn asking_a_captured_event_during_its_capture_invalidates_it() {
    let _soft = SoftDriver::exclusive();
    context(0);
    let ask: [unsafe fn(sys::CUevent) -> Result<(), DriverError>; 2] =
        [result::event::query, result::event::synchronize];
    for ask in ask {
        let (s, e) = (stream(), event());
        // SAFETY: event and stream are live and of the current context.
        unsafe {
            result::stream::begin_capture(
                s,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
            .unwrap();
            result::event::record(e, s).unwrap();
            assert_eq!(ask(e), Err(err(CUresult::CUDA_ERROR_CAPTURED_EVENT)));
            assert_eq!(
                result::stream::end_capture(s).err(),
                Some(err(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED))
            );
        }
    }
}

#[test]
fn synchronizing_a_capturing_stream_fails_and_breaks_the_capture() {
    let _soft = SoftDriver::exclusive();
    context(0);
    let s = stream();
    // SAFETY: the stream is live and of the current context.
    unsafe {
        result::stream::begin_capture(s, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .unwrap();
        assert_eq!(
            result::stream::synchronize(s),
            Err(err(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED))
        );
        assert_eq!(
            result::stream::is_capturing(s).unwrap(),
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED
        );
        assert_eq!(
            result::stream::end_capture(s).err(),
            Some(err(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED))
        );
    }
}

#[test]
fn the_device_clock_runs_at_the_configured_drift() {
    let soft = SoftDriver::exclusive();
    context(0);
    soft.set_bandwidth(1e9);
    soft.set_clock(5_000_000_000, 200.0);
    let (s, a, b) = (stream(), event(), event());
    // SAFETY: events and stream are live and of the current context.
    let (device_ms, host_ns) = unsafe {
        result::event::record(a, s).unwrap();
        memset(s, 50_000_000); // 50 ms
        result::event::record(b, s).unwrap();
        result::event::synchronize(b).unwrap();
        let truth_a = soft.event_truth_ns(a as usize).unwrap();
        let truth_b = soft.event_truth_ns(b as usize).unwrap();
        (
            f64::from(result::event::elapsed(a, b).unwrap()),
            (truth_b - truth_a) as f64,
        )
    };
    soft.set_clock(1_000_000_000_000, 0.0);
    soft.set_bandwidth(10e9);
    let expected_ms = host_ns * (1.0 + 200e-6) / 1e6;
    // 200 ppm of 50 ms is 10 µs; the reading is good to 0.5 µs plus f32 rounding.
    assert!(
        (device_ms - expected_ms).abs() < 0.002,
        "{device_ms} vs {expected_ms}"
    );
    assert!((device_ms - host_ns / 1e6).abs() > 0.005, "the drift shows");
}

#[test]
fn an_injected_failure_returns_the_chosen_status_once() {
    let soft = SoftDriver::exclusive();
    context(0);
    let (s, e) = (stream(), event());
    assert!(soft.fail_call("cuEventRecord", 2, 700));
    // SAFETY: event and stream are live and of the current context.
    unsafe {
        assert_eq!(result::event::record(e, s), Ok(()));
        assert_eq!(
            result::event::record(e, s),
            Err(err(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS))
        );
        assert_eq!(result::event::record(e, s), Ok(()));
    }
    assert!(
        !soft.fail_call("cuEventRecord", 1, 123_456),
        "not a CUresult"
    );
}

/// An injection for this thread's calls leaves another thread's alone,
/// and fails this thread's next call however many the other made first.
#[test]
fn an_injected_failure_here_fails_only_this_threads_call() {
    let soft = SoftDriver::exclusive();
    context(0);
    let (s, e) = (stream(), event());
    let (s_bits, e_bits) = (s as usize, e as usize);
    assert!(soft.fail_call_here("cuEventRecord", 1, 700));
    std::thread::spawn(move || {
        context(0);
        // SAFETY: event and stream are live and of the current context.
        unsafe {
            let (s, e) = (s_bits as sys::CUstream, e_bits as sys::CUevent);
            assert_eq!(result::event::record(e, s), Ok(()), "another thread's");
        }
    })
    .join()
    .unwrap();
    // SAFETY: event and stream are live and of the current context.
    unsafe {
        assert_eq!(
            result::event::record(e, s),
            Err(err(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS))
        );
        assert_eq!(result::event::record(e, s), Ok(()));
    }
}

#[test]
fn live_handles_are_counted() {
    let soft = SoftDriver::exclusive();
    context(0);
    let before = soft.counts();
    let (s, e) = (stream(), event());
    // SAFETY: the allocation is freed here and used by nothing else.
    let ptr = unsafe { result::malloc_sync(64).unwrap() };
    let during = soft.counts();
    assert_eq!(during.events, before.events + 1);
    assert_eq!(during.streams, before.streams + 1);
    assert_eq!(during.allocations, before.allocations + 1);
    assert!(during.contexts >= 1);
    // SAFETY: each handle is released once, here.
    unsafe {
        result::event::destroy(e).unwrap();
        result::stream::destroy(s).unwrap();
        result::free_sync(ptr).unwrap();
        assert_eq!(
            result::event::destroy(e),
            Err(err(CUresult::CUDA_ERROR_INVALID_HANDLE))
        );
    }
    let after = soft.counts();
    assert_eq!(
        (after.events, after.streams, after.allocations),
        (before.events, before.streams, before.allocations)
    );
    assert_eq!(after.misuses, before.misuses + 1);
    soft.allow_misuses(1);
}

#[test]
fn error_names_are_the_drivers_own() {
    let _soft = SoftDriver::exclusive();
    let name = DriverError(CUresult::CUDA_ERROR_NOT_READY)
        .error_name()
        .unwrap();
    assert_eq!(name.to_str().unwrap(), "CUDA_ERROR_NOT_READY");
}

/// Set in the child of `a_device_count_raised_after_loading_is_not_believed`.
const RAISED_COUNT_CHILD: &str = "SOFT_DRIVER_TEST_RAISED_COUNT_CHILD";

/// The driver sizes its tables by the device count it read at load: a count
/// raised in the environment afterwards must not admit a device past them,
/// which inside `extern "C"` would abort the process. Run in a child, since
/// the count is read once per process.
#[test]
fn a_device_count_raised_after_loading_is_not_believed() {
    if std::env::var_os(RAISED_COUNT_CHILD).is_some() {
        result::init().unwrap();
        assert_eq!(result::device::get_count().unwrap(), 1);
        // SAFETY: this child process runs this one test on one thread.
        unsafe { std::env::set_var("SOFT_DRIVER_DEVICES", "3") };
        assert_eq!(result::device::get_count().unwrap(), 1);
        assert_eq!(
            result::device::get(2).unwrap_err(),
            err(CUresult::CUDA_ERROR_INVALID_DEVICE)
        );
        return;
    }
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_device_count_raised_after_loading_is_not_believed",
            "--nocapture",
        ])
        .env(RAISED_COUNT_CHILD, "1")
        .env("SOFT_DRIVER_DEVICES", "1")
        .output()
        .unwrap();
    assert!(
        child.status.success() && String::from_utf8_lossy(&child.stdout).contains("1 passed"),
        "{}\n{}",
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );
}

/// Query `e` from a new thread whose capture mode is `mode`.
fn query_from_a_thread(
    ctx: sys::CUcontext,
    e: sys::CUevent,
    mode: sys::CUstreamCaptureMode,
) -> CUresult {
    let (ctx, e) = (ctx as usize, e as usize);
    std::thread::spawn(move || {
        let mut mode = mode;
        // SAFETY: the context and event are live for the test; `mode` is
        // writable.
        unsafe {
            result::ctx::set_current(ctx as sys::CUcontext).unwrap();
            assert_eq!(
                sys::cuThreadExchangeStreamCaptureMode(&mut mode),
                CUresult::CUDA_SUCCESS
            );
            sys::cuEventQuery(e as sys::CUevent)
        }
    })
    .join()
    .unwrap()
}

/// As the driver API documents the GLOBAL mode: while a thread captures in
/// it, another thread in GLOBAL mode may not query; the query fails, the
/// capture is invalidated, and its end fails.
#[test]
fn a_query_elsewhere_during_a_global_capture_fails_and_invalidates_it() {
    let soft = SoftDriver::exclusive();
    let ctx = context(0);
    let (s, e) = (stream(), event());
    let before = soft.capture_violations();
    // SAFETY: event and stream are live and of the current context.
    unsafe {
        result::event::record(e, stream()).unwrap();
        result::stream::begin_capture(s, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
            .unwrap();
        assert_eq!(
            query_from_a_thread(
                ctx,
                e,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL
            ),
            CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        );
        assert_eq!(
            result::stream::end_capture(s).err(),
            Some(err(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED))
        );
    }
    assert_eq!(soft.capture_violations(), before + 1);
}

/// RELAXED and THREAD_LOCAL threads may query during another thread's
/// GLOBAL capture, which then ends as it should.
#[test]
fn relaxed_and_thread_local_queries_elsewhere_leave_a_global_capture_alone() {
    let soft = SoftDriver::exclusive();
    let ctx = context(0);
    let (s, e) = (stream(), event());
    let before = soft.capture_violations();
    // SAFETY: event and stream are live and of the current context.
    unsafe {
        result::event::record(e, stream()).unwrap();
        result::stream::begin_capture(s, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
            .unwrap();
        for mode in [
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        ] {
            let status = query_from_a_thread(ctx, e, mode);
            assert!(
                matches!(
                    status,
                    CUresult::CUDA_SUCCESS | CUresult::CUDA_ERROR_NOT_READY
                ),
                "{status:?}"
            );
        }
        let graph = result::stream::end_capture(s).unwrap();
        assert_eq!(sys::cuGraphDestroy(graph), CUresult::CUDA_SUCCESS);
    }
    assert_eq!(soft.capture_violations(), before);
}

/// A capture begun in RELAXED mode prohibits nothing on other threads; a
/// GLOBAL one prohibits its own thread's queries too.
#[test]
fn only_global_and_thread_local_captures_prohibit_queries() {
    let _soft = SoftDriver::exclusive();
    let ctx = context(0);
    let (s, e) = (stream(), event());
    // SAFETY: event and stream are live and of the current context.
    unsafe {
        result::event::record(e, stream()).unwrap();
        result::stream::begin_capture(s, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .unwrap();
        let status = query_from_a_thread(
            ctx,
            e,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
        );
        assert_ne!(status, CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        let graph = result::stream::end_capture(s).unwrap();
        assert_eq!(sys::cuGraphDestroy(graph), CUresult::CUDA_SUCCESS);

        result::stream::begin_capture(
            s,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        )
        .unwrap();
        assert_eq!(
            sys::cuEventQuery(e),
            CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
            "the capturing thread's own query"
        );
        assert_eq!(
            result::stream::end_capture(s).err(),
            Some(err(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED))
        );
    }
}

/// With fewer hardware queues than streams, unrelated streams share one
/// and wait for each other's work (false dependencies); with one queue per
/// stream, they do not.
#[test]
fn streams_sharing_a_hardware_queue_wait_for_each_other() {
    let soft = SoftDriver::exclusive();
    context(0);
    let runs_beside_a_hold = |queues: u32, limit| {
        soft.set_hw_queues(queues);
        let (a, b) = (stream(), stream());
        let hold = Hold::on(a);
        let reached = reached_within(b, limit);
        hold.release(a);
        // SAFETY: made here, destroyed once, drained.
        unsafe {
            result::stream::synchronize(b).unwrap();
            result::stream::destroy(a).unwrap();
            result::stream::destroy(b).unwrap();
        }
        reached
    };
    let shared = runs_beside_a_hold(1, WHILE_HELD);
    let apart = runs_beside_a_hold(0, SURELY);
    soft.set_hw_queues(0);
    assert!(!shared, "a record ran past a wait on its hardware queue");
    assert!(apart, "a record waited for another queue's stream");
}

/// Row `cuCtxSynchronize`: 900 while any stream of the context captures,
/// even from a RELAXED thread, and that capture invalidated (inferred, as
/// for the other calls a capture cannot record).
#[test]
fn synchronizing_the_context_during_any_capture_fails_and_breaks_it() {
    let soft = SoftDriver::exclusive();
    context(0);
    let s = stream();
    let before = soft.capture_violations();
    let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    // SAFETY: the stream is live and of the current context; `mode` is
    // writable.
    unsafe {
        result::ctx::synchronize().unwrap();
        result::stream::begin_capture(s, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .unwrap();
        assert_eq!(
            sys::cuThreadExchangeStreamCaptureMode(&mut mode),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            result::ctx::synchronize(),
            Err(err(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED))
        );
        assert_eq!(
            sys::cuThreadExchangeStreamCaptureMode(&mut mode),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            result::stream::end_capture(s).err(),
            Some(err(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED))
        );
        result::ctx::synchronize().unwrap();
    }
    assert_eq!(soft.capture_violations(), before + 1);
}

/// Rows `cuInit`, `cuDriverGetVersion`: the version is readable before
/// `cuInit`; `cuInit` takes flags 0 only.
#[test]
fn init_takes_no_flags_and_the_version_needs_no_init() {
    let _soft = SoftDriver::exclusive();
    let mut version = 0;
    // SAFETY: `version` is writable.
    unsafe {
        assert_eq!(
            sys::cuDriverGetVersion(&mut version),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(sys::cuInit(1), CUresult::CUDA_ERROR_INVALID_VALUE);
        assert_eq!(sys::cuInit(0), CUresult::CUDA_SUCCESS);
    }
    assert!(version >= 12_000, "{version}");
}

/// Rows `cuCtxGetCurrent`, `cuCtxPushCurrent_v2`, `cuCtxPopCurrent_v2`,
/// `cuCtxGetDevice`: a stack per thread; popping an empty one is
/// INVALID_CONTEXT, and with nothing current there is no device.
#[test]
fn contexts_stack_per_thread() {
    let _soft = SoftDriver::exclusive();
    let ctx = context(0);
    let (ctx_bits, other) = (
        ctx as usize,
        std::thread::spawn(|| {
            // SAFETY: out-pointers are writable; the context is live.
            unsafe {
                let mut current = std::ptr::null_mut();
                let mut device = 0;
                let mut popped = std::ptr::null_mut();
                (
                    sys::cuCtxGetCurrent(&mut current),
                    current.is_null(),
                    sys::cuCtxGetDevice(&mut device),
                    sys::cuCtxPopCurrent_v2(&mut popped),
                )
            }
        }),
    );
    assert_eq!(
        other.join().unwrap(),
        (
            CUresult::CUDA_SUCCESS,
            true,
            CUresult::CUDA_ERROR_INVALID_CONTEXT,
            CUresult::CUDA_ERROR_INVALID_CONTEXT
        )
    );
    // SAFETY: out-pointers are writable; the context is live.
    unsafe {
        assert_eq!(sys::cuCtxPushCurrent_v2(ctx), CUresult::CUDA_SUCCESS);
        let mut popped = std::ptr::null_mut();
        assert_eq!(sys::cuCtxPopCurrent_v2(&mut popped), CUresult::CUDA_SUCCESS);
        assert_eq!(popped as usize, ctx_bits);
        let mut current = std::ptr::null_mut();
        assert_eq!(sys::cuCtxGetCurrent(&mut current), CUresult::CUDA_SUCCESS);
        assert_eq!(
            current as usize, ctx_bits,
            "the pop restores the context below"
        );
        let mut device = -1;
        assert_eq!(sys::cuCtxGetDevice(&mut device), CUresult::CUDA_SUCCESS);
        assert_eq!(device, 0);
    }
}

/// Row `cuMemAlloc_v2`: the mode rule, as for every allocation; size 0 is
/// INVALID_VALUE.
#[test]
fn allocating_during_a_global_capture_on_this_thread_fails_and_breaks_it() {
    let _soft = SoftDriver::exclusive();
    context(0);
    let s = stream();
    // SAFETY: the stream is live and of the current context.
    unsafe {
        assert_eq!(
            result::malloc_sync(0).err(),
            Some(err(CUresult::CUDA_ERROR_INVALID_VALUE))
        );
        result::stream::begin_capture(s, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
            .unwrap();
        assert_eq!(
            result::malloc_sync(64).err(),
            Some(err(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED))
        );
        assert_eq!(
            result::stream::end_capture(s).err(),
            Some(err(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED))
        );
    }
}

/// Row `cuStreamEndCapture`: "a capture sequence which is not in RELAXED
/// mode must be ended on the same thread", else WRONG_THREAD (908).
#[test]
fn a_global_capture_ends_only_on_its_own_thread() {
    let _soft = SoftDriver::exclusive();
    let ctx = context(0) as usize;
    let s = stream();
    let end_elsewhere = |s: sys::CUstream| {
        let s = s as usize;
        std::thread::spawn(move || {
            // SAFETY: the context and stream are live for the test.
            unsafe {
                result::ctx::set_current(ctx as sys::CUcontext).unwrap();
                result::stream::end_capture(s as sys::CUstream)
                    .map(|graph| assert_eq!(sys::cuGraphDestroy(graph), CUresult::CUDA_SUCCESS))
            }
        })
        .join()
        .unwrap()
    };
    // SAFETY: the stream is live and of the current context.
    unsafe {
        result::stream::begin_capture(s, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
            .unwrap();
        assert_eq!(
            end_elsewhere(s),
            Err(err(CUresult::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD))
        );
        let graph = result::stream::end_capture(s).unwrap();
        assert_eq!(sys::cuGraphDestroy(graph), CUresult::CUDA_SUCCESS);
        result::stream::begin_capture(s, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .unwrap();
    }
    end_elsewhere(s).unwrap();
}

/// Row `cuStreamWaitEvent`: a capturing stream may wait on an event
/// recorded outside its capture only as an external event; a plain wait
/// would cross the capture's boundary (ISOLATION) and invalidates it.
#[test]
fn a_capturing_stream_waits_on_an_outside_event_only_as_an_external_one() {
    let _soft = SoftDriver::exclusive();
    context(0);
    let (s, e) = (stream(), event());
    // SAFETY: event and stream are live and of the current context.
    unsafe {
        result::event::record(e, stream()).unwrap();
        result::stream::begin_capture(s, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .unwrap();
        result::stream::wait_event(s, e, sys::CUevent_wait_flags::CU_EVENT_WAIT_EXTERNAL).unwrap();
        let graph = result::stream::end_capture(s).unwrap();
        assert_eq!(sys::cuGraphDestroy(graph), CUresult::CUDA_SUCCESS);

        result::stream::begin_capture(s, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .unwrap();
        assert_eq!(
            result::stream::wait_event(s, e, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT),
            Err(err(CUresult::CUDA_ERROR_STREAM_CAPTURE_ISOLATION))
        );
        assert_eq!(
            result::stream::end_capture(s).err(),
            Some(err(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED))
        );
    }
}

/// Row `cuEventCreate`: flags are DEFAULT, BLOCKING_SYNC, DISABLE_TIMING
/// and INTERPROCESS, which needs DISABLE_TIMING; anything else is an
/// invalid value.
#[test]
fn event_flags_are_checked() {
    let _soft = SoftDriver::exclusive();
    context(0);
    let create = |flags: u32| {
        let mut e = std::ptr::null_mut();
        // SAFETY: `e` is writable; a made event is destroyed once.
        unsafe {
            let status = sys::cuEventCreate(&mut e, flags);
            if status == CUresult::CUDA_SUCCESS {
                result::event::destroy(e).unwrap();
            }
            status
        }
    };
    assert_eq!(create(0x8), CUresult::CUDA_ERROR_INVALID_VALUE);
    assert_eq!(create(0x4), CUresult::CUDA_ERROR_INVALID_VALUE);
    for valid in [0x0, 0x1, 0x2, 0x3, 0x6] {
        assert_eq!(create(valid), CUresult::CUDA_SUCCESS, "{valid:#x}");
    }
}

/// Any use of CUDA in a fork child before `exec` is undefined (NVIDIA, CUDA
/// C++ Best Practices Guide): the driver refuses a forked child's call with
/// NOT_INITIALIZED and counts it as a misuse, at once, and never waits on a
/// lock a parent thread held at the fork.
#[test]
fn a_call_in_a_fork_child_is_refused_and_counted_not_hung() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    type StreamCreate = unsafe extern "C" fn(*mut sys::CUstream, std::ffi::c_uint) -> i32;
    type Misuses = unsafe extern "C" fn() -> u64;
    let soft = SoftDriver::exclusive();
    context(0);
    // Resolved before the fork: the child looks nothing up.
    // SAFETY: these are the two functions' C signatures.
    let (create, misuses) = unsafe {
        (
            soft.function::<StreamCreate>(b"cuStreamCreate\0").unwrap(),
            soft.function::<Misuses>(b"soft_driver_misuses\0").unwrap(),
        )
    };
    // A parent thread keeps entering the driver, so that the fork may well
    // land while it holds the driver's locks; the child must be refused
    // whether or not it does.
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            context(0);
            while !stop.load(Ordering::Relaxed) {
                let s = stream();
                // SAFETY: the stream is live and destroyed once.
                unsafe { result::stream::destroy(s).unwrap() };
            }
        })
    };
    std::thread::sleep(Duration::from_millis(5));
    // SAFETY: a plain read of an atomic.
    let before = unsafe { misuses() };
    // SAFETY: the child runs only the two driver functions resolved above
    // and `_exit`: it allocates nothing and runs no exit handlers.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut s: sys::CUstream = std::ptr::null_mut();
        // SAFETY: `s` is valid for the write; a plain read of an atomic.
        let (status, after) = unsafe { (create(&raw mut s, 0), misuses()) };
        let code = match (status, after == before + 1) {
            (3, true) => 0,
            (3, false) => 2,
            _ => 1,
        };
        // SAFETY: ends the child at once, as a fork child must.
        unsafe { libc::_exit(code) };
    }
    assert!(pid > 0, "fork failed");
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    // A refused call returns in microseconds; ten seconds is a hang.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wstatus = 0;
    loop {
        // SAFETY: `pid` is this process's child; `wstatus` is writable.
        let reaped = unsafe { libc::waitpid(pid, &raw mut wstatus, libc::WNOHANG) };
        if reaped == pid {
            break;
        }
        assert_eq!(reaped, 0, "waitpid failed");
        if Instant::now() > deadline {
            // SAFETY: `pid` is this process's unreaped child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &raw mut wstatus, 0);
            }
            panic!("the fork child's cuStreamCreate hung: no answer after 10 s");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(libc::WIFEXITED(wstatus), "the child died: {wstatus:#x}");
    assert_eq!(
        libc::WEXITSTATUS(wstatus),
        0,
        "1: the child's call was not refused with NOT_INITIALIZED; 2: refused but not counted"
    );
}

/// In a process of its own: one thread waits in the driver for a stream
/// behind 10 s of work, another asks an event every millisecond, and the
/// process exits.
#[test]
#[ignore = "run in a process of its own by the test below"]
fn child_exits_with_threads_in_the_driver() {
    let soft = SoftDriver::get().unwrap();
    context(0);
    let s = stream();
    soft.set_bandwidth(1e9);
    let _work = memset(s, 10_000_000_000);
    soft.set_bandwidth(10e9);
    let e = event();
    // SAFETY: both are live, of the current context.
    unsafe { result::event::record(e, s).unwrap() };
    let (s, e) = (s as usize, e as usize);
    std::thread::spawn(move || {
        context(0);
        // SAFETY: a live stream; the process exits while it waits.
        let _ = unsafe { result::stream::synchronize(s as sys::CUstream) };
    });
    std::thread::spawn(move || {
        context(0);
        loop {
            // SAFETY: a live event, never destroyed.
            let _ = unsafe { result::event::query(e as sys::CUevent) };
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    std::thread::sleep(Duration::from_millis(50));
    std::process::exit(0);
}

/// NVIDIA: using the driver during the host program's termination is
/// undefined (CUDA C++ Guidelines for Robust and Safety Critical
/// Programming, rule 1.1). A call in flight as the driver's exit handler
/// begins, and a call made after, is a counted misuse; the later one is
/// refused with DEINITIALIZED.
#[test]
fn calls_in_flight_or_made_as_the_driver_tears_down_at_exit_are_counted() {
    let report =
        device_events_conformance::soft::exit_report("child_exits_with_threads_in_the_driver");
    assert_eq!(report.in_flight, 1, "{report:?}");
    assert!(report.after_exit > 0, "{report:?}");
    assert_eq!(
        report.misuses,
        report.in_flight + report.after_exit,
        "{report:?}"
    );
}
