//! OpenCL statuses (`cl_int`) as [`DriverError`]s: named as the headers
//! name them, classified into [`ErrorKind`].

use cl3::error_codes::error_text;
use cl3::types::cl_int;
use device_events_core::{DriverError, ErrorKind};

use crate::OpenCl;

/// `CL_PROFILING_INFO_NOT_AVAILABLE`: on a queue with profiling enabled, the
/// command has not completed yet.
const PROFILING_INFO_NOT_AVAILABLE: cl_int = -7;

/// The class of an OpenCL status. OpenCL numbers its statuses apart from
/// CUDA and HIP, so [`ErrorKind::of_status`] does not apply.
pub(crate) fn kind_of(status: cl_int) -> ErrorKind {
    match status {
        // A command not yet complete has no profiling times.
        PROFILING_INFO_NOT_AVAILABLE => ErrorKind::NotReady,
        // Device not found or available, no platform, no loader or symbol.
        -1 | -2 | -1001 | -2000 | -2001 => ErrorKind::NoDevice,
        // Out of resources, host memory, or a failed allocation.
        -6..=-4 => ErrorKind::OutOfResources,
        // A command in a wait list failed: the work after it cannot run.
        -14 => ErrorKind::DevicePoisoned,
        // Invalid context, command queue, memory object, wait list, event.
        -34 | -36 | -38 | -57 | -58 => ErrorKind::InvalidHandle,
        _ => ErrorKind::Other,
    }
}

/// A `cl3` result with its status as a classified [`DriverError`] naming
/// `call`: for code that mixes its own OpenCL calls with this crate's.
///
/// ```
/// use device_events_core::ErrorKind;
/// use device_events_opencl::check;
///
/// assert_eq!(check("clFinish", Ok::<_, i32>(7))?, 7);
/// let kind = |code: i32| check("clFinish", Err::<(), _>(code)).unwrap_err().kind();
/// assert_eq!(kind(-58), ErrorKind::InvalidHandle); // CL_INVALID_EVENT
/// assert_eq!(kind(-1001), ErrorKind::NoDevice); // CL_PLATFORM_NOT_FOUND_KHR
/// assert_eq!(kind(-7), ErrorKind::NotReady); // profiling info not yet available
/// assert_eq!(kind(-9999), ErrorKind::Other); // unknown: keeps its number
/// # Ok::<(), device_events_core::DriverError>(())
/// ```
///
/// # Errors
///
/// The [`DriverError`] for the status `result` carries.
pub fn check<T>(call: &'static str, result: Result<T, cl_int>) -> Result<T, DriverError> {
    result.map_err(|code| error(call, code))
}

pub(crate) fn error(call: &'static str, code: cl_int) -> DriverError {
    let name = error_text(code);
    let name = (!name.is_empty() && name != "UNKNOWN_ERROR").then_some(name);
    DriverError::from_status(
        <OpenCl as device_events_core::EventApi>::BACKEND,
        call,
        i64::from(code),
        name,
        kind_of(code),
    )
}
