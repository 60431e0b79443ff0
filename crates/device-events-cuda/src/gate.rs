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
use std::sync::OnceLock;
use std::sync::atomic::AtomicU32;

use cudarc::driver::sys::{CUdevice, CUdeviceptr, CUstream};
use device_events_core::DriverError;
use device_events_core::backend::{HostWord, Permit, RawApi};
use std::time::Duration;

use crate::{Cuda, api, check_status};

/// `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS` (`_V1` in CUDA 12's header).
const CAN_USE_STREAM_MEM_OPS: c_int = 92;
/// `CU_MEMHOSTALLOC_DEVICEMAP`.
const DEVICEMAP: c_uint = 0x2;
/// `CU_STREAM_WAIT_VALUE_GEQ`.
const WAIT_GEQ: c_uint = 0x0;

device_events_core::backend::driver_functions! {
    /// The optional host-memory functions, each with its status as a plain
    /// `u32` (see `ffi`).
    struct HostMem {
        cuDeviceGetAttribute(*mut c_int, c_int, CUdevice) -> u32;
        cuMemHostAlloc(*mut *mut c_void, usize, c_uint) -> u32;
        cuMemHostGetDevicePointer_v2(*mut CUdeviceptr, *mut c_void, c_uint) -> u32;
        cuMemFreeHost(*mut c_void) -> u32;
    }
}

device_events_core::backend::driver_functions! {
    /// The wait, CUDA 11.7 on: the entry point CUDA 12's header names.
    struct WaitV2 {
        cuStreamWaitValue32_v2(CUstream, CUdeviceptr, u32, c_uint) -> u32;
    }
}

device_events_core::backend::driver_functions! {
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
        // SAFETY: each declaration is the C signature of the CUDA driver
        // function of that name, status as `u32`; `api()` succeeded, so the
        // library loads, and cudarc keeps it loaded for the process.
        let (v2, v1, mem) = unsafe {
            let symbol = |name: &[u8]| crate::ffi::symbol(name);
            (
                WaitV2::resolve(symbol).ok(),
                WaitV1::resolve(symbol).ok(),
                HostMem::resolve(symbol).ok()?,
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

/// A word of mapped host memory a stream waits on.
struct CudaWord {
    ops: &'static MemOps,
    host: *mut c_void,
    device: CUdeviceptr,
}

// SAFETY: `host` is page-locked memory this value alone owns, touched only
// through an `AtomicU32`; the driver API is thread-safe.
unsafe impl Send for CudaWord {}

/// A word for `device`'s streams, made in its (bound) context, or `None`
/// where stream memory operations are missing or switched off.
pub(crate) fn word(device: CUdevice) -> Result<Option<Box<dyn HostWord<Cuda>>>, DriverError> {
    let Some(ops) = mem_ops() else {
        return Ok(None);
    };
    if ops.v1 {
        let mut can = 0;
        // SAFETY: `can` is writable; the device is the bound context's.
        check_status("cuDeviceGetAttribute", unsafe {
            (ops.mem.cuDeviceGetAttribute)(&mut can, CAN_USE_STREAM_MEM_OPS, device)
        })?;
        if can == 0 {
            return Ok(None);
        }
    }
    let mut host = std::ptr::null_mut();
    // SAFETY: `host` is writable; the context is bound.
    check_status("cuMemHostAlloc", unsafe {
        (ops.mem.cuMemHostAlloc)(&mut host, size_of::<u32>(), DEVICEMAP)
    })?;
    let mut word = CudaWord {
        ops,
        host,
        device: 0,
    };
    // SAFETY: `device` is writable; `host` was mapped just above.
    let mapped = check_status("cuMemHostGetDevicePointer_v2", unsafe {
        (ops.mem.cuMemHostGetDevicePointer_v2)(&mut word.device, host, 0)
    });
    if let Err(err) = mapped {
        // No stream has waited on it yet.
        let _ = word.release();
        return Err(err);
    }
    Ok(Some(Box::new(word)))
}

impl CudaWord {
    /// Free the word (its context bound, or not where binding failed: the
    /// pointer alone names it); called once, as the value goes.
    fn release(self) -> Result<(), DriverError> {
        // SAFETY: allocated by `cuMemHostAlloc` in `word`, freed once (by
        // value), after any stream has passed every wait on it.
        check_status("cuMemFreeHost", unsafe {
            (self.ops.mem.cuMemFreeHost)(self.host)
        })
    }
}

impl HostWord<Cuda> for CudaWord {
    fn word(&self) -> &AtomicU32 {
        // SAFETY: `host` is a live, page-aligned block of at least four
        // bytes that this value owns until it is freed.
        unsafe { AtomicU32::from_ptr(self.host.cast()) }
    }

    fn wait_at_least(
        &self,
        _: Permit<Cuda>,
        stream: &<Cuda as RawApi>::Stream,
        value: u32,
    ) -> Result<(), DriverError> {
        // SAFETY: the stream is live and its context bound (the permit);
        // `device` maps this value's host word, freed only once the stream
        // has passed every wait.
        check_status(self.ops.wait_value_name, unsafe {
            (self.ops.wait_value)(stream.0, self.device, value, WAIT_GEQ)
        })
    }

    fn free(self: Box<Self>, _: Permit<Cuda>) -> Result<(), DriverError> {
        (*self).release()
    }

    /// A GPU's launch latency is a few microseconds, tens under load.
    fn settle(&self) -> Duration {
        Duration::from_micros(50)
    }
}
