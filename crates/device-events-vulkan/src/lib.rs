//! The Vulkan backend of device-events: timestamps a runtime writes into
//! its own command buffers (`vkCmdWriteTimestamp` into a query pool),
//! placed on the host clock by the core's
//! [`ClockPlacer`](device_events_core::ClockPlacer), each with its stated
//! bound.
//!
//! A Vulkan timestamp is not an event recorded on a stream, so Vulkan does
//! not fit the `EventApi` seam; placement of its absolute ticks does. The
//! anchor is the tightest of several brackets around one stamp of this
//! crate's own, gated behind a timeline semaphore the host signals; where the device
//! offers `VK_EXT_calibrated_timestamps` with the host's `CLOCK_MONOTONIC`,
//! the driver's pairing is used once it agrees with the bracket beside it.
//!
//! The Vulkan loader is found at run time; nothing of a Vulkan SDK is
//! needed to build. No loader or driver is an [`ErrorKind::NoDevice`]
//! error.
//!
//! [`ErrorKind::NoDevice`]: device_events_core::ErrorKind::NoDevice

mod clock;
mod device;
mod monotonic;
mod objects;
mod status;

pub use clock::VulkanClock;
pub use device::VulkanDevice;
pub use status::check;

/// What a runtime's device was made with, of what the clock can use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VulkanFeatures {
    /// `VK_EXT_calibrated_timestamps` is enabled: the driver's pairing of
    /// its clock with the host's, held against a bracket.
    pub calibrated_timestamps: bool,
    /// The `timelineSemaphore` feature (Vulkan 1.2) is enabled: the anchor's
    /// stamp is gated behind a semaphore value the host signals.
    pub timeline_semaphore: bool,
}

/// The backend's name in errors and logs.
pub(crate) const BACKEND: &str = "vulkan";
