//! What every backend offers beside the event API, on OpenCL: a queue made
//! elsewhere admitted by `stream_from_raw`, and `capture_status`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

device_events_conformance::tests_need_an_installed_runtime!(
    "an OpenCL platform (PoCL)",
    "cargo xtask test-opencl"
);

use cl3::types::{cl_command_queue, cl_context, cl_device_id};
use device_events_core::{CaptureStatus, ErrorKind, EventApi, EventProfiler, OwnedStream};
use device_events_opencl::OpenCl;

const CL_QUEUE_CONTEXT: u32 = 0x1090;
const CL_QUEUE_DEVICE: u32 = 0x1091;
const CL_QUEUE_REFERENCE_COUNT: u32 = 0x1092;
const CL_QUEUE_PROFILING_ENABLE: u64 = 1 << 1;

/// The context and device of the calling thread's queues.
fn thread_context() -> (cl_context, cl_device_id) {
    OpenCl::probe().expect("an OpenCL platform with a device: cargo xtask test installs PoCL");
    let ours = OwnedStream::<OpenCl>::new().unwrap();
    ours.get()
        .with_raw(|queue| {
            let info = |param| {
                cl3::command_queue::get_command_queue_info(queue, param)
                    .unwrap()
                    .to_ptr()
            };
            (
                info(CL_QUEUE_CONTEXT) as cl_context,
                info(CL_QUEUE_DEVICE) as cl_device_id,
            )
        })
        .unwrap()
}

/// A queue the test owns, as another library would make it.
fn queue_of(context: cl_context, device: cl_device_id, properties: u64) -> cl_command_queue {
    #[allow(deprecated)] // clCreateCommandQueue: OpenCL 1.2's, which 2.0+ keep.
    // SAFETY: a live context and its device.
    unsafe { cl3::command_queue::create_command_queue(context, device, properties) }.unwrap()
}

fn references(queue: cl_command_queue) -> u32 {
    cl3::command_queue::get_command_queue_info(queue, CL_QUEUE_REFERENCE_COUNT)
        .unwrap()
        .into()
}

fn release(queue: cl_command_queue) {
    // SAFETY: the test's own reference, released once.
    unsafe { cl3::command_queue::release_command_queue(queue) }.unwrap();
}

#[test]
fn an_admitted_queue_reads_windows() {
    let (context, device) = thread_context();
    let raw = queue_of(context, device, CL_QUEUE_PROFILING_ENABLE);
    // SAFETY: `raw` is live until released below.
    let stream = unsafe { OpenCl::stream_from_raw(raw) }.unwrap();
    let mut profiler = EventProfiler::<OpenCl>::new();
    let window = profiler.start(stream);
    let timing = profiler.stop(stream, window).unwrap();
    let ticks = pollster::block_on(timing.resolve());
    assert!(ticks.is_some(), "a window on an admitted queue is read");
    drop(profiler);
    OpenCl::stream_destroy(stream).unwrap();
    release(raw);
}

#[test]
fn an_admitted_queue_is_retained_until_forgotten() {
    let (context, device) = thread_context();
    let raw = queue_of(context, device, CL_QUEUE_PROFILING_ENABLE);
    // SAFETY: `raw` is live until released below.
    let stream = unsafe { OpenCl::stream_from_raw(raw) }.unwrap();
    assert_eq!(references(raw), 2, "the owner's and the handle's");
    OpenCl::stream_destroy(stream).unwrap();
    assert_eq!(references(raw), 1, "the owner's alone");
    release(raw);
}

#[test]
fn a_queue_of_another_context_is_refused() {
    let (_, device) = thread_context();
    let other =
        cl3::context::create_context(&[device], std::ptr::null(), None, std::ptr::null_mut())
            .unwrap();
    let raw = queue_of(other, device, CL_QUEUE_PROFILING_ENABLE);
    // SAFETY: `raw` is live until released below.
    let err = unsafe { OpenCl::stream_from_raw(raw) }.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidHandle, "{err}");
    assert!(err.to_string().contains("another context"), "{err}");
    assert_eq!(references(raw), 1, "a refused queue is not retained");
    release(raw);
    // SAFETY: the test's context, released once, after its queue.
    unsafe { cl3::context::release_context(other) }.unwrap();
}

#[test]
fn a_queue_without_profiling_is_refused() {
    let (context, device) = thread_context();
    let raw = queue_of(context, device, 0);
    // SAFETY: `raw` is live until released below.
    let err = unsafe { OpenCl::stream_from_raw(raw) }.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidHandle, "{err}");
    assert!(err.to_string().contains("PROFILING"), "{err}");
    release(raw);
}

#[test]
fn a_live_stream_is_not_capturing() {
    OpenCl::probe().expect("an OpenCL platform with a device: cargo xtask test installs PoCL");
    let stream = OwnedStream::<OpenCl>::new().unwrap();
    assert_eq!(
        OpenCl::capture_status(stream.get()).unwrap(),
        CaptureStatus::None
    );
}

#[test]
fn capture_status_of_a_destroyed_stream_is_refused() {
    OpenCl::probe().expect("an OpenCL platform with a device: cargo xtask test installs PoCL");
    let stream = OpenCl::stream_create_non_blocking().unwrap();
    OpenCl::stream_destroy(stream).unwrap();
    let err = OpenCl::capture_status(stream).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidHandle, "{err}");
}
