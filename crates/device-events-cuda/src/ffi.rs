//! The driver functions this crate calls, resolved from the library cudarc
//! loaded, each declared to return its status as a plain `u32`.
//!
//! cudarc declares `CUresult` (and `CUstreamCaptureStatus`) as Rust enums
//! of its bindings level. A newer driver returns codes those enums lack
//! (CUDA 13: 917–919 among others), and an enum holding one is undefined
//! behaviour the moment it exists. Both are `#[repr(u32)]` in cudarc, the
//! C enums' `unsigned int`, so a declaration returning `u32` is the same
//! ABI and any code arrives as a number.

use std::ffi::{c_char, c_int, c_uint};

use cudarc::driver::sys::{CUcontext, CUdevice, CUevent, CUstream};
use device_events_core::{DriverError, ErrorKind};

macro_rules! functions {
    ($($name:ident($($arg:ty),*);)*) => {
        /// The resolved functions; see the module's docs for their ABI.
        #[allow(non_snake_case)]
        pub(crate) struct Api {
            $(pub(crate) $name: unsafe extern "C" fn($($arg),*) -> u32,)*
        }

        impl Api {
            /// Resolve every function from `lib`.
            pub(crate) fn load(lib: &'static libloading::Library) -> Result<Self, DriverError> {
                Ok(Self {
                    $($name: {
                        const NAME: &str = concat!(stringify!($name), "\0");
                        // SAFETY: the type is the C signature of the function
                        // of that name in the CUDA driver API, with the
                        // status as `u32` (see the module's docs). `lib` is
                        // cudarc's, held in a process-wide static, so the
                        // pointer copied out stays valid for the process.
                        let symbol = unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) -> u32>(NAME.as_bytes())
                        };
                        *symbol.map_err(|err| missing(stringify!($name), &err))?
                    },)*
                })
            }
        }
    };
}

functions! {
    cuInit(c_uint);
    cuGetErrorName(u32, *mut *const c_char);
    cuCtxGetCurrent(*mut CUcontext);
    cuCtxGetDevice(*mut CUdevice);
    cuCtxPushCurrent_v2(CUcontext);
    cuCtxPopCurrent_v2(*mut CUcontext);
    cuDevicePrimaryCtxRetain(*mut CUcontext, CUdevice);
    cuDevicePrimaryCtxRelease_v2(CUdevice);
    cuEventCreate(*mut CUevent, c_uint);
    cuEventRecord(CUevent, CUstream);
    cuEventSynchronize(CUevent);
    cuEventQuery(CUevent);
    cuEventElapsedTime(*mut f32, CUevent, CUevent);
    cuEventDestroy_v2(CUevent);
    cuStreamCreate(*mut CUstream, c_uint);
    cuStreamWaitEvent(CUstream, CUevent, c_uint);
    cuStreamSynchronize(CUstream);
    cuStreamDestroy_v2(CUstream);
    cuStreamIsCapturing(CUstream, *mut u32);
    cuThreadExchangeStreamCaptureMode(*mut c_uint);
}

fn missing(name: &'static str, err: &libloading::Error) -> DriverError {
    DriverError::refused(
        crate::BACKEND,
        name,
        ErrorKind::NoDevice,
        format!("the CUDA driver does not export {name} (older than CUDA 11?): {err}"),
    )
}

/// `CU_EVENT_DEFAULT`: timing enabled, spinning wait.
pub(crate) const EVENT_DEFAULT: c_uint = 0;
/// `CU_EVENT_BLOCKING_SYNC`: a wait sleeps instead of spinning.
pub(crate) const EVENT_BLOCKING_SYNC: c_uint = 1;
/// `CUDA_ERROR_NOT_READY`.
pub(crate) const NOT_READY: u32 = 600;
/// `CU_STREAM_NON_BLOCKING`.
pub(crate) const STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_STREAM_CAPTURE_STATUS_NONE`, `_ACTIVE`; 2 is `_INVALIDATED`.
pub(crate) const CAPTURE_NONE: u32 = 0;
pub(crate) const CAPTURE_ACTIVE: u32 = 1;

/// `c_int` is what `CUdevice` is.
const _: fn(CUdevice) -> c_int = |d| d;
