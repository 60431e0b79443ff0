//! A CubeCL server's raw streams, as it keeps them (`CUstream`,
//! `hipStream_t`), on the software driver's two ABIs: each admitted once,
//! and forgotten before the server destroys it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

device_events_conformance::tests_run_on_the_software_driver!();

use std::ffi::{c_int, c_void};

use cudarc::driver::{result, sys};
use device_events_conformance::soft::SoftDriver;
use device_events_core::{ErrorKind, EventApi};
use device_events_cubecl::{CubeFence, CubeProfiler, CubeStreams, RawStreams, StreamOf};
use device_events_cuda::Cuda;
use device_events_hip::Hip;

/// One raw stream through its life in a server: admitted as it is made
/// (twice is once), then passed as it is to windows and fences (a fence
/// from the raw handle alone, as a static `flush` makes one), then
/// forgotten before the owner destroys it; the checked copies and the
/// handle are refused from then on, and the driver saw no misuse.
fn a_raw_stream_through_a_servers_life<A: RawStreams>(
    soft: &SoftDriver,
    owner: A::Owner,
    make: impl Fn() -> A::Raw,
    destroy: impl Fn(A::Raw),
) where
    A::Stream: PartialEq + std::fmt::Debug + StreamOf<A>,
    A::Raw: StreamOf<A>,
{
    let (raw, other) = (make(), make());
    // SAFETY: both raw streams are of `owner`, and live until forgotten
    // below.
    unsafe {
        CubeStreams::<A>::admit(raw, owner).unwrap();
        CubeStreams::<A>::admit(raw, owner).unwrap();
        CubeStreams::<A>::admit(other, owner).unwrap();
    }
    let s = CubeStreams::<A>::get(raw).unwrap();
    assert_eq!(CubeStreams::<A>::get(raw).unwrap(), s, "admitted once");
    let mut profiler = CubeProfiler::<A>::new();
    // The server passes its raw handles as they are.
    let token = profiler.start(raw).unwrap();
    CubeFence::<A>::new(raw).wait_async(other).unwrap();
    let duration = profiler.stop(raw, token).unwrap();
    assert!(pollster::block_on(duration.resolve()).is_some());
    drop(profiler);
    let profiler_refuses = |raw: A::Raw| CubeProfiler::<A>::new().start(raw).is_err();
    let kept = CubeStreams::<A>::get(other).unwrap();
    CubeStreams::<A>::forget(raw).unwrap();
    assert_eq!(
        A::stream_synchronize(s).unwrap_err().kind(),
        ErrorKind::InvalidHandle
    );
    assert!(CubeStreams::<A>::get(raw).is_err());
    assert!(CubeFence::<A>::new(raw).wait_sync().is_err());
    assert!(profiler_refuses(raw));
    destroy(raw);
    CubeStreams::<A>::forget(other).unwrap();
    assert_eq!(
        A::stream_synchronize(kept).unwrap_err().kind(),
        ErrorKind::InvalidHandle
    );
    destroy(other);
    assert_eq!(soft.counts().misuses, 0);
}

#[test]
fn a_cuda_servers_cu_streams_are_admitted_once_and_forgotten() {
    let soft = SoftDriver::exclusive();
    Cuda::probe().unwrap();
    let device = result::device::get(0).unwrap();
    // SAFETY: device 0 exists; the context is retained for the process.
    let ctx = unsafe { result::primary_ctx::retain(device).unwrap() };
    // SAFETY: a retained primary context.
    unsafe { result::ctx::set_current(ctx).unwrap() };
    a_raw_stream_through_a_servers_life::<Cuda>(
        &soft,
        ctx,
        || result::stream::create(result::stream::StreamKind::NonBlocking).unwrap(),
        // SAFETY: made above, forgotten by the library first, destroyed once.
        |raw: sys::CUstream| unsafe { result::stream::destroy(raw).unwrap() },
    );
}

type HipCreate = unsafe extern "C" fn(*mut *mut c_void, u32) -> c_int;
type HipDestroy = unsafe extern "C" fn(*mut c_void) -> c_int;

