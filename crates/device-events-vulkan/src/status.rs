//! Vulkan results (`VkResult`) as [`DriverError`]s: named as the headers
//! name them, classified into [`ErrorKind`].

use ash::vk;
use device_events_core::{DriverError, ErrorKind};

/// The class of a Vulkan result.
pub(crate) fn kind_of(result: vk::Result) -> ErrorKind {
    match result {
        vk::Result::NOT_READY | vk::Result::TIMEOUT => ErrorKind::NotReady,
        vk::Result::ERROR_DEVICE_LOST => ErrorKind::DevicePoisoned,
        vk::Result::ERROR_OUT_OF_HOST_MEMORY
        | vk::Result::ERROR_OUT_OF_DEVICE_MEMORY
        | vk::Result::ERROR_TOO_MANY_OBJECTS => ErrorKind::OutOfResources,
        vk::Result::ERROR_INITIALIZATION_FAILED
        | vk::Result::ERROR_INCOMPATIBLE_DRIVER
        | vk::Result::ERROR_EXTENSION_NOT_PRESENT
        | vk::Result::ERROR_FEATURE_NOT_PRESENT => ErrorKind::NoDevice,
        _ => ErrorKind::Other,
    }
}

/// An `ash` result with its `VkResult` as a classified [`DriverError`]
/// naming `call`: for code that mixes its own Vulkan calls with this
/// crate's.
///
/// ```
/// use ash::vk;
/// use device_events_core::ErrorKind;
/// use device_events_vulkan::check;
///
/// assert_eq!(check("vkGetFenceStatus", Ok::<_, vk::Result>(7))?, 7);
/// let kind = |r: vk::Result| check("vkQueueSubmit", Err::<(), _>(r)).unwrap_err().kind();
/// assert_eq!(kind(vk::Result::ERROR_DEVICE_LOST), ErrorKind::DevicePoisoned);
/// assert_eq!(kind(vk::Result::ERROR_INCOMPATIBLE_DRIVER), ErrorKind::NoDevice);
/// assert_eq!(kind(vk::Result::from_raw(-12345)), ErrorKind::Other); // keeps its number
/// # Ok::<(), device_events_core::DriverError>(())
/// ```
///
/// # Errors
///
/// The [`DriverError`] for the result `result` carries.
pub fn check<T>(call: &'static str, result: Result<T, vk::Result>) -> Result<T, DriverError> {
    result.map_err(|code| error(call, code))
}

pub(crate) fn error(call: &'static str, code: vk::Result) -> DriverError {
    let name = format!("{code:?}");
    let named = !name.starts_with(|c: char| c.is_ascii_digit() || c == '-');
    DriverError::from_status(
        crate::BACKEND,
        call,
        i64::from(code.as_raw()),
        named.then_some(name),
        kind_of(code),
    )
}
