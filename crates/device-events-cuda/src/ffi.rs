//! The driver functions this crate calls, resolved from the library cudarc
//! loaded, each declared to return its status as a plain `u32`.
//!
//! cudarc declares `CUresult` (and `CUstreamCaptureStatus`) as Rust enums
//! of its bindings level. A newer driver returns codes those enums lack
//! (CUDA 13: 917–919 among others), and an enum holding one is undefined
//! behaviour the moment it exists. Both are `#[repr(u32)]` in cudarc, the
//! C enums' `unsigned int`, so a declaration returning `u32` is the same
//! ABI and any code arrives as a number.

use std::ffi::{c_char, c_int, c_uint, c_void};

use cudarc::driver::sys::{CUcontext, CUdevice, CUevent, CUstream};
use device_events_core::{DriverError, ErrorKind};

device_events_core::backend::driver_functions! {
    /// The resolved functions; see the module's docs for their ABI.
    pub(crate) struct Api {
        cuInit(c_uint) -> u32;
        cuGetErrorName(u32, *mut *const c_char) -> u32;
        cuCtxGetCurrent(*mut CUcontext) -> u32;
        cuCtxGetDevice(*mut CUdevice) -> u32;
        cuCtxPushCurrent_v2(CUcontext) -> u32;
        cuCtxPopCurrent_v2(*mut CUcontext) -> u32;
        cuDevicePrimaryCtxRetain(*mut CUcontext, CUdevice) -> u32;
        cuDevicePrimaryCtxRelease_v2(CUdevice) -> u32;
        cuEventCreate(*mut CUevent, c_uint) -> u32;
        cuEventRecord(CUevent, CUstream) -> u32;
        cuEventSynchronize(CUevent) -> u32;
        cuEventQuery(CUevent) -> u32;
        cuEventElapsedTime(*mut f32, CUevent, CUevent) -> u32;
        cuEventDestroy_v2(CUevent) -> u32;
        cuStreamCreate(*mut CUstream, c_uint) -> u32;
        cuStreamWaitEvent(CUstream, CUevent, c_uint) -> u32;
        cuStreamSynchronize(CUstream) -> u32;
        cuStreamDestroy_v2(CUstream) -> u32;
        cuStreamIsCapturing(CUstream, *mut u32) -> u32;
        cuThreadExchangeStreamCaptureMode(*mut c_uint) -> u32;
    }
}

impl Api {
    /// Resolve every function from the library cudarc loaded.
    ///
    /// # Safety
    ///
    /// The driver library loads (`sys::is_culib_present`).
    pub(crate) unsafe fn load() -> Result<Self, DriverError> {
        // SAFETY: each declaration is the C signature of the CUDA driver
        // function of that name, with the status as `u32` (see the module's
        // docs); the library loads, as the caller promises, and cudarc
        // keeps it loaded for the process.
        unsafe { Self::resolve(|name| symbol(name)) }.map_err(missing)
    }
}

/// The address of the driver function `name` (NUL-terminated) in the
/// library cudarc loaded, through cudarc's own `libloading`, whichever
/// version that is: this crate names no `libloading` type.
///
/// # Safety
///
/// The driver library loads (`sys::is_culib_present`).
pub(crate) unsafe fn symbol(name: &[u8]) -> Option<*const c_void> {
    // SAFETY: the library loads, as the caller promises; cudarc keeps it
    // loaded for the process. The address is only read, not called.
    unsafe { cudarc::driver::sys::culib().get::<*const c_void>(name) }
        .ok()
        .map(|address| *address)
}

fn missing(name: &'static str) -> DriverError {
    DriverError::refused(
        crate::BACKEND,
        name,
        ErrorKind::NoDevice,
        format!("the CUDA driver does not export {name} (older than CUDA 11?)"),
    )
}

/// `CU_EVENT_DEFAULT`: timing enabled, spinning wait.
pub(crate) const EVENT_DEFAULT: c_uint = 0;
/// `CU_EVENT_BLOCKING_SYNC`: a wait sleeps instead of spinning.
pub(crate) const EVENT_BLOCKING_SYNC: c_uint = 1;
/// `CU_EVENT_DISABLE_TIMING`: no timestamp; the fast kind for a fence
/// (`cuStreamWaitEvent`, `cuEventQuery`), refused by `cuEventElapsedTime`.
pub(crate) const EVENT_DISABLE_TIMING: c_uint = 2;
/// `CUDA_ERROR_NOT_READY`.
pub(crate) const NOT_READY: u32 = 600;
/// `CU_STREAM_NON_BLOCKING`.
pub(crate) const STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_STREAM_CAPTURE_STATUS_NONE`, `_ACTIVE`; 2 is `_INVALIDATED`.
pub(crate) const CAPTURE_NONE: u32 = 0;
pub(crate) const CAPTURE_ACTIVE: u32 = 1;

/// `c_int` is what `CUdevice` is.
const _: fn(CUdevice) -> c_int = |d| d;