/// `hipStreamCreateWithFlags` and `hipStreamDestroy`, as a HIP server
/// calls them, from the software driver.
fn hip_stream_functions(soft: &SoftDriver) -> (HipCreate, HipDestroy) {
    // SAFETY: HIP's C signatures of these names.
    unsafe {
        (
            soft.function::<HipCreate>(b"hipStreamCreateWithFlags\0")
                .unwrap(),
            soft.function::<HipDestroy>(b"hipStreamDestroy\0").unwrap(),
        )
    }
}

#[test]
fn a_hip_servers_streams_are_admitted_once_and_forgotten() {
    let soft = SoftDriver::exclusive();
    let (create, destroy) = hip_stream_functions(&soft);
    Hip::probe().unwrap();
    a_raw_stream_through_a_servers_life::<Hip>(
        &soft,
        0,
        || {
            let mut raw = std::ptr::null_mut();
            // SAFETY: `raw` is writable; device 0 is current; 1 is
            // `hipStreamNonBlocking`.
            assert_eq!(unsafe { create(&mut raw, 1) }, 0);
            raw
        },
        // SAFETY: made above, forgotten by the library first, destroyed once.
        |raw| assert_eq!(unsafe { destroy(raw) }, 0),
    );
}

/// What a CubeCL server holds must be `Send + Debug`, as
/// `cubecl_runtime::server::Server` requires of the server.
#[test]
fn a_servers_parts_are_send_and_debug() {
    fn server_part<T: Send + std::fmt::Debug>() {}
    server_part::<CubeProfiler<Cuda>>();
    server_part::<CubeFence<Cuda>>();
}

/// A raw value admitted for two owners (the null stream, which names one
/// stream per context): the second owner never gets the first's stream
/// back. Here the second admission is refused.
fn one_raw_value_never_resolves_to_another_owners_stream<A: RawStreams>(
    soft: &SoftDriver,
    null: A::Raw,
    owners: (A::Owner, A::Owner),
) where
    A::Raw: StreamOf<A>,
{
    // SAFETY: the null stream of each owner lives as long as its owner.
    unsafe { CubeStreams::<A>::admit(null, owners.0) }.unwrap();
    let first = CubeStreams::<A>::get(null).unwrap();
    // SAFETY: as above.
    let second = unsafe { CubeStreams::<A>::admit(null, owners.1) };
    if second.is_ok() {
        let found = CubeStreams::<A>::get(null).unwrap();
        assert_ne!(
            A::context_key(found),
            A::context_key(first),
            "the second owner's admission resolves to the first owner's stream"
        );
    }
    // SAFETY: as above; admitted again for its own owner: once.
    unsafe { CubeStreams::<A>::admit(null, owners.0) }.unwrap();
    CubeStreams::<A>::forget(null).unwrap();
    assert!(CubeStreams::<A>::get(null).is_err());
    assert_eq!(soft.counts().misuses, 0);
}

/// A forget the backend refuses (here: from inside a call on the very
/// stream) leaves the entry, so that a later forget releases it; and an
/// entry whose checked stream was destroyed elsewhere is admitted afresh,
/// not kept dead.
fn a_refused_forget_keeps_the_entry_and_a_dead_entry_is_admitted_again<R>(
    soft: &SoftDriver,
    owner: R::Owner,
    make: impl Fn() -> R::Raw,
    destroy: impl Fn(R::Raw),
) where
    R: RawStreams<Stream = device_events_core::backend::CheckedStream<R>>
        + device_events_core::backend::RawApi,
    R::Raw: StreamOf<R>,
{
    let raw = make();
    // SAFETY: `raw` is of `owner`, live until destroyed below, after the
    // last forget.
    unsafe { CubeStreams::<R>::admit(raw, owner) }.unwrap();
    let s = CubeStreams::<R>::get(raw).unwrap();
    R::stream_destroy(s).unwrap();
    // SAFETY: as above.
    unsafe { CubeStreams::<R>::admit(raw, owner) }.unwrap();
    let s = CubeStreams::<R>::get(raw).unwrap();
    assert!(
        R::stream_synchronize(s).is_ok(),
        "admitted again, the raw stream still resolves to its dead entry"
    );
    s.with_raw(|_| {
        assert!(CubeStreams::<R>::forget(raw).is_err(), "refused in use");
    })
    .unwrap();
    assert!(
        CubeStreams::<R>::get(raw).is_ok(),
        "a forget the backend refused dropped the entry of a live stream"
    );
    CubeStreams::<R>::forget(raw).unwrap();
    assert!(CubeStreams::<R>::get(raw).is_err());
    assert_eq!(
        R::stream_synchronize(s).unwrap_err().kind(),
        ErrorKind::InvalidHandle
    );
    destroy(raw);
    assert_eq!(soft.counts().misuses, 0);
}

