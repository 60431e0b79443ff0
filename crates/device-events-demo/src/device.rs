//! What the demo needs of a device beyond `EventApi`: opening it, a buffer,
//! and work to time (memsets).

use std::error::Error;
use std::ffi::{CStr, c_void};

use cubecl_hip_sys as hip;
use cudarc::driver::result;
use device_events_core::EventApi;
use device_events_cuda::{Cuda, CudaStream, driver_error};
use device_events_hip::{Hip, HipStream, check};

pub type Failure = Box<dyn Error>;

pub trait Device: EventApi {
    type Buffer;
    /// Initialise, bind device 0 to this thread, and name it.
    fn open() -> Result<String, Failure>;
    fn buffer(bytes: usize) -> Result<Self::Buffer, Failure>;
    /// Queue a memset of `bytes` of `buffer` on `stream`.
    fn work(stream: Self::Stream, buffer: &Self::Buffer, bytes: usize) -> Result<(), Failure>;
}

pub struct CudaBuffer(cudarc::driver::sys::CUdeviceptr);

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by `buffer`, freed once here.
        let _ = unsafe { result::free_sync(self.0) };
    }
}

impl Device for Cuda {
    type Buffer = CudaBuffer;

    fn open() -> Result<String, Failure> {
        Cuda::probe()?;
        let device = result::device::get(0).map_err(|e| driver_error("cuDeviceGet", e))?;
        // SAFETY: `device` exists; the primary context lives until exit.
        unsafe {
            let ctx = result::primary_ctx::retain(device)
                .map_err(|e| driver_error("cuDevicePrimaryCtxRetain", e))?;
            result::ctx::set_current(ctx).map_err(|e| driver_error("cuCtxSetCurrent", e))?;
        }
        let name =
            result::device::get_name(device).map_err(|e| driver_error("cuDeviceGetName", e))?;
        Ok(name)
    }

    fn buffer(bytes: usize) -> Result<CudaBuffer, Failure> {
        // SAFETY: freed by `CudaBuffer`'s `Drop`; only memset.
        let ptr =
            unsafe { result::malloc_sync(bytes) }.map_err(|e| driver_error("cuMemAlloc_v2", e))?;
        Ok(CudaBuffer(ptr))
    }

    fn work(stream: CudaStream, buffer: &CudaBuffer, bytes: usize) -> Result<(), Failure> {
        stream.with_raw(|raw| {
            // SAFETY: the demo never asks for more than the buffer holds;
            // the stream is held live meanwhile.
            unsafe { result::memset_d8_async(buffer.0, 0, bytes, raw) }
                .map_err(|e| driver_error("cuMemsetD8Async", e))
        })??;
        Ok(())
    }
}

pub struct HipBuffer(*mut c_void);

impl Drop for HipBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by `buffer`, freed once here.
        let _ = unsafe { hip::hipFree(self.0) };
    }
}

impl Device for Hip {
    type Buffer = HipBuffer;

    fn open() -> Result<String, Failure> {
        Hip::probe()?;
        // The demo's buffers and memsets go through `cubecl-hip-sys`, which
        // also needs `libhiprtc` (ROCm 6 on), and panics on a call without it.
        if !hip::is_available() {
            return Err(format!(
                "{} has a device, but cubecl-hip-sys, which the demo's memsets use, \
                 cannot load it with libhiprtc",
                Hip::runtime()?
            )
            .into());
        }
        let mut name = [0 as std::ffi::c_char; 256];
        // SAFETY: `cubecl-hip-sys` loaded the runtime; `name` holds 256 bytes.
        unsafe {
            check("hipSetDevice", hip::hipSetDevice(0))?;
            check(
                "hipDeviceGetName",
                hip::hipDeviceGetName(name.as_mut_ptr(), 256, 0),
            )?;
        }
        // SAFETY: the runtime NUL-terminated it.
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(name)
    }

    fn buffer(bytes: usize) -> Result<HipBuffer, Failure> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is writable; freed by `HipBuffer`'s `Drop`.
        check("hipMalloc", unsafe { hip::hipMalloc(&mut ptr, bytes) })?;
        Ok(HipBuffer(ptr))
    }

    fn work(stream: HipStream, buffer: &HipBuffer, bytes: usize) -> Result<(), Failure> {
        stream.with_raw(|raw| {
            // SAFETY: the demo never asks for more than the buffer holds;
            // the stream is held live meanwhile.
            check("hipMemsetAsync", unsafe {
                hip::hipMemsetAsync(buffer.0, 0, bytes, raw.cast())
            })
        })??;
        Ok(())
    }
}
