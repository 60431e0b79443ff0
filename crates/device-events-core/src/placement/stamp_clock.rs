//! A device clock whose stamps are absolute ticks, written into command
//! buffers rather than recorded on a stream (a Vulkan timestamp query):
//! the driver calls a backend makes for [`ClockPlacer`](crate::ClockPlacer)
//! to anchor it. What to do with them (how many samples, the gate's
//! timing, checking the driver's own pairing) is the placer's.

use std::time::Duration;

use crate::DriverError;
use crate::anchoring::HostStamp;

/// One device's timestamp clock, as a backend of a command-buffer driver
/// offers it for anchoring. Each anchor sample is one stamp: queued
/// ([`queue_stamp`](Self::queue_stamp)), optionally held behind a gate the
/// host opens ([`open_gate`](Self::open_gate)), then read back
/// ([`stamp_written`](Self::stamp_written), [`stamp`](Self::stamp)); the
/// placer reads the host clock around it.
///
/// ```
/// use device_events_core::{DriverError, StampClock};
///
/// /// A clock that is the host's own, for illustration: every stamp is
/// /// written the moment it is queued.
/// struct HostTicks(u64, std::time::Instant);
///
/// impl StampClock for HostTicks {
///     fn period_ns(&self) -> f64 {
///         1.0
///     }
///     fn queue_stamp(&mut self, _gated: bool) -> Result<bool, DriverError> {
///         self.0 = self.1.elapsed().as_nanos() as u64;
///         Ok(false)
///     }
///     fn stamp_written(&mut self) -> Result<bool, DriverError> {
///         Ok(true)
///     }
///     fn stamp(&mut self) -> Result<u64, DriverError> {
///         Ok(self.0)
///     }
/// }
/// # let mut clock = HostTicks(0, std::time::Instant::now());
/// # assert!(!clock.queue_stamp(true)?);
/// # assert!(clock.stamp_written()?);
/// # Ok::<(), DriverError>(())
/// ```
pub trait StampClock {
    /// Nanoseconds of device time per tick (Vulkan's `timestampPeriod`).
    fn period_ns(&self) -> f64;

    /// How many low bits of a stamp count (Vulkan's
    /// `timestampValidBits`); the clock wraps past them. Default: 64.
    fn valid_bits(&self) -> u32 {
        64
    }

    /// Queue one anchor stamp. With `gated`, and where the clock has a
    /// gate, behind it, with a mark ahead of it that says when the device
    /// got there ([`at_gate`](Self::at_gate)); then says `true`, and the
    /// stamp waits for [`open_gate`](Self::open_gate). `false`: queued
    /// without a gate.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver refused; nothing waits on the host.
    fn queue_stamp(&mut self, gated: bool) -> Result<bool, DriverError>;

    /// Whether the device has reached the gate of the stamp queued last.
    /// Default: `true` (no way to ask: the placer opens at once).
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver could not say; the placer opens the
    /// gate and gives the sample up.
    fn at_gate(&mut self) -> Result<bool, DriverError> {
        Ok(true)
    }

    /// Let the stamp queued last past its gate. Called once for every
    /// gated stamp, on every path, errors included. Default: nothing to
    /// open.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver refused; the stamp may never be
    /// written, and the placer gives the sample up.
    fn open_gate(&mut self) -> Result<(), DriverError> {
        Ok(())
    }

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

    /// The driver's own pairing of a device stamp with the host clock
    /// (`VK_EXT_calibrated_timestamps`), where it has one: the device's
    /// ticks, and where they lie on the host clock with the pairing's
    /// bound. The placer holds it against a bracket before trusting it.
    /// Default: `Ok(None)`.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver has one but refused; the placer
    /// anchors by bracket.
    fn paired(&mut self) -> Result<Option<(u64, HostStamp)>, DriverError> {
        Ok(None)
    }

    /// The longest the device takes to reach a gate just queued with no
    /// other work ahead: how long the placer waits for the mark before it
    /// opens the gate anyway. Default: 1 ms.
    fn settle(&self) -> Duration {
        Duration::from_millis(1)
    }
}