fn cuda_context(ordinal: i32) -> sys::CUcontext {
    Cuda::probe().unwrap();
    let device = result::device::get(ordinal).unwrap();
    // SAFETY: the device exists; the context is retained for the process.
    unsafe { result::primary_ctx::retain(device).unwrap() }
}

#[test]
fn a_cuda_null_stream_never_resolves_to_another_contexts() {
    let soft = SoftDriver::exclusive();
    let owners = (cuda_context(0), cuda_context(1));
    // SAFETY: a retained primary context.
    unsafe { result::ctx::set_current(owners.1).unwrap() };
    one_raw_value_never_resolves_to_another_owners_stream::<Cuda>(
        &soft,
        std::ptr::null_mut(),
        owners,
    );
}

#[test]
fn a_hip_null_stream_never_resolves_to_another_devices() {
    let soft = SoftDriver::exclusive();
    Hip::probe().unwrap();
    one_raw_value_never_resolves_to_another_owners_stream::<Hip>(
        &soft,
        std::ptr::null_mut(),
        (0, 1),
    );
}

#[test]
fn a_cuda_refused_forget_keeps_its_entry_and_a_dead_one_is_admitted_again() {
    let soft = SoftDriver::exclusive();
    let ctx = cuda_context(0);
    // SAFETY: a retained primary context.
    unsafe { result::ctx::set_current(ctx).unwrap() };
    a_refused_forget_keeps_the_entry_and_a_dead_entry_is_admitted_again::<Cuda>(
        &soft,
        ctx,
        || result::stream::create(result::stream::StreamKind::NonBlocking).unwrap(),
        // SAFETY: made above, forgotten by the library first, destroyed once.
        |raw: sys::CUstream| unsafe { result::stream::destroy(raw).unwrap() },
    );
}

/// A stream wait refused out of resources while the waiting stream
/// captures: the host wait CubeCL's own fence falls back to would leave
/// the captured graph without the ordering, so the wait is an error
/// instead, and the capture ends as it began.
#[test]
fn a_refused_stream_wait_into_a_capture_is_an_error_not_a_host_wait() {
    let soft = SoftDriver::exclusive();
    let ctx = cuda_context(0);
    // SAFETY: a retained primary context.
    unsafe { result::ctx::set_current(ctx).unwrap() };
    let (a, b) = (
        Cuda::stream_create_non_blocking().unwrap(),
        Cuda::stream_create_non_blocking().unwrap(),
    );
    let fence = CubeFence::<Cuda>::new(a);
    b.with_raw(|raw| {
        // SAFETY: the stream is held live meanwhile.
        unsafe {
            result::stream::begin_capture(
                raw,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            )
        }
        .unwrap();
    })
    .unwrap();
    let waited = soft.call_count("cuEventSynchronize");
    assert!(soft.fail_call_here("cuStreamWaitEvent", 1, 2));
    let result = fence.wait_async(b);
    assert_eq!(
        soft.call_count("cuEventSynchronize"),
        waited,
        "waited on the host while the waiting stream captured: the graph lost the edge"
    );
    assert!(result.is_err(), "the missing dependency is not reported");
    let graph = b
        .with_raw(|raw| {
            // SAFETY: the stream is held live meanwhile.
            unsafe { result::stream::end_capture(raw) }
        })
        .unwrap()
        .unwrap();
    if !graph.is_null() {
        // SAFETY: the capture's graph, destroyed once.
        unsafe { sys::cuGraphDestroy(graph) }.result().unwrap();
    }
    Cuda::stream_destroy(a).unwrap();
    Cuda::stream_destroy(b).unwrap();
    assert_eq!(soft.counts().misuses, 0);
}

