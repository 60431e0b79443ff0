//! The anchor's gate on CUDA: the anchor stream waits
//! (`cuStreamWaitValue32`) on a word of host memory mapped for the device
//! (`cuMemHostAlloc`, `cuMemHostGetDevicePointer`), which the host writes to
//! open it.
//!
//! Stream memory operations are optional. As the driver API documents
//! them: the V2 entry points (`cuStreamWaitValue32_v2`, CUDA 11.7 on) are
//! available by default on all platforms; the V1 ones are off unless the
//! kernel module enables them, which `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS`
//! (`_V1` in CUDA 12's header) says. A driver with neither has no gate, and
//! the profiler brackets without one; so does a driver that refuses the
//! wait (`CUDA_ERROR_NOT_SUPPORTED`), the first time it does.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{self, CUdevice, CUdeviceptr, CUstream};
use device_events_core::profile::Duration;
use device_events_core::{DriverError, HostWord};

use crate::context::Context;
use crate::{BACKEND, CudaStream, api, check, in_context, on_stream};

/// `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS` (`_V1` in CUDA 12's header).
const CAN_USE_STREAM_MEM_OPS: c_int = 92;
/// `CU_MEMHOSTALLOC_DEVICEMAP`.
const DEVICEMAP: c_uint = 0x2;
/// `CU_STREAM_WAIT_VALUE_GEQ`.
const WAIT_GEQ: c_uint = 0x0;

device_events_core::driver_functions! {
    /// The optional host-memory functions, each with its status as a plain
    /// `u32` (see `ffi`).
    struct HostMem {
        cuDeviceGetAttribute(*mut c_int, c_int, CUdevice) -> u32;
        cuMemHostAlloc(*mut *mut c_void, usize, c_uint) -> u32;
        cuMemHostGetDevicePointer_v2(*mut CUdeviceptr, *mut c_void, c_uint) -> u32;
        cuMemFreeHost(*mut c_void) -> u32;
    }
}

device_events_core::driver_functions! {
    /// The wait, CUDA 11.7 on: the entry point CUDA 12's header names.
    struct WaitV2 {
        cuStreamWaitValue32_v2(CUstream, CUdeviceptr, u32, c_uint) -> u32;
    }
}

device_events_core::driver_functions! {
    /// The first version of the wait.
    struct WaitV1 {
        cuStreamWaitValue32(CUstream, CUdeviceptr, u32, c_uint) -> u32;
    }
}

/// The optional functions, or `None` when the driver lacks one.
struct MemOps {
    mem: HostMem,
    /// `cuStreamWaitValue32_v2` where the driver has it, else the first
    /// version.
    wait_value: unsafe extern "C" fn(CUstream, CUdeviceptr, u32, c_uint) -> u32,
    /// Which of the two `wait_value` is, for errors.
    wait_value_name: &'static str,
    /// `wait_value` is V1, usable only where the attribute says so.
    v1: bool,
}

/// The functions, or `None` when the driver lacks one.
fn mem_ops() -> Option<&'static MemOps> {
    static OPS: OnceLock<Option<MemOps>> = OnceLock::new();
    OPS.get_or_init(|| {
        api().ok()?;
        // SAFETY: `api()` succeeded, so cudarc has the library loaded, and
        // keeps it for the process.
        let lib = unsafe { sys::culib() };
        // SAFETY: each declaration is the C signature of the CUDA driver
        // function of that name, status as `u32`; the library stays loaded.
        let (v2, v1, mem) = unsafe {
            (
                WaitV2::resolve(lib).ok(),
                WaitV1::resolve(lib).ok(),
                HostMem::resolve(lib).ok()?,
            )
        };
        let (wait_value, wait_value_name, v1) = match (v2, v1) {
            (Some(v2), _) => (v2.cuStreamWaitValue32_v2, "cuStreamWaitValue32_v2", false),
            (None, Some(v1)) => (v1.cuStreamWaitValue32, "cuStreamWaitValue32", true),
            (None, None) => return None,
        };
        Some(MemOps {
            mem,
            wait_value,
            wait_value_name,
            v1,
        })
    })
    .as_ref()
}

