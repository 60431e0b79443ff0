//! A CubeCL server's raw streams, as it keeps them (`CUstream`,
//! `hipStream_t`), on the software driver's two ABIs: each admitted once,
//! and forgotten before the server destroys it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::{c_int, c_void};

use cudarc::driver::{result, sys};
use device_events_conformance::soft::SoftDriver;
use device_events_core::ErrorKind;
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
    CubeStreams::<A>::forget(raw);
    assert_eq!(
        A::stream_synchronize(s).unwrap_err().kind(),
        ErrorKind::InvalidHandle
    );
    assert!(CubeStreams::<A>::get(raw).is_err());
    assert!(CubeFence::<A>::new(raw).wait_sync().is_err());
    assert!(profiler_refuses(raw));
    destroy(raw);
    CubeStreams::<A>::forget(other);
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

#[test]
fn a_hip_servers_streams_are_admitted_once_and_forgotten() {
    let soft = SoftDriver::exclusive();
    type Create = unsafe extern "C" fn(*mut *mut c_void, u32) -> c_int;
    type Destroy = unsafe extern "C" fn(*mut c_void) -> c_int;
    // SAFETY: HIP's C signatures of these names.
    let (create, destroy) = unsafe {
        (
            soft.function::<Create>(b"hipStreamCreateWithFlags\0")
                .unwrap(),
            soft.function::<Destroy>(b"hipStreamDestroy\0").unwrap(),
        )
    };
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