/// A forget waits for calls in flight on its stream (and on HIP drains
/// it), with the process's map of raw streams let go: a lookup from
/// another thread, and one from inside `with_raw` on the very stream the
/// forget waits for, each return at once.
#[test]
fn a_forget_in_progress_blocks_no_lookup() {
    let soft = SoftDriver::exclusive();
    let (create, destroy) = hip_stream_functions(&soft);
    Hip::probe().unwrap();
    let make = || {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is writable; device 0 is current; 1 is
        // `hipStreamNonBlocking`.
        assert_eq!(unsafe { create(&mut raw, 1) }, 0);
        raw
    };
    let (raw, other) = (make(), make());
    // SAFETY: both of device 0, live until destroyed below, once forgotten.
    unsafe {
        CubeStreams::<Hip>::admit(raw, 0).unwrap();
        CubeStreams::<Hip>::admit(other, 0).unwrap();
    }
    let s = CubeStreams::<Hip>::get(raw).unwrap();
    let (raw_bits, other_bits) = (raw as usize, other as usize);
    let asked = soft.call_count("hipStreamIsCapturing");
    let inside_elsewhere = s
        .with_raw(|_| {
            // The forget waits for this call to return.
            let forget = std::thread::spawn(move || {
                CubeStreams::<Hip>::forget(raw_bits as *mut c_void).map_err(|e| e.to_string())
            });
            while soft.call_count("hipStreamIsCapturing") == asked {
                std::thread::yield_now();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            let elsewhere =
                device_events_conformance::within(std::time::Duration::from_secs(10), move || {
                    CubeStreams::<Hip>::get(other_bits as *mut c_void).is_ok()
                });
            // Asked only where it cannot wait for good: the forget waits
            // for this very call.
            let inside = elsewhere.is_some() && CubeStreams::<Hip>::get(other).is_ok();
            (inside, elsewhere, forget)
        })
        .unwrap();
    let (inside, elsewhere, forget) = inside_elsewhere;
    assert_eq!(
        elsewhere,
        Some(true),
        "another thread's lookup waited for the forget"
    );
    assert!(inside);
    forget.join().unwrap().unwrap();
    assert!(CubeStreams::<Hip>::get(raw).is_err());
    CubeStreams::<Hip>::forget(other).unwrap();
    // SAFETY: forgotten above, destroyed once.
    unsafe {
        assert_eq!(destroy(raw), 0);
        assert_eq!(destroy(other), 0);
    }
    assert_eq!(soft.counts().misuses, 0);
}

/// A fence on CubeCL's contract, made with another context current (a
/// wrong word): its event is still its stream's context's, so the record
/// the driver gets is of one context, and the fence holds.
#[test]
fn a_cubecl_fence_on_a_wrong_word_records_in_its_streams_context() {
    let soft = SoftDriver::exclusive();
    let (own, other) = (cuda_context(0), cuda_context(1));
    // SAFETY: retained primary contexts.
    unsafe { result::ctx::set_current(own).unwrap() };
    let s = Cuda::stream_create_non_blocking().unwrap();
    // SAFETY: as above.
    unsafe { result::ctx::set_current(other).unwrap() };
    for _ in 0..2 {
        // The first makes its event, the second reuses it.
        CubeFence::<Cuda>::new(s).wait_sync().unwrap();
    }
    device_events_core::process::release_idle_events();
    Cuda::stream_destroy(s).unwrap();
    assert_eq!(soft.counts().misuses, 0);
}

/// The same, with the driver refusing the record made on the wrong word
/// as an invalid handle, as drivers have: it is made again with the
/// stream's context bound, and the fence holds.
#[test]
fn a_cubecl_fence_whose_record_is_refused_on_a_wrong_word_records_bound() {
    let soft = SoftDriver::exclusive();
    let (own, other) = (cuda_context(0), cuda_context(1));
    // SAFETY: retained primary contexts.
    unsafe { result::ctx::set_current(own).unwrap() };
    let s = Cuda::stream_create_non_blocking().unwrap();
    // SAFETY: as above.
    unsafe { result::ctx::set_current(other).unwrap() };
    let recorded = soft.call_count("cuEventRecord");
    assert!(soft.fail_call_here("cuEventRecord", 1, 400));
    CubeFence::<Cuda>::new(s).wait_sync().unwrap();
    assert_eq!(
        soft.call_count("cuEventRecord") - recorded,
        2,
        "refused, then bound"
    );
    device_events_core::process::release_idle_events();
    Cuda::stream_destroy(s).unwrap();
    assert_eq!(soft.counts().misuses, 0);
}
