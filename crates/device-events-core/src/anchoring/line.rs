//! A line from device time to host time: where one device point (an
//! anchor) lies on the host clock, the device clock's rate against the
//! host's, and how far each can be off. Every placement, of an event
//! backend's reading or of an absolute device stamp, goes through one.

use std::time::{Duration, Instant};

use crate::anchoring::drift::AnchorPlacement;

/// A device point on the host clock, and the rate from there on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostLine {
    /// Best estimate of when the device reached the point, on the host
    /// clock.
    pub(crate) instant: Instant,
    /// How far `instant` can be from the truth.
    pub(crate) uncertainty: Duration,
    /// Host time per unit of device time (1 / the device clock's rate).
    pub(crate) scale: f64,
    /// A bound on `scale`'s relative error.
    pub(crate) rate_uncertainty: f64,
}

impl HostLine {
    /// The line through an anchor the drift fit placed.
    pub(crate) fn of(placement: &AnchorPlacement) -> Self {
        Self {
            instant: placement.instant,
            uncertainty: placement.uncertainty,
            scale: placement.scale,
            rate_uncertainty: placement.rate_uncertainty,
        }
    }

    /// How far a point placed `offset_ns` after the line's point can be from the
    /// truth, in nanoseconds, before the offset's own reading error: the
    /// point's own bound, and the rate's over the offset.
    pub(crate) fn placement_bound(&self, offset_ns: u64) -> u64 {
        nanos(self.uncertainty).saturating_add(self.rate_error(offset_ns))
    }

    /// How far the host duration of `device_ns` can be off through the
    /// rate, in nanoseconds.
    pub(crate) fn rate_error(&self, device_ns: u64) -> u64 {
        // Truncated, and 1 ns for it: a bound never rounds down.
        let ns = float_ns(device_ns) * self.rate_uncertainty;
        ns_of_float(ns).saturating_add(1)
    }

    /// Host duration of a device duration, at the device clock's rate, in
    /// nanoseconds both.
    pub(crate) fn host_ns_of(&self, device_ns: u64) -> u64 {
        // Rounded to the nanosecond.
        ns_of_float(float_ns(device_ns) * self.scale + 0.5)
    }

    /// Host-clock instant of a device point `offset_ns` after the line's point.
    pub(crate) fn place(&self, offset_ns: u64) -> Instant {
        self.instant + Duration::from_nanos(self.host_ns_of(offset_ns))
    }

    /// Host-clock instant of a device point `offset_ns` before the line's point.
    pub(crate) fn place_before(&self, offset_ns: u64) -> Instant {
        self.instant - Duration::from_nanos(self.host_ns_of(offset_ns))
    }
}

/// Nanoseconds as an `f64`, through `i64`: one instruction where `u64`'s
/// conversion takes several. Exact below 2⁵³ ns (104 days); a duration
/// past 292 years reads as 292 years.
#[allow(clippy::cast_possible_wrap, clippy::cast_precision_loss)]
#[inline]
fn float_ns(ns: u64) -> f64 {
    ns.min(i64::MAX as u64) as i64 as f64
}

/// The inverse of [`float_ns`], truncating; a negative or NaN value is 0.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
#[inline]
fn ns_of_float(ns: f64) -> u64 {
    (ns as i64).max(0) as u64
}

/// How far an elapsed reading of `reading_ns` nanoseconds can be off,
/// besides the driver's resolution: half the `f32` millisecond step there,
/// and the nanosecond rounding of the conversion.
///
/// An `f32`'s step at `x` is at most `x · 2⁻²³`, so half of it is at most
/// `x · 2⁻²⁴`: in whole nanoseconds, `ns >> 24`, plus 1 for that shift's
/// truncation, 1 for the conversion's rounding and 1 for the reading's own:
/// a bound never rounds down, and it costs no floating point.
#[inline]
pub(crate) fn reading_error(reading_ns: u64) -> u64 {
    (reading_ns >> 24) + 3
}

/// A duration in whole nanoseconds, `u64::MAX` past 584 years.
#[inline]
pub(crate) fn nanos(duration: Duration) -> u64 {
    duration
        .as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(duration.subsec_nanos()))
}
