//! What the demo needs of a device beyond `EventApi`: opening it, a buffer,
//! and work to time (memsets).

use std::error::Error;
use std::ffi::{CStr, c_void};

use cubecl_hip_sys as hip;
use cudarc::driver::result;
use device_events_core::Backend;
use device_events_core::OwnedStream;
use device_events_cuda::{Cuda, CudaStream};
use device_events_hip::{Hip, HipStream, check};
use device_events_opencl::OpenClStream;

pub type Failure = Box<dyn Error>;

pub trait Device: Backend {
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
        let device = device_events_cuda::check("cuDeviceGet", result::device::get(0))?;
        // SAFETY: `device` exists; the primary context lives until exit.
        unsafe {
            let ctx = device_events_cuda::check(
                "cuDevicePrimaryCtxRetain",
                result::primary_ctx::retain(device),
            )?;
            device_events_cuda::check("cuCtxSetCurrent", result::ctx::set_current(ctx))?;
        }
        let name = device_events_cuda::check("cuDeviceGetName", result::device::get_name(device))?;
        Ok(name)
    }

    fn buffer(bytes: usize) -> Result<CudaBuffer, Failure> {
        // SAFETY: freed by `CudaBuffer`'s `Drop`; only memset.
        let ptr =
            device_events_cuda::check("cuMemAlloc_v2", unsafe { result::malloc_sync(bytes) })?;
        Ok(CudaBuffer(ptr))
    }

    fn work(stream: CudaStream, buffer: &CudaBuffer, bytes: usize) -> Result<(), Failure> {
        stream.with_raw(|raw| {
            // SAFETY: the demo never asks for more than the buffer holds;
            // the stream is held live meanwhile.
            device_events_cuda::check("cuMemsetD8Async", unsafe {
                result::memset_d8_async(buffer.0, 0, bytes, raw)
            })
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

/// An OpenCL buffer, filled as the demo's work.
pub struct ClBuffer(cl3::types::cl_mem);

impl Drop for ClBuffer {
    fn drop(&mut self) {
        // SAFETY: made by `buffer`, released once here.
        let _ = unsafe { cl3::memory::release_mem_object(self.0) };
    }
}

fn cl_error(call: &'static str, code: i32) -> Failure {
    format!(
        "{call} failed: {} ({code})",
        cl3::error_codes::error_text(code)
    )
    .into()
}

impl Device for device_events_opencl::OpenCl {
    type Buffer = ClBuffer;

    fn open() -> Result<String, Failure> {
        // The device this thread's streams use: the selected one, not the
        // first found.
        let device = Self::current_device()?;
        Ok(format!(
            "{} on {}, {}",
            device.name, device.platform_name, device.version
        ))
    }

    fn buffer(bytes: usize) -> Result<ClBuffer, Failure> {
        // The buffer lives in the context the backend's queues are made in.
        let queue = OwnedStream::<Self>::new()?;
        let context = queue.get().with_raw(|raw| {
            cl3::command_queue::get_command_queue_info(raw, CL_QUEUE_CONTEXT)
                .map(|info| info.to_ptr() as cl3::types::cl_context)
        })?;
        let context = context.map_err(|code| cl_error("clGetCommandQueueInfo", code))?;
        // SAFETY: a live context (the queue holds it); no host pointer;
        // released by `ClBuffer`'s `Drop`.
        let mem = unsafe { cl3::memory::create_buffer(context, 1, bytes, std::ptr::null_mut()) }
            .map_err(|code| cl_error("clCreateBuffer", code))?;
        Ok(ClBuffer(mem))
    }

    fn work(stream: OpenClStream, buffer: &ClBuffer, bytes: usize) -> Result<(), Failure> {
        let pattern = 0u32;
        stream.with_raw(|queue| {
            // SAFETY: a live queue and buffer of one context; the pattern is
            // copied at enqueue; the demo never asks for more than the
            // buffer holds.
            let event = unsafe {
                cl3::command_queue::enqueue_fill_buffer(
                    queue,
                    buffer.0,
                    (&raw const pattern).cast::<c_void>(),
                    4,
                    0,
                    (bytes / 4 * 4).max(4),
                    0,
                    std::ptr::null(),
                )
            }
            .map_err(|code| cl_error("clEnqueueFillBuffer", code))?;
            // SAFETY: the fill's own event, not kept.
            let _ = unsafe { cl3::event::release_event(event) };
            cl3::command_queue::flush(queue).map_err(|code| cl_error("clFlush", code))
        })??;
        Ok(())
    }
}

/// `CL_QUEUE_CONTEXT`.
const CL_QUEUE_CONTEXT: u32 = 0x1090;
