//! device-events' errors as CubeCL's.

use cubecl_environment::backtrace::BackTrace;
use cubecl_runtime::server::{ProfileError, ServerError};
use device_events_core::DriverError;

/// A driver error as the [`ServerError`] a CubeCL server returns: its text
/// (backend, call, status name and number) as the reason.
///
/// ```
/// use device_events_core::{DriverError, ErrorKind};
///
/// let err = DriverError::refused("cuda", "cuEventRecord", ErrorKind::Other, "refused");
/// let server = device_events_cubecl::server_error(&err);
/// assert!(server.to_string().contains("cuEventRecord"));
/// ```
pub fn server_error(err: &DriverError) -> ServerError {
    ServerError::Generic {
        reason: err.to_string(),
        backtrace: BackTrace::capture(),
    }
}

/// No device timing for the window: distinct from a zero duration.
pub(crate) fn not_measured() -> ProfileError {
    ProfileError::NotMeasured {
        backtrace: BackTrace::capture(),
    }
}

/// A token this profiler does not hold.
pub(crate) fn not_registered() -> ProfileError {
    ProfileError::NotRegistered {
        backtrace: BackTrace::capture(),
    }
}
