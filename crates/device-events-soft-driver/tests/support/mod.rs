//! Shared by the software driver's CUDA test files.
#![allow(dead_code, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use cudarc::driver::result;
use cudarc::driver::sys::{self, CUresult};

/// Initialise, and make device `ordinal`'s primary context current here.
pub fn context(ordinal: i32) -> sys::CUcontext {
    result::init().unwrap();
    let device = result::device::get(ordinal).unwrap();
    // SAFETY: `device` came from the driver; the context is released by the
    // driver's process teardown.
    unsafe {
        let ctx = result::primary_ctx::retain(device).unwrap();
        result::ctx::set_current(ctx).unwrap();
        ctx
    }
}

/// An event with timing, spinning waits.
pub fn event() -> sys::CUevent {
    result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).unwrap()
}

/// Whether the device reports stream memory operations, and a word of
/// host memory mapped for it: its host and device addresses.
pub fn mapped_word() -> (bool, *mut std::ffi::c_void, sys::CUdeviceptr) {
    use sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 as MEM_OPS;
    let (mut supported, mut host, mut device) = (0, std::ptr::null_mut(), 0);
    // SAFETY: writable outputs; the caller frees the word.
    unsafe {
        assert_eq!(
            sys::cuDeviceGetAttribute(&mut supported, MEM_OPS, 0),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuMemHostAlloc(&mut host, 4, 0x2),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0),
            CUresult::CUDA_SUCCESS
        );
    }
    (supported == 1, host, device)
}

/// A stream's work held back by a wait on a word of host memory, until
/// [`release`](Self::release): streams ordered behind it wait for as long
/// as it holds, however loaded the machine, so the tests below ask which
/// records run while it holds instead of timing them.
pub struct Hold {
    host: *mut std::ffi::c_void,
}

impl Hold {
    pub fn on(stream: sys::CUstream) -> Self {
        let (supported, host, device) = mapped_word();
        assert!(supported);
        // `cuMemHostAlloc` does not clear what it returns.
        // SAFETY: a live mapped allocation of 4 bytes, aligned for a u32.
        unsafe {
            std::sync::atomic::AtomicU32::from_ptr(host.cast())
                .store(0, std::sync::atomic::Ordering::Release);
        }
        // SAFETY: a live or default stream; the word outlives the wait
        // (freed by `release`, after the stream is past it).
        unsafe {
            assert_eq!(
                sys::cuStreamWaitValue32_v2(stream, device, 1, 0),
                CUresult::CUDA_SUCCESS
            );
        }
        Self { host }
    }

    /// Let the held work go; `drained` is a stream ordered behind it,
    /// which is synchronized before the word is freed.
    pub fn release(self, drained: sys::CUstream) {
        // SAFETY: the word is a live mapped allocation of 4 bytes; it is
        // freed once no stream waits on it any more.
        unsafe {
            std::sync::atomic::AtomicU32::from_ptr(self.host.cast())
                .store(1, std::sync::atomic::Ordering::Release);
            result::stream::synchronize(drained).unwrap();
            assert_eq!(sys::cuMemFreeHost(self.host), CUresult::CUDA_SUCCESS);
        }
    }
}

/// Whether an event recorded on `stream` now is reached within `limit`.
/// A record with nothing before it is reached after a launch latency (tens
/// of microseconds); one ordered behind a [`Hold`] never is while it holds.
pub fn reached_within(stream: sys::CUstream, limit: Duration) -> bool {
    let e = event();
    let started = Instant::now();
    // SAFETY: a live event; `stream` is live or a default stream. The
    // event is destroyed once; a record still pending is allowed to be.
    unsafe {
        result::event::record(e, stream).unwrap();
        let reached = loop {
            if result::event::query(e).is_ok() {
                break true;
            }
            if started.elapsed() >= limit {
                break false;
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        result::event::destroy(e).unwrap();
        reached
    }
}

/// Long enough for a record with nothing before it to be reached many
/// times over; a record behind a hold is not reached in it.
pub const WHILE_HELD: Duration = Duration::from_millis(20);
/// Long enough for a record with nothing before it to be reached on any
/// machine this runs on.
pub const SURELY: Duration = Duration::from_secs(10);
