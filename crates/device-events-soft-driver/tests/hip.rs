//! The software driver's HIP ABI, held to the runtime's documented behaviour
//! through `cubecl-hip-sys`, loaded dynamically as a user's program does.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

device_events_conformance::tests_run_on_the_software_driver!();

use std::ffi::{CStr, c_void};
use std::ptr;
use std::time::{Duration, Instant};

use cubecl_hip_sys as hip;
use device_events_conformance::soft::SoftDriver;

fn check(status: hip::hipError_t) {
    assert_eq!(status, hip::HIP_SUCCESS, "{}", name(status));
}

fn name(status: hip::hipError_t) -> String {
    // SAFETY: the runtime returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(hip::hipGetErrorName(status)) }
        .to_string_lossy()
        .into_owned()
}

fn event() -> hip::hipEvent_t {
    let mut event = ptr::null_mut();
    // SAFETY: `event` is writable.
    check(unsafe { hip::hipEventCreateWithFlags(&mut event, hip::hipEventDefault) });
    event
}

fn stream() -> hip::hipStream_t {
    let mut stream = ptr::null_mut();
    // SAFETY: `stream` is writable.
    check(unsafe { hip::hipStreamCreateWithFlags(&mut stream, hip::hipStreamNonBlocking) });
    stream
}

/// A memset of `bytes` on `stream`.
fn memset(stream: hip::hipStream_t, bytes: usize) {
    let mut ptr: *mut c_void = ptr::null_mut();
    // SAFETY: `ptr` is writable; the allocation is only used for the memset.
    unsafe {
        check(hip::hipMalloc(&mut ptr, bytes));
        check(hip::hipMemsetAsync(ptr, 0, bytes, stream));
    }
}

#[test]
fn it_loads_through_cubecl_hip_sys_and_says_it_is_no_gpu() {
    let _soft = SoftDriver::exclusive();
    assert!(hip::is_available());
    let mut name = [0 as std::ffi::c_char; 128];
    let mut count = 0;
    // SAFETY: both buffers are writable and sized as passed.
    unsafe {
        check(hip::hipGetDeviceCount(&mut count));
        check(hip::hipDeviceGetName(name.as_mut_ptr(), 128, 0));
    }
    // SAFETY: the runtime NUL-terminated it.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy();
    assert!(count >= 1);
    assert!(
        name.contains("software driver") && name.contains("no GPU"),
        "{name}"
    );
}

#[test]
fn elapsed_time_is_quantised_to_a_microsecond_and_waits_for_the_stream() {
    let soft = SoftDriver::exclusive();
    soft.set_bandwidth(1e9);
    let (s, a, b) = (stream(), event(), event());
    let mut ms = 0.0f32;
    // SAFETY: events and stream are live; `ms` is writable.
    unsafe {
        check(hip::hipEventRecord(a, s));
        memset(s, 3_333_333); // 3.3 ms
        check(hip::hipEventRecord(b, s));
        assert_eq!(hip::hipEventQuery(b), hip::hipError_t_hipErrorNotReady);
        assert_eq!(
            hip::hipEventElapsedTime(&mut ms, a, b),
            hip::hipError_t_hipErrorNotReady
        );
        check(hip::hipEventSynchronize(b));
        check(hip::hipEventElapsedTime(&mut ms, a, b));
    }
    soft.set_bandwidth(10e9);
    let us = f64::from(ms) * 1000.0;
    assert!((us - us.round()).abs() < 1e-2, "{ms} ms");
    assert!(ms >= 3.3, "{ms} ms");
}

#[test]
fn elapsed_time_on_a_never_recorded_event_is_an_invalid_handle() {
    let _soft = SoftDriver::exclusive();
    let (s, a, b) = (stream(), event(), event());
    let mut ms = 0.0f32;
    // SAFETY: events and stream are live; `ms` is writable.
    unsafe {
        check(hip::hipEventRecord(a, s));
        check(hip::hipEventSynchronize(a));
        assert_eq!(
            hip::hipEventElapsedTime(&mut ms, a, b),
            hip::hipError_t_hipErrorInvalidHandle
        );
    }
}

fn stream_with(flags: u32) -> hip::hipStream_t {
    let mut stream = ptr::null_mut();
    // SAFETY: `stream` is writable.
    check(unsafe { hip::hipStreamCreateWithFlags(&mut stream, flags) });
    stream
}