/// A word of mapped host memory the stream waits on.
pub(crate) struct CudaWord {
    stream: CudaStream,
    ctx: Arc<Context>,
    host: *mut c_void,
    device: CUdeviceptr,
}

// SAFETY: `host` is page-locked memory this value alone owns, touched only
// through an `AtomicU32`; the handles are opaque and the driver API is
// thread-safe.
unsafe impl Send for CudaWord {}

impl CudaWord {
    /// A word on `stream`, or `None` where stream memory operations are
    /// missing or switched off.
    pub(crate) fn new(stream: CudaStream) -> Result<Option<Self>, DriverError> {
        let Some(ops) = mem_ops() else {
            return Ok(None);
        };
        let ctx = stream.live("cuMemHostAlloc", |live| Arc::clone(&live.ctx))?;
        in_context(ctx.raw, || {
            if ops.v1 {
                let mut can = 0;
                // SAFETY: `can` is writable; the device is the context's.
                check("cuDeviceGetAttribute", unsafe {
                    (ops.mem.cuDeviceGetAttribute)(&mut can, CAN_USE_STREAM_MEM_OPS, ctx.device)
                })?;
                if can == 0 {
                    return Ok(None);
                }
            }
            let mut host = std::ptr::null_mut();
            // SAFETY: `host` is writable; the context is bound.
            check("cuMemHostAlloc", unsafe {
                (ops.mem.cuMemHostAlloc)(&mut host, size_of::<u32>(), DEVICEMAP)
            })?;
            let mut device = 0;
            // SAFETY: `device` is writable; `host` was mapped just above.
            let mapped = check("cuMemHostGetDevicePointer_v2", unsafe {
                (ops.mem.cuMemHostGetDevicePointer_v2)(&mut device, host, 0)
            });
            let word = Self {
                stream,
                ctx: Arc::clone(&ctx),
                host,
                device,
            };
            // `word` frees `host` if the mapping failed.
            mapped.map(|()| Some(word))
        })
    }
}

impl HostWord for CudaWord {
    fn word(&self) -> &AtomicU32 {
        // SAFETY: `host` is a live, page-aligned block of at least four
        // bytes that this value owns until it is dropped.
        unsafe { AtomicU32::from_ptr(self.host.cast()) }
    }

    fn wait_at_least(&mut self, value: u32) -> Result<(), DriverError> {
        let ops = mem_ops().ok_or_else(|| crate::stream::dead("cuStreamWaitValue32"))?;
        let call = ops.wait_value_name;
        let device = self.device;
        on_stream(self.stream, call, |live| {
            // SAFETY: the stream is live, its context bound; `device` maps
            // this value's host word, alive until the stream has passed.
            check(call, unsafe {
                (ops.wait_value)(live.raw, device, value, WAIT_GEQ)
            })
        })
    }

    /// A GPU's launch latency is a few microseconds, tens under load.
    fn settle(&self) -> Duration {
        Duration::from_micros(50)
    }
}

impl Drop for CudaWord {
    /// Let the stream pass every wait (the gate is open by now), then free
    /// the word: the device must not read it after it is freed.
    fn drop(&mut self) {
        let Some(ops) = mem_ops() else { return };
        let Ok(api) = api() else { return };
        let host = self.host;
        let drained = on_stream(self.stream, "cuStreamSynchronize", |live| {
            // SAFETY: the stream is live, its context bound.
            check("cuStreamSynchronize", unsafe {
                (api.cuStreamSynchronize)(live.raw)
            })
        });
        if let Err(err) = drained {
            // The stream is gone or failed: its waits are satisfied (opened
            // before this) or will never run; keeping four bytes is the
            // safe side.
            log::warn!("{BACKEND}: a gate's word is kept, its stream could not be drained: {err}");
            return;
        }
        let freed = in_context(self.ctx.raw, || {
            // SAFETY: allocated by `cuMemHostAlloc` in `new`, freed once,
            // after the stream has passed every wait on it.
            check("cuMemFreeHost", unsafe { (ops.mem.cuMemFreeHost)(host) })
        });
        if let Err(err) = freed {
            log::error!("{BACKEND}: could not free a gate's host word: {err}");
        }
    }
}
