//! device-events' errors as CubeCL's.

use cubecl_environment::backtrace::BackTrace;
use cubecl_runtime::poison::DevicePoison;
use cubecl_runtime::server::{ProfileError, ServerError};
use device_events_core::{DriverError, ErrorKind};

/// `CUDA_ERROR_CONTEXT_IS_DESTROYED`, `hipErrorContextIsDestroyed`: an
/// invalid handle to device-events, a poisoned device to CubeCL's servers.
const CONTEXT_IS_DESTROYED: i64 = 709;

/// A driver error as the [`ServerError`] a CubeCL server returns: its text
/// (backend, call, status name and number) as the reason.
///
/// A fault that poisons the device is [`ServerError::DevicePoisoned`], so
/// `is_device_poisoned()` holds, as with CubeCL's own backends. The table
/// is CubeCL 0.12's (CUDA: 214, 700, 702, 709, 710, 714-719; HIP: 214,
/// 700, 702, 709, 710, 719) and device-events' own, which adds CUDA and
/// HIP's 999 (an unknown internal error: nothing says the context
/// survived it) and OpenCL's `CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST`
/// (-14).
///
/// ```
/// use device_events_core::{DriverError, ErrorKind};
///
/// let err = DriverError::refused("cuda", "cuEventRecord", ErrorKind::Other, "refused");
/// let server = device_events_cubecl::server_error(&err);
/// assert!(server.to_string().contains("cuEventRecord"));
/// assert!(!server.is_device_poisoned());
///
/// let fault = DriverError::refused("cuda", "cuEventSynchronize", ErrorKind::DevicePoisoned, "700");
/// assert!(device_events_cubecl::server_error(&fault).is_device_poisoned());
/// ```
pub fn server_error(err: &DriverError) -> ServerError {
    let reason = err.to_string();
    if poisons(err) {
        ServerError::DevicePoisoned(DevicePoison::new(reason))
    } else {
        ServerError::Generic {
            reason,
            backtrace: BackTrace::capture(),
        }
    }
}

fn poisons(err: &DriverError) -> bool {
    err.is_device_poisoned()
        || (err.kind() == ErrorKind::InvalidHandle && err.status() == Some(CONTEXT_IS_DESTROYED))
}

/// A driver error met by a window, as CubeCL's servers report a failure
/// inside one.
pub(crate) fn profile_error(err: &DriverError) -> ProfileError {
    ProfileError::from(&server_error(err))
}

/// A token this profiler does not hold.
pub(crate) fn not_registered() -> ProfileError {
    ProfileError::NotRegistered {
        backtrace: BackTrace::capture(),
    }
}