/// Whether a record on the null stream is reached, within `limit`, while a
/// stream created with `flags` is held by a wait on a value: a record that
/// waits for that stream is never reached while it holds, however loaded
/// the machine, and one that does not is reached after a launch latency.
fn null_stream_record_reached_beside_a_hold(flags: u32, limit: Duration) -> bool {
    let _soft = SoftDriver::exclusive();
    let (held, on_null) = (stream_with(flags), event());
    let (supported, word) = signal_word();
    assert!(supported);
    let started = Instant::now();
    // SAFETY: live handles, each destroyed once; the word outlives the
    // wait: it is freed after the held stream is drained.
    unsafe {
        // Signal memory starts at 1 (an HSA signal's value): wait for 2.
        check(hip::hipStreamWaitValue32(
            held,
            word,
            2,
            hip::hipStreamWaitValueGte,
            u32::MAX,
        ));
        check(hip::hipEventRecord(on_null, ptr::null_mut()));
        let reached = loop {
            if hip::hipEventQuery(on_null) == hip::hipError_t_hipSuccess {
                break true;
            }
            if started.elapsed() >= limit {
                break false;
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        std::sync::atomic::AtomicU32::from_ptr(word.cast())
            .store(2, std::sync::atomic::Ordering::Release);
        check(hip::hipStreamSynchronize(held));
        check(hip::hipEventSynchronize(on_null));
        check(hip::hipStreamDestroy(held));
        check(hip::hipEventDestroy(on_null));
        check(hip::hipFree(word));
        reached
    }
}

/// HIP's stream flags: "hipStreamNonBlocking: stream does not implicitly
/// synchronize with null stream". A record on the null stream does not wait
/// for such a stream's work.
#[test]
fn the_null_stream_does_not_wait_for_a_non_blocking_stream() {
    assert!(null_stream_record_reached_beside_a_hold(
        hip::hipStreamNonBlocking,
        Duration::from_secs(10)
    ));
}

/// HIP's `hipStreamDefault` streams do synchronize with the null stream: a
/// record there waits for their work.
#[test]
fn the_null_stream_waits_for_a_blocking_stream() {
    assert!(!null_stream_record_reached_beside_a_hold(
        hip::hipStreamDefault,
        Duration::from_millis(20)
    ));
}

#[test]
fn capture_turns_records_into_graph_nodes() {
    let soft = SoftDriver::exclusive();
    let (s, e) = (stream(), event());
    let mut status = 0;
    let mut graph = ptr::null_mut();
    // SAFETY: event and stream are live; out-pointers are writable.
    unsafe {
        check(hip::hipStreamBeginCapture(
            s,
            hip::hipStreamCaptureMode_hipStreamCaptureModeRelaxed,
        ));
        check(hip::hipStreamIsCapturing(s, &mut status));
        assert_eq!(
            status,
            hip::hipStreamCaptureStatus_hipStreamCaptureStatusActive
        );
        check(hip::hipEventRecord(e, s));
        assert_eq!(
            hip::hipStreamSynchronize(s),
            hip::hipError_t_hipErrorStreamCaptureUnsupported
        );
        assert_eq!(
            hip::hipStreamEndCapture(s, &mut graph),
            hip::hipError_t_hipErrorStreamCaptureInvalidated
        );
        // clr `Stream::EndCapture`: once the capture ends, the event is
        // asked as before it (here: never recorded).
        check(hip::hipEventQuery(e));
    }
    assert_eq!(soft.counts().graphs, 0);
}

fn capture_status(s: hip::hipStream_t) -> hip::hipStreamCaptureStatus {
    let mut status = 0;
    // SAFETY: the stream is live; the out-pointer is writable.
    check(unsafe { hip::hipStreamIsCapturing(s, &mut status) });
    status
}

/// An event recorded (and reached) on `s`, then a RELAXED capture begun on
/// `s`: the case clr's rules below are about.
fn reached_then_captured() -> (hip::hipStream_t, hip::hipEvent_t) {
    let (s, e) = (stream(), event());
    // SAFETY: event and stream are live.
    unsafe {
        check(hip::hipEventRecord(e, s));
        check(hip::hipEventSynchronize(e));
        check(hip::hipStreamBeginCapture(
            s,
            hip::hipStreamCaptureMode_hipStreamCaptureModeRelaxed,
        ));
    }
    (s, e)
}

/// Rule `hipEventQuery` (clr A/B, `ihipEventQuery`): asking an event whose
/// last record's stream captures now fails with 907 and invalidates that
/// capture, though the record came before it and the thread is RELAXED.
#[test]
fn a_query_of_an_event_whose_stream_now_captures_invalidates_that_capture() {
    let soft = SoftDriver::exclusive();
    let before = soft.capture_violations();
    let (s, e) = reached_then_captured();
    let mut graph = ptr::null_mut();
    // SAFETY: event and stream are live; the out-pointer is writable.
    unsafe {
        assert_eq!(hip::hipEventQuery(e), hip::hipError_t_hipErrorCapturedEvent);
        assert_eq!(
            capture_status(s),
            hip::hipStreamCaptureStatus_hipStreamCaptureStatusInvalidated
        );
        assert_eq!(
            hip::hipStreamEndCapture(s, &mut graph),
            hip::hipError_t_hipErrorStreamCaptureInvalidated
        );
        check(hip::hipEventQuery(e));
    }
    assert_eq!(soft.capture_violations(), before + 1);
}

/// Rule `hipEventSynchronize` (clr A/B): as the query.
#[test]
fn a_wait_for_an_event_whose_stream_now_captures_invalidates_that_capture() {
    let _soft = SoftDriver::exclusive();
    let (s, e) = reached_then_captured();
    let mut graph = ptr::null_mut();
    // SAFETY: event and stream are live; the out-pointer is writable.
    unsafe {
        assert_eq!(
            hip::hipEventSynchronize(e),
            hip::hipError_t_hipErrorCapturedEvent
        );
        // Invalidated, not yet ended: still refused (`StreamCaptureOngoing`).
        assert_eq!(
            hip::hipEventSynchronize(e),
            hip::hipError_t_hipErrorStreamCaptureUnsupported
        );
        assert_eq!(
            hip::hipStreamEndCapture(s, &mut graph),
            hip::hipError_t_hipErrorStreamCaptureInvalidated
        );
    }
}

/// Rule `hipStreamWaitEvent` (clr A, B and C): a stream outside any capture
/// waiting on an event recorded before the capture its stream is in now
/// fails with 905; the capture goes on.
#[test]
fn a_stream_waiting_on_an_event_whose_stream_now_captures_is_refused() {
    let _soft = SoftDriver::exclusive();
    let (s, e) = reached_then_captured();
    let other = stream();
    let mut graph = ptr::null_mut();
    // SAFETY: events and streams are live; the out-pointer is writable.
    unsafe {
        assert_eq!(
            hip::hipStreamWaitEvent(other, e, 0),
            hip::hipError_t_hipErrorStreamCaptureIsolation
        );
        assert_eq!(
            capture_status(s),
            hip::hipStreamCaptureStatus_hipStreamCaptureStatusActive
        );
        check(hip::hipStreamEndCapture(s, &mut graph));
        check(hip::hipGraphDestroy(graph));
        check(hip::hipStreamWaitEvent(other, e, 0));
    }
}

#[test]
fn an_injected_failure_returns_the_chosen_status_once_and_handles_are_counted() {
    let soft = SoftDriver::exclusive();
    let before = soft.counts();
    let (s, e) = (stream(), event());
    assert!(soft.fail_call("hipEventRecord", 1, 700));
    // SAFETY: event and stream are live until destroyed here, once each.
    unsafe {
        assert_eq!(
            hip::hipEventRecord(e, s),
            hip::hipError_t_hipErrorIllegalAddress
        );
        check(hip::hipEventRecord(e, s));
        check(hip::hipEventDestroy(e));
        check(hip::hipStreamDestroy(s));
    }
    let after = soft.counts();
    assert_eq!(
        (after.events, after.streams),
        (before.events, before.streams)
    );
    assert_eq!(
        name(hip::hipError_t_hipErrorIllegalAddress),
        "hipErrorIllegalAddress"
    );
}

#[test]
fn devices_are_per_thread() {
    let _soft = SoftDriver::exclusive();
    // SAFETY: `device` is writable.
    let device_of_new_thread = std::thread::spawn(|| unsafe {
        check(hip::hipSetDevice(1));
        let mut device = -1;
        check(hip::hipGetDevice(&mut device));
        device
    })
    .join()
    .unwrap();
    let mut here = -1;
    // SAFETY: `here` is writable.
    check(unsafe { hip::hipGetDevice(&mut here) });
    assert_eq!((device_of_new_thread, here), (1, 0));
}

/// HIP's stream capture follows CUDA's fork/join (HIP programming guide,
/// "HIP graphs", and `hipStreamEndCapture`'s `hipErrorStreamCaptureUnjoined`):
/// a stream waiting on an event recorded in a capture is forked into it,
/// and the capture cannot end until it joins back.
#[test]
fn a_forked_stream_must_join_before_the_capture_ends() {
    let _soft = SoftDriver::exclusive();
    let (origin, forked, fork, join) = (stream(), stream(), event(), event());
    let mut status = 0;
    let mut graph = ptr::null_mut();
    let relaxed = hip::hipStreamCaptureMode_hipStreamCaptureModeRelaxed;
    // SAFETY: live handles, released once at the end; out-pointers writable.
    unsafe {
        check(hip::hipStreamBeginCapture(origin, relaxed));
        check(hip::hipEventRecord(fork, origin));
        check(hip::hipStreamWaitEvent(forked, fork, 0));
        check(hip::hipStreamIsCapturing(forked, &mut status));
        assert_eq!(
            status,
            hip::hipStreamCaptureStatus_hipStreamCaptureStatusActive
        );
        assert_eq!(
            hip::hipStreamEndCapture(origin, &mut graph),
            hip::hipError_t_hipErrorStreamCaptureUnjoined
        );
        check(hip::hipStreamIsCapturing(forked, &mut status));
        assert_eq!(
            status,
            hip::hipStreamCaptureStatus_hipStreamCaptureStatusNone
        );

        check(hip::hipStreamBeginCapture(origin, relaxed));
        check(hip::hipEventRecord(fork, origin));
        check(hip::hipStreamWaitEvent(forked, fork, 0));
        check(hip::hipEventRecord(join, forked));
        check(hip::hipStreamWaitEvent(origin, join, 0));
        check(hip::hipStreamEndCapture(origin, &mut graph));
        assert!(!graph.is_null());
        check(hip::hipGraphDestroy(graph));
        for e in [fork, join] {
            check(hip::hipEventDestroy(e));
        }
        for s in [origin, forked] {
            check(hip::hipStreamDestroy(s));
        }
    }
}

/// Whether the device reports stream waits on values, and a word of
/// signal memory for them.
fn signal_word() -> (bool, *mut c_void) {
    let (mut supported, mut word) = (0, ptr::null_mut());
    // SAFETY: writable outputs; the caller frees the word.
    unsafe {
        check(hip::hipDeviceGetAttribute(
            &mut supported,
            hip::hipDeviceAttribute_t_hipDeviceAttributeCanUseStreamWaitValue,
            0,
        ));
        check(hip::hipExtMallocWithFlags(
            &mut word,
            8,
            hip::hipMallocSignalMemory,
        ));
    }
    (supported == 1, word)
}

/// `hipStreamWaitValue32`: "all operations enqueued on this stream after
/// this, will not execute until the defined wait condition is true", on
/// memory from `hipExtMallocWithFlags(..., hipMallocSignalMemory)`;
/// support is read from `hipDeviceAttributeCanUseStreamWaitValue`.
#[test]
fn a_stream_waits_on_signal_memory_until_the_host_writes_it() {
    let soft = SoftDriver::exclusive();
    let (s, e) = (stream(), event());
    let (supported, word) = signal_word();
    // SAFETY: live handles; the word outlives the stream's wait (freed
    // after the synchronize).
    unsafe {
        check(hip::hipStreamWaitValue32(
            s,
            word,
            2,
            hip::hipStreamWaitValueGte,
            u32::MAX,
        ));
        check(hip::hipEventRecord(e, s));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(hip::hipEventQuery(e), hip::hipError_t_hipErrorNotReady);
        assert_eq!(soft.blocked_value_waits(), 1);
        let written = Instant::now();
        std::sync::atomic::AtomicU32::from_ptr(word.cast())
            .store(2, std::sync::atomic::Ordering::Release);
        check(hip::hipEventSynchronize(e));
        assert!(written.elapsed() >= Duration::from_micros(1));
        assert_eq!(soft.blocked_value_waits(), 0);
        check(hip::hipEventDestroy(e));
        check(hip::hipStreamDestroy(s));
        check(hip::hipFree(word));
    }
    assert!(supported);
}

/// Switched off, the attribute reads 0 and a wait on a value is refused
/// as not supported (`hipErrorNotSupported`).
#[test]
fn switched_off_stream_wait_values_are_not_supported() {
    let soft = SoftDriver::exclusive();
    soft.set_stream_mem_ops(false);
    let s = stream();
    let (supported, word) = signal_word();
    // SAFETY: live handles; the word is freed once, here.
    let refused = unsafe {
        let refused = hip::hipStreamWaitValue32(s, word, 1, hip::hipStreamWaitValueGte, u32::MAX);
        check(hip::hipStreamDestroy(s));
        check(hip::hipFree(word));
        refused
    };
    soft.set_stream_mem_ops(true);
    assert!(!supported);
    assert_eq!(refused, hip::hipError_t_hipErrorNotSupported);
}

/// `call` on `handle`, from a new thread whose capture mode is `mode`.
fn from_a_thread(
    mode: hip::hipStreamCaptureMode,
    handle: usize,
    call: fn(usize) -> hip::hipError_t,
) -> hip::hipError_t {
    std::thread::spawn(move || {
        let mut mode = mode;
        // SAFETY: `mode` is writable.
        check(unsafe { hip::hipThreadExchangeStreamCaptureMode(&mut mode) });
        call(handle)
    })
    .join()
    .unwrap()
}

/// Query `e` from a new thread whose capture mode is `mode`.
fn query_from_a_thread(e: hip::hipEvent_t, mode: hip::hipStreamCaptureMode) -> hip::hipError_t {
    // SAFETY: the event is live for the test.
    from_a_thread(mode, e as usize, |e| unsafe {
        hip::hipEventQuery(e as hip::hipEvent_t)
    })
}

/// HIP mirrors CUDA's capture interaction modes: a GLOBAL thread's query
/// during another thread's GLOBAL capture fails and invalidates it; a
/// RELAXED or THREAD_LOCAL thread's does not.
#[test]
fn capture_modes_decide_which_queries_elsewhere_a_global_capture_allows() {
    let soft = SoftDriver::exclusive();
    let (s, e) = (stream(), event());
    let before = soft.capture_violations();
    let mut graph = ptr::null_mut();
    // SAFETY: event and stream are live; out-pointers are writable.
    unsafe {
        check(hip::hipEventRecord(e, stream()));
        check(hip::hipStreamBeginCapture(
            s,
            hip::hipStreamCaptureMode_hipStreamCaptureModeGlobal,
        ));
        for mode in [
            hip::hipStreamCaptureMode_hipStreamCaptureModeRelaxed,
            hip::hipStreamCaptureMode_hipStreamCaptureModeThreadLocal,
        ] {
            let status = query_from_a_thread(e, mode);
            assert_ne!(status, hip::hipError_t_hipErrorStreamCaptureUnsupported);
        }
        check(hip::hipStreamEndCapture(s, &mut graph));
        check(hip::hipGraphDestroy(graph));
        assert_eq!(soft.capture_violations(), before);

        check(hip::hipStreamBeginCapture(
            s,
            hip::hipStreamCaptureMode_hipStreamCaptureModeGlobal,
        ));
        assert_eq!(
            query_from_a_thread(e, hip::hipStreamCaptureMode_hipStreamCaptureModeGlobal),
            hip::hipError_t_hipErrorStreamCaptureUnsupported
        );
        assert_eq!(
            hip::hipStreamEndCapture(s, &mut graph),
            hip::hipError_t_hipErrorStreamCaptureInvalidated
        );
    }
    assert_eq!(soft.capture_violations(), before + 1);
}

/// Rule `hipExtMallocWithFlags` (clr `hip_memory.cpp`): signal memory is
/// one 8-byte slot, any other size `hipErrorInvalidValue`; it is an HSA
/// signal, whose value starts at 1.
#[test]
fn signal_memory_is_exactly_eight_bytes() {
    let _soft = SoftDriver::exclusive();
    for size in [4, 16] {
        let mut word = ptr::null_mut();
        // SAFETY: `word` is writable; nothing is allocated on refusal.
        let status =
            unsafe { hip::hipExtMallocWithFlags(&mut word, size, hip::hipMallocSignalMemory) };
        assert_eq!(status, hip::hipError_t_hipErrorInvalidValue, "{size} bytes");
    }
    let (_, word) = signal_word();
    // SAFETY: `word` is live signal memory, freed once.
    unsafe {
        // The 64-bit value as two words (little-endian), read no wider
        // than the driver promises to align.
        let half = |i: usize| {
            std::sync::atomic::AtomicU32::from_ptr(word.cast::<u32>().add(i))
                .load(std::sync::atomic::Ordering::Acquire)
        };
        assert_eq!(
            (half(0), half(1)),
            (1, 0),
            "an HSA signal starts at 1 (clr kInitSignalValueOne)"
        );
        check(hip::hipFree(word));
    }
}

/// Rule `hipFree` (clr `hip_memory.cpp`, ROCm/hip#1018): it waits for the
/// device's work before it frees.
#[test]
fn hip_free_waits_for_the_devices_work() {
    let soft = SoftDriver::exclusive();
    soft.set_bandwidth(1e9);
    let s = stream();
    let mut spare = ptr::null_mut();
    // SAFETY: `spare` is writable; freed once below.
    check(unsafe { hip::hipMalloc(&mut spare, 64) });
    // Timed from before the work is queued: it ends 20 ms after that at
    // the earliest.
    let started = Instant::now();
    memset(s, 20_000_000); // 20 ms
    // SAFETY: allocated above, freed once.
    check(unsafe { hip::hipFree(spare) });
    assert!(
        started.elapsed() >= Duration::from_millis(15),
        "hipFree returned before the device's 20 ms of work: {:?}",
        started.elapsed()
    );
    // SAFETY: live, destroyed once.
    check(unsafe { hip::hipStreamDestroy(s) });
}

/// Rule "alloc/free in capture" (CUDA programming guide, stream capture;
/// HIP mirrors it): freeing memory from a GLOBAL thread while another
/// thread captures in GLOBAL mode fails and invalidates that capture; from
/// a RELAXED thread it is allowed.
#[test]
fn freeing_memory_elsewhere_during_a_global_capture_needs_relaxed_mode() {
    let soft = SoftDriver::exclusive();
    let s = stream();
    let before = soft.capture_violations();
    let words: Vec<usize> = (0..2)
        .map(|_| {
            let mut word = ptr::null_mut();
            // SAFETY: `word` is writable; made before any capture begins.
            check(unsafe { hip::hipMalloc(&mut word, 64) });
            word as usize
        })
        .collect();
    let free_from_a_thread = |word: usize, mode: hip::hipStreamCaptureMode| {
        // SAFETY: the memory is live, and freed at most once.
        from_a_thread(mode, word, |word| unsafe {
            hip::hipFree(word as *mut c_void)
        })
    };
    let mut graph = ptr::null_mut();
    // SAFETY: live stream and memory; `graph` is writable.
    unsafe {
        check(hip::hipStreamBeginCapture(
            s,
            hip::hipStreamCaptureMode_hipStreamCaptureModeGlobal,
        ));
        check(free_from_a_thread(
            words[0],
            hip::hipStreamCaptureMode_hipStreamCaptureModeRelaxed,
        ));
        check(hip::hipStreamEndCapture(s, &mut graph));
        check(hip::hipGraphDestroy(graph));
        assert_eq!(soft.capture_violations(), before);
        check(hip::hipStreamBeginCapture(
            s,
            hip::hipStreamCaptureMode_hipStreamCaptureModeGlobal,
        ));
        assert_eq!(
            free_from_a_thread(
                words[1],
                hip::hipStreamCaptureMode_hipStreamCaptureModeGlobal
            ),
            hip::hipError_t_hipErrorStreamCaptureUnsupported
        );
        assert_eq!(
            hip::hipStreamEndCapture(s, &mut graph),
            hip::hipError_t_hipErrorStreamCaptureInvalidated
        );
        check(hip::hipFree(words[1] as *mut c_void));
        check(hip::hipStreamDestroy(s));
    }
    assert_eq!(soft.capture_violations(), before + 1);
}

/// Row `hipDeviceSynchronize` (clr `CHECK_SUPPORTED_DURING_CAPTURE`): 900
/// during any capture, from any thread in any mode, RELAXED too, and the
/// capture invalidated.
#[test]
fn synchronizing_the_device_during_any_capture_fails_and_breaks_it() {
    let soft = SoftDriver::exclusive();
    let s = stream();
    let before = soft.capture_violations();
    let mut graph = ptr::null_mut();
    // SAFETY: the stream is live.
    unsafe {
        check(hip::hipDeviceSynchronize());
        check(hip::hipStreamBeginCapture(
            s,
            hip::hipStreamCaptureMode_hipStreamCaptureModeRelaxed,
        ));
    }
    assert_eq!(
        from_a_thread(
            hip::hipStreamCaptureMode_hipStreamCaptureModeRelaxed,
            0,
            // SAFETY: no arguments.
            |_| unsafe { hip::hipDeviceSynchronize() }
        ),
        hip::hipError_t_hipErrorStreamCaptureUnsupported
    );
    // SAFETY: the stream is live; `graph` is writable.
    unsafe {
        // Invalidated, not yet ended: it still counts as a capture.
        assert_eq!(
            hip::hipDeviceSynchronize(),
            hip::hipError_t_hipErrorStreamCaptureUnsupported
        );
        assert_eq!(
            hip::hipStreamEndCapture(s, &mut graph),
            hip::hipError_t_hipErrorStreamCaptureInvalidated
        );
        check(hip::hipDeviceSynchronize());
    }
    assert_eq!(
        soft.capture_violations(),
        before + 2,
        "each refusal is counted"
    );
}

/// Rows `hipInit`, `hipDriverGetVersion` / `hipRuntimeGetVersion`: flags
/// other than 0 are refused; both versions read the same, before `hipInit`.
#[test]
fn init_takes_no_flags_and_the_versions_need_no_init() {
    let _soft = SoftDriver::exclusive();
    let (mut driver, mut runtime) = (0, 0);
    // SAFETY: out-pointers are writable.
    unsafe {
        check(hip::hipDriverGetVersion(&mut driver));
        check(hip::hipRuntimeGetVersion(&mut runtime));
        assert_eq!(hip::hipInit(1), hip::hipError_t_hipErrorInvalidValue);
        check(hip::hipInit(0));
    }
    assert_eq!(driver, runtime);
    assert!(runtime >= 50_000_000, "{runtime}");
}

/// Row `hipMalloc` (clr `CHECK_STREAM_CAPTURE_SUPPORTED`): the mode rule on
/// the capturing thread, as for the free.
#[test]
fn allocating_during_a_global_capture_on_this_thread_fails_and_breaks_it() {
    let _soft = SoftDriver::exclusive();
    let s = stream();
    let (mut word, mut graph) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: the stream is live; out-pointers are writable.
    unsafe {
        check(hip::hipStreamBeginCapture(
            s,
            hip::hipStreamCaptureMode_hipStreamCaptureModeGlobal,
        ));
        assert_eq!(
            hip::hipMalloc(&mut word, 64),
            hip::hipError_t_hipErrorStreamCaptureUnsupported
        );
        assert_eq!(
            hip::hipStreamEndCapture(s, &mut graph),
            hip::hipError_t_hipErrorStreamCaptureInvalidated
        );
    }
}

/// Row `hipStreamEndCapture` (clr `hip_graph.cpp`): a capture not in
/// RELAXED mode ends only on the thread that began it, else 908; a
/// RELAXED one ends anywhere.
#[test]
fn a_global_capture_ends_only_on_its_own_thread() {
    let _soft = SoftDriver::exclusive();
    let s = stream();
    let end_elsewhere = |s: hip::hipStream_t| {
        from_a_thread(
            hip::hipStreamCaptureMode_hipStreamCaptureModeRelaxed,
            s as usize,
            |s| {
                let mut graph = ptr::null_mut();
                // SAFETY: the stream is live; `graph` is writable.
                let status = unsafe { hip::hipStreamEndCapture(s as hip::hipStream_t, &mut graph) };
                if status == hip::hipError_t_hipSuccess {
                    // SAFETY: the graph was just made.
                    check(unsafe { hip::hipGraphDestroy(graph) });
                }
                status
            },
        )
    };
    let mut graph = ptr::null_mut();
    // SAFETY: the stream is live; `graph` is writable.
    unsafe {
        check(hip::hipStreamBeginCapture(
            s,
            hip::hipStreamCaptureMode_hipStreamCaptureModeGlobal,
        ));
        assert_eq!(
            end_elsewhere(s),
            hip::hipError_t_hipErrorStreamCaptureWrongThread
        );
        check(hip::hipStreamEndCapture(s, &mut graph));
        check(hip::hipGraphDestroy(graph));
        check(hip::hipStreamBeginCapture(
            s,
            hip::hipStreamCaptureMode_hipStreamCaptureModeRelaxed,
        ));
    }
    check(end_elsewhere(s));
}

/// Row `hipStreamDestroy` (clr `HostQueue::terminate`): the call returns
/// only once the stream's queued work is done.
#[test]
fn destroying_a_stream_waits_for_its_work() {
    let soft = SoftDriver::exclusive();
    let s = stream();
    soft.set_bandwidth(1e9);
    let started = Instant::now();
    memset(s, 15_000_000);
    soft.set_bandwidth(10e9);
    // SAFETY: the stream is live, destroyed once.
    check(unsafe { hip::hipStreamDestroy(s) });
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(15),
        "returned after {waited:?}, before the 15 ms of work queued"
    );
}

/// A stream held by a wait on a host word, its destroy begun on another
/// thread (which returns once the word is written and the stream drained),
/// and an event recorded on it before: for the rows on what clr does while
/// a stream is being destroyed.
struct Destroying {
    recorded: hip::hipEvent_t,
    word: *mut c_void,
    destroy: Option<std::thread::JoinHandle<()>>,
}

impl Destroying {
    fn begin(soft: &SoftDriver) -> Self {
        let (s, recorded) = (stream(), event());
        let (supported, word) = signal_word();
        assert!(supported);
        let streams = soft.counts().streams;
        // SAFETY: live handles; the word outlives the wait (freed in
        // `Drop`, once the destroy, which drains the stream, returned).
        unsafe {
            // Signal memory starts at 1: wait for 2.
            check(hip::hipStreamWaitValue32(
                s,
                word,
                2,
                hip::hipStreamWaitValueGte,
                u32::MAX,
            ));
            check(hip::hipEventRecord(recorded, s));
        }
        let raw = s as usize;
        // SAFETY: the stream is live, destroyed once, here.
        let destroy = std::thread::spawn(move || check(unsafe { hip::hipStreamDestroy(raw as _) }));
        // Not valid from the moment the destroy began (it no longer
        // counts as live), while it waits for the stream's work.
        while soft.counts().streams == streams {
            std::thread::yield_now();
        }
        Self {
            recorded,
            word,
            destroy: Some(destroy),
        }
    }
}

impl Drop for Destroying {
    /// Let the stream go, and wait for its destroy; also as a failed test
    /// unwinds, so that no stream is left held.
    fn drop(&mut self) {
        // SAFETY: the word is live until freed below, after the destroy.
        unsafe {
            std::sync::atomic::AtomicU32::from_ptr(self.word.cast())
                .store(2, std::sync::atomic::Ordering::Release);
        }
        if let Some(destroy) = self.destroy.take() {
            let _ = destroy.join();
        }
        // SAFETY: live handles, released once.
        unsafe {
            hip::hipEventDestroy(self.recorded);
            hip::hipFree(self.word);
        }
    }
}

/// Row `hipStreamWaitEvent` (clr `hipStreamWaitEvent_common`): once
/// `hipStreamDestroy` has begun, the stream is no longer valid, and a wait
/// on an event last recorded there adds no dependency: the waiter's work
/// runs while the destroyed stream's is still queued.
#[test]
fn a_wait_on_an_event_of_a_stream_being_destroyed_adds_no_dependency() {
    let soft = SoftDriver::exclusive();
    let destroying = Destroying::begin(&soft);
    let (waiter, after) = (stream(), event());
    // SAFETY: live handles, each destroyed once.
    unsafe {
        check(hip::hipStreamWaitEvent(waiter, destroying.recorded, 0));
        check(hip::hipEventRecord(after, waiter));
    }
    // Reached with the destroyed stream still held: no dependency was added
    // (were one added, it would not be reached before `destroying` ends).
    let deadline = Instant::now() + Duration::from_secs(10);
    // SAFETY: a live event.
    while unsafe { hip::hipEventQuery(after) } == hip::hipError_t_hipErrorNotReady {
        assert!(
            Instant::now() < deadline,
            "the waiter waits for the held stream"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    // SAFETY: a live event.
    check(unsafe { hip::hipEventQuery(after) });
    drop(destroying);
    // SAFETY: live handles, destroyed once.
    unsafe {
        check(hip::hipEventDestroy(after));
        check(hip::hipStreamDestroy(waiter));
    }
}

/// Rows `hipEventQuery`, `hipEventSynchronize`: clr reads the stream of the
/// event's last record with no check; once that stream's destroy has begun,
/// a query reads a stream being freed: a counted misuse.
#[test]
fn asking_an_event_of_a_stream_being_destroyed_is_a_misuse() {
    let soft = SoftDriver::exclusive();
    soft.allow_misuses(1);
    let destroying = Destroying::begin(&soft);
    let misuses = soft.counts().misuses;
    // SAFETY: a live event.
    let _ = unsafe { hip::hipEventQuery(destroying.recorded) };
    assert_eq!(soft.counts().misuses, misuses + 1);
    drop(destroying);
}

/// Rows `hipEventDestroy`, `hipStreamWaitEvent` (clr): the stream of the
/// event's last record is checked with `hip::isValid`, then used with no
/// lock held. A destroy of that stream that begins in between has clr use a
/// stream it frees: with the gap widened, a counted misuse.
#[test]
fn a_stream_destroyed_between_an_event_calls_check_and_use_is_a_misuse() {
    let soft = SoftDriver::exclusive();
    soft.allow_misuses(2);
    for wait in [false, true] {
        let (s, recorded, waiter) = (stream(), event(), stream());
        let (supported, word) = signal_word();
        assert!(supported);
        // Long: the gap ends as the destroy begins.
        soft.set_check_to_use_ns(60_000_000_000);
        let misuses = soft.counts().misuses;
        // SAFETY: live handles; the word outlives the stream's wait.
        unsafe {
            check(hip::hipStreamWaitValue32(
                s,
                word,
                2,
                hip::hipStreamWaitValueGte,
                u32::MAX,
            ));
            check(hip::hipEventRecord(recorded, s));
        }
        let (event, into) = (recorded as usize, waiter as usize);
        let gaps = soft.check_to_use_gaps();
        let user = std::thread::spawn(move || {
            // SAFETY: live handles; the event is destroyed once.
            unsafe {
                if wait {
                    hip::hipStreamWaitEvent(into as _, event as _, 0)
                } else {
                    hip::hipEventDestroy(event as _)
                }
            }
        });
        // Past the check, inside the gap.
        while soft.check_to_use_gaps() == gaps {
            std::thread::yield_now();
        }
        let raw = s as usize;
        // SAFETY: the stream is live, destroyed once.
        let destroy = std::thread::spawn(move || check(unsafe { hip::hipStreamDestroy(raw as _) }));
        assert_eq!(user.join().unwrap(), hip::HIP_SUCCESS);
        assert_eq!(soft.counts().misuses, misuses + 1, "wait: {wait}");
        soft.set_check_to_use_ns(0);
        // SAFETY: the word is freed once, after the destroy drained the stream.
        unsafe {
            std::sync::atomic::AtomicU32::from_ptr(word.cast())
                .store(2, std::sync::atomic::Ordering::Release);
            destroy.join().unwrap();
            if wait {
                check(hip::hipEventDestroy(recorded));
            }
            check(hip::hipStreamDestroy(waiter));
            check(hip::hipFree(word));
        }
    }
}

/// Row `hipStreamDestroy`: a stream that began a capture ends it, silently;
/// nothing captures afterwards.
#[test]
fn destroying_a_capturing_stream_ends_its_capture() {
    let _soft = SoftDriver::exclusive();
    let (s, other) = (stream(), stream());
    // SAFETY: the streams are live; `s` is destroyed once.
    unsafe {
        check(hip::hipStreamBeginCapture(
            s,
            hip::hipStreamCaptureMode_hipStreamCaptureModeGlobal,
        ));
        check(hip::hipStreamDestroy(s));
        // Nothing captures: a GLOBAL thread may synchronize again.
        check(hip::hipStreamSynchronize(other));
        check(hip::hipDeviceSynchronize());
    }
}

/// Row `hipEventCreateWithFlags` (clr `ihipEventCreateWithFlags`): unknown
/// bits, two release flags, or Interprocess without DisableTiming are
/// invalid values.
#[test]
fn event_flags_are_checked() {
    let _soft = SoftDriver::exclusive();
    let create = |flags: u32| {
        let mut e = ptr::null_mut();
        // SAFETY: `e` is writable.
        let status = unsafe { hip::hipEventCreateWithFlags(&mut e, flags) };
        if status == hip::hipError_t_hipSuccess {
            // SAFETY: just made, destroyed once.
            check(unsafe { hip::hipEventDestroy(e) });
        }
        status
    };
    let invalid = hip::hipError_t_hipErrorInvalidValue;
    assert_eq!(create(0x8), invalid);
    assert_eq!(create(0x4), invalid);
    assert_eq!(create(0x4000_0000 | 0x8000_0000), invalid);
    assert_eq!(create(0x2000_0000 | 0x4000_0000), invalid);
    for valid in [
        0x0,
        0x1,
        0x2,
        0x3,
        0x4 | 0x2,
        0x4000_0000,
        0x2000_0000 | 0x1,
    ] {
        assert_eq!(create(valid), hip::hipError_t_hipSuccess, "{valid:#x}");
    }
    let (mut untimed, mut ms) = (ptr::null_mut(), 0.0f32);
    // SAFETY: out-pointers are writable; the event is destroyed once.
    unsafe {
        check(hip::hipEventCreateWithFlags(&mut untimed, 0x2));
        check(hip::hipEventRecord(untimed, stream()));
        check(hip::hipEventSynchronize(untimed));
        assert_eq!(
            hip::hipEventElapsedTime(&mut ms, untimed, untimed),
            hip::hipError_t_hipErrorInvalidHandle
        );
        check(hip::hipEventDestroy(untimed));
    }
}

/// clr's `hipEventQuery` and `hipEventSynchronize` read the event's last
/// record's stream with no validity check, freed once `hipStreamDestroy`
/// returned (ROCm/clr#157): asking such an event is a counted misuse.
#[test]
fn asking_an_event_whose_stream_was_destroyed_is_a_misuse() {
    let soft = SoftDriver::exclusive();
    let before = soft.counts().misuses;
    let (s, e) = (stream(), event());
    // SAFETY: the event lives until destroyed here; the stream is destroyed
    // once, and the misuses are the point.
    unsafe {
        check(hip::hipEventRecord(e, s));
        check(hip::hipStreamDestroy(s));
        assert_ne!(hip::hipEventQuery(e), hip::HIP_SUCCESS);
        assert_ne!(hip::hipEventSynchronize(e), hip::HIP_SUCCESS);
        assert_eq!(soft.counts().misuses, before + 2);
        // Elapsed times read no stream, and a record on a live stream
        // ties the event to that one.
        let s = stream();
        check(hip::hipEventRecord(e, s));
        check(hip::hipEventSynchronize(e));
        check(hip::hipEventQuery(e));
        check(hip::hipEventDestroy(e));
        check(hip::hipStreamDestroy(s));
    }
    assert_eq!(soft.counts().misuses, before + 2);
    soft.allow_misuses(2);
}
