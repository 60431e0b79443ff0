//! A device clock whose stamps are absolute ticks written into command
//! buffers (a Vulkan timestamp query): the driver calls a backend makes
//! for [`ClockPlacer`](crate::ClockPlacer) to anchor it, as an event
//! backend's are.

use crate::DriverError;
use crate::anchoring::{Gate, HostStamp};

/// One device's timestamp clock, as a backend of a command-buffer driver
/// offers it for anchoring. Each anchor sample is one stamp: queued
/// ([`queue_stamp`](Self::queue_stamp)), behind the clock's [`Gate`]
/// where it has one and the anchoring closed it, then read back
/// ([`stamp_written`](Self::stamp_written), [`stamp`](Self::stamp)); the
/// placer reads the host clock around it.
///
/// ```
/// use device_events_core::DriverError;
/// use device_events_core::backend::StampClock;
///
/// /// A clock that is the host's own, for illustration: every stamp is
/// /// written the moment it is queued.
/// struct HostTicks(u64, std::time::Instant);
///
/// impl StampClock for HostTicks {
///     fn period_ns(&self) -> f64 {
///         1.0
///     }
///     fn queue_stamp(&mut self) -> Result<(), DriverError> {
///         self.0 = self.1.elapsed().as_nanos() as u64;
///         Ok(())
///     }
///     fn stamp_written(&mut self) -> Result<bool, DriverError> {
///         Ok(true)
///     }
///     fn stamp(&mut self) -> Result<u64, DriverError> {
///         Ok(self.0)
///     }
/// }
/// assert!(HostTicks(0, std::time::Instant::now()).gate().is_none());
/// ```
pub trait StampClock {
    /// Nanoseconds of device time per tick (Vulkan's `timestampPeriod`).
    fn period_ns(&self) -> f64;

    /// How many low bits of a stamp count (Vulkan's
    /// `timestampValidBits`); the clock wraps past them. Default: 64.
    fn valid_bits(&self) -> u32 {
        64
    }

    /// The gate anchor stamps wait behind, where the clock has one: a
    /// stamp queued while it is [closed](Gate::close) waits for the next
    /// [`open`](Gate::open), with a mark ahead of it that
    /// [`reached`](Gate::reached) reads. Default: none.
    fn gate(&mut self) -> Option<&mut (dyn Gate + 'static)> {
        None
    }

    /// Queue one anchor stamp, behind the gate when it is closed.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver refused; nothing was queued.
    fn queue_stamp(&mut self) -> Result<(), DriverError>;

    /// Whether the device has written the stamp queued last, asked
    /// without waiting.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver could not say (the device lost).
    fn stamp_written(&mut self) -> Result<bool, DriverError>;

    /// The stamp queued last, once [`stamp_written`](Self::stamp_written)
    /// said so: read after the host has read its clock, so that a slow
    /// read-back does not widen the bracket.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver could not read it back.
    fn stamp(&mut self) -> Result<u64, DriverError>;

    /// The driver's own pairing of its clock with the host's
    /// (`VK_EXT_calibrated_timestamps`), where it has one: the device's
    /// ticks, and where they lie on the host clock with the driver's
    /// stated deviation. Held against a bracket taken beside it
    /// ([`DriverPairing`](crate::DriverPairing)). Default: `Ok(None)`.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver has one but refused; the placer
    /// anchors by bracket.
    fn pairing(&mut self) -> Result<Option<(u64, HostStamp)>, DriverError> {
        Ok(None)
    }
}
