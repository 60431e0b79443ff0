//! Absolute device stamps placed on the host clock, for a device clock that
//! gives ticks ([`StampClock`]) instead of events: anchored by the event
//! backends' bracket loop and pairing policy ([`crate::anchoring::bracket`])
//! through [`ClockProbe`], drift fit and per-stamp bound; ticks wrap.

use std::time::{Duration, Instant};

use crate::anchoring::bracket::{self, Bracket, Probe};
use crate::anchoring::drift::DriftFit;
use crate::anchoring::line::{HostLine, nanos, reading_error};
use crate::anchoring::stamp_clock::StampClock;
use crate::anchoring::{Gate, HostStamp};
use crate::limits::Limits;
use crate::placement::{Placement, place_window};
use crate::tunables::calibrator::STAMP_GIVE_UP;
use crate::tunables::drift::PRIOR;
use crate::{AnchorConfig, DriverError};

/// Who refuses, in a stamp clock's calibration errors.
const CLOCK: &str = "device clock";

/// Places one device's absolute stamps on the host clock, through anchors
/// taken on the thread that calls [`calibrate`](Self::calibrate).
///
/// It reads all of [`AnchorConfig`], with
/// `max_anchor_distance` within half the clock's span; each stamp's
/// resolution is one tick of the clock.
///
/// ```
/// use device_events_core::backend::StampClock;
/// use device_events_core::{ClockPlacer, DriverError, AnchorConfig};
/// use std::time::Instant;
///
/// /// Device ticks that are host nanoseconds since `origin`.
/// struct HostTicks(Instant, u64);
/// impl StampClock for HostTicks {
///     fn period_ns(&self) -> f64 {
///         1.0
///     }
///     fn queue_stamp(&mut self) -> Result<(), DriverError> {
///         self.1 = self.0.elapsed().as_nanos() as u64;
///         Ok(())
///     }
///     fn stamp_written(&mut self) -> Result<bool, DriverError> {
///         Ok(true)
///     }
///     fn stamp(&mut self) -> Result<u64, DriverError> {
///         Ok(self.1)
///     }
/// }
///
/// let origin = Instant::now();
/// let mut placer = ClockPlacer::new(HostTicks(origin, 0), AnchorConfig::default());
/// assert!(placer.due());
/// placer.calibrate()?;
/// let window = placer.place_window(2_000_000, 3_000_000).expect("placed");
/// assert_eq!(window.duration.as_micros(), 1_000);
/// let off = window.start.duration_since(origin).as_nanos().abs_diff(2_000_000);
/// assert!(off <= window.uncertainty.as_nanos());
/// # Ok::<(), DriverError>(())
/// ```
pub struct ClockPlacer<C: StampClock> {
    clock: C,
    config: AnchorConfig,
    fit: DriftFit,
    anchor: Option<ClockAnchor>,
    /// Where the fit's device positions are measured from, and when.
    base_ticks: u64,
    base_measured: Option<Instant>,
    refused_pairings: u64,
    /// Whether anchors are gated: `gated_anchor`, until the gate refused.
    gated: bool,
}

impl<C: StampClock> std::fmt::Debug for ClockPlacer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClockPlacer")
            .field("period_ns", &self.clock.period_ns())
            .field("anchor_uncertainty", &self.anchor_uncertainty())
            .field("refused_pairings", &self.refused_pairings)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy)]
struct ClockAnchor {
    ticks: u64,
    line: HostLine,
    stale_after: Option<Instant>,
}

impl<C: StampClock> ClockPlacer<C> {
    /// A placer of `clock`'s stamps, with no anchor yet.
    pub fn new(clock: C, config: AnchorConfig) -> Self {
        let tick = tick_of(&clock);
        Self {
            clock,
            gated: config.gated_anchor,
            config,
            fit: DriftFit::new(tick),
            anchor: None,
            base_ticks: 0,
            base_measured: None,
            refused_pairings: 0,
        }
    }

    /// The clock, for the backend's own calls.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Whether an anchor is due: none yet, or the last one older than its
    /// bound (`anchor_max_age`, shorter until the drift fit is trusted).
    pub fn due(&self) -> bool {
        self.anchor.is_none_or(|anchor| {
            anchor
                .stale_after
                .is_some_and(|after| (self.config.host_clock)() > after)
        })
    }

    /// How far the current anchor can be from the truth (`None` before one).
    pub fn anchor_uncertainty(&self) -> Option<Duration> {
        self.anchor.map(|anchor| anchor.line.uncertainty)
    }

    /// How many of the driver's pairings lay outside the bracket beside them.
    pub fn refused_pairings(&self) -> u64 {
        self.refused_pairings
    }

    /// Take an anchor now, on this thread: it waits for the device to
    /// write a few stamps (microseconds on an idle queue, up to 10 s behind
    /// other work, then an error). A failed calibration keeps the anchor
    /// before it.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the clock's driver refused or the device did
    /// not write a stamp in time.
    pub fn calibrate(&mut self) -> Result<(), DriverError> {
        let mut probe = ClockProbe {
            clock: &mut self.clock,
            gated: self.gated,
        };
        let bracket = bracket::tightest(&mut probe, &self.config);
        self.gated = probe.gated;
        let bracket = bracket?;
        let policy = self.config.driver_pairing;
        let pairing = |b: &Bracket<u64>| Ok(self.clock.pairing()?.and_then(|p| self.carried(p, b)));
        let (point, refused) = bracket.point(policy, pairing, CLOCK);
        self.refused_pairings += u64::from(refused);
        let (ticks, measured) = (bracket.stamp, point.at);
        // A clock that wraps is read unambiguously only within half its
        // span: the fit starts afresh before its base is that far.
        let half_span = self.half_span();
        let restart = self.base_measured.is_none_or(|base| {
            let (after, before) = self.offset_ns(ticks, self.base_ticks);
            measured.saturating_duration_since(base) >= half_span / 2
                || after.max(before) >= nanos(half_span / 2)
        });
        if restart {
            self.fit.restart();
            self.base_ticks = ticks;
            self.base_measured = Some(measured);
        }
        let (after, before) = self.offset_ns(ticks, self.base_ticks);
        let device_ns = after as f64 - before as f64;
        let placement = self.fit.place(point, (device_ns, 0.0), &self.config);
        self.anchor = Some(ClockAnchor {
            ticks,
            line: HostLine::of(&placement),
            stale_after: measured.checked_add(placement.max_age),
        });
        Ok(())
    }

    /// Where the device wrote `ticks`, on the host clock, with its bound;
    /// `None` before the first anchor, or further from it than
    /// `max_anchor_distance`.
    pub fn place(&self, ticks: u64) -> Option<HostStamp> {
        let anchor = self.anchor?;
        let (after, before) = self.offset_ns(ticks, anchor.ticks);
        let offset = after.max(before);
        if offset > nanos(self.max_distance()) {
            return None;
        }
        let at = if before == 0 {
            anchor.line.place(after)
        } else {
            anchor.line.place_before(before)
        };
        let bound = anchor
            .line
            .placement_bound(offset)
            .saturating_add(reading_error(offset))
            .saturating_add(nanos(tick_of(&self.clock)));
        Some(HostStamp {
            at,
            uncertainty: Duration::from_nanos(bound),
        })
    }

    /// A window from the stamp `start` to the stamp `end`, placed: its
    /// device duration, both ends on the host clock and their bound.
    /// `None` before the first anchor, for an end before its start, or a
    /// window further from the anchor than `max_anchor_distance`.
    pub fn place_window(&self, start: u64, end: u64) -> Option<Placement> {
        let anchor = self.anchor?;
        let (span, reversed) = self.offset_ns(end, start);
        if reversed != 0 {
            return None;
        }
        let (after, before) = self.offset_ns(start, anchor.ticks);
        let limits = Limits {
            max_distance: self.max_distance(),
            resolution: tick_of(&self.clock),
        };
        place_window(
            &anchor.line,
            Duration::from_nanos(span),
            Duration::from_nanos(after),
            Duration::from_nanos(before),
            &limits,
        )
        .ok()
    }

    /// The driver's pairing at `ticks`, carried to the bracket's stamp at
    /// the fitted rate (or 1), and how far the rate's bound (the fit's, or
    /// a crystal's) and the ticks' rounding may have moved it.
    fn carried(
        &self,
        (ticks, stamp): (u64, HostStamp),
        bracket: &Bracket<u64>,
    ) -> Option<(HostStamp, Duration)> {
        let (scale, rate_error) = self.anchor.map_or((1.0, PRIOR), |anchor| {
            (anchor.line.scale, anchor.line.rate_uncertainty.max(0.0))
        });
        let (after, before) = self.offset_ns(ticks, bracket.stamp);
        let step = after as f64 - before as f64;
        let carry = step.abs() * rate_error + 2.0 * nanos(tick_of(&self.clock)) as f64;
        let shift = step * scale;
        let at = if shift >= 0.0 {
            stamp.at.checked_sub(Duration::from_nanos(shift as u64))
        } else {
            stamp.at.checked_add(Duration::from_nanos((-shift) as u64))
        }?;
        let carry = Duration::from_nanos(carry.ceil() as u64);
        Some((HostStamp { at, ..stamp }, carry))
    }

    /// The device time from `from` to `ticks` in nanoseconds, as (after,
    /// before): one of the two is zero. Read modulo the clock's valid
    /// bits, the nearer way round.
    fn offset_ns(&self, ticks: u64, from: u64) -> (u64, u64) {
        let mask = self.mask();
        let forward = ticks.wrapping_sub(from) & mask;
        let (after, before) = if forward <= mask / 2 {
            (forward, 0)
        } else {
            (0, (mask - forward).saturating_add(1))
        };
        (self.ticks_ns(after), self.ticks_ns(before))
    }

    fn mask(&self) -> u64 {
        match self.clock.valid_bits() {
            0 | 64.. => u64::MAX,
            bits => (1_u64 << bits) - 1,
        }
    }

    /// How far from its anchor a stamp is placed: `max_anchor_distance`,
    /// and within half the clock's span, past which a stamp would be read
    /// on the wrong side.
    fn max_distance(&self) -> Duration {
        self.config.max_anchor_distance.min(self.half_span() / 2)
    }

    /// Half the clock's span before it wraps, on the host clock.
    fn half_span(&self) -> Duration {
        Duration::from_nanos(self.ticks_ns(self.mask() / 2))
    }

    fn ticks_ns(&self, ticks: u64) -> u64 {
        let ns = ticks as f64 * self.clock.period_ns() + 0.5;
        if ns >= u64::MAX as f64 {
            u64::MAX
        } else {
            ns as u64
        }
    }
}

/// One tick of `clock`, rounded up to the nanosecond: each stamp's
/// resolution.
fn tick_of<C: StampClock>(clock: &C) -> Duration {
    Duration::from_nanos(clock.period_ns().ceil().max(1.0) as u64)
}

/// A stamp clock's stamps for the bracket loop.
struct ClockProbe<'a, C: StampClock> {
    clock: &'a mut C,
    /// Whether its gate is used; cleared when it refused to close.
    gated: bool,
}

impl<C: StampClock> Probe for ClockProbe<'_, C> {
    type Stamp = u64;
    const BACKEND: &'static str = CLOCK;
    /// The clock's gate queues its own mark.
    const MARKS: bool = false;
    const GIVE_UP: Duration = STAMP_GIVE_UP;

    fn gate(&mut self) -> Option<&mut (dyn Gate + 'static)> {
        if self.gated { self.clock.gate() } else { None }
    }

    fn drop_gate(&mut self) {
        self.gated = false;
    }

    fn queue(&mut self) -> Result<u64, DriverError> {
        self.clock.queue_stamp().map(|()| 0)
    }

    fn written(&mut self, _: &u64) -> Option<Result<bool, DriverError>> {
        Some(self.clock.stamp_written())
    }

    fn read(&mut self, stamp: &mut u64) -> Result<(), DriverError> {
        *stamp = self.clock.stamp()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ticks that are host nanoseconds since `origin`, plus `offset`,
    /// wrapping past `bits`.
    struct HostTicks {
        origin: Instant,
        offset: u64,
        bits: u32,
        stamp: u64,
    }

    impl HostTicks {
        fn new(offset: u64, bits: u32) -> Self {
            Self {
                origin: Instant::now() - Duration::from_secs(1),
                offset,
                bits,
                stamp: 0,
            }
        }

        fn ticks_at(&self, at: Instant) -> u64 {
            let ns = u64::try_from(at.duration_since(self.origin).as_nanos()).unwrap_or(0);
            let mask = if self.bits >= 64 {
                u64::MAX
            } else {
                (1 << self.bits) - 1
            };
            ns.wrapping_add(self.offset) & mask
        }
    }

    impl StampClock for HostTicks {
        fn period_ns(&self) -> f64 {
            1.0
        }
        fn valid_bits(&self) -> u32 {
            self.bits
        }
        fn queue_stamp(&mut self) -> Result<(), DriverError> {
            self.stamp = self.ticks_at(Instant::now());
            Ok(())
        }
        fn stamp_written(&mut self) -> Result<bool, DriverError> {
            Ok(true)
        }
        fn stamp(&mut self) -> Result<u64, DriverError> {
            Ok(self.stamp)
        }
    }

    fn calibrated(clock: HostTicks) -> ClockPlacer<HostTicks> {
        let mut placer = ClockPlacer::new(clock, AnchorConfig::default());
        placer.calibrate().expect("calibrates");
        placer
    }

    fn off(a: Instant, b: Instant) -> Duration {
        a.saturating_duration_since(b)
            .max(b.saturating_duration_since(a))
    }

    #[test]
    fn nothing_is_placed_before_the_first_anchor() {
        let placer = ClockPlacer::new(HostTicks::new(0, 64), AnchorConfig::default());
        assert!(placer.due());
        assert!(placer.place(5).is_none());
        assert!(placer.place_window(5, 6).is_none());
    }

    #[test]
    fn a_window_ending_before_it_starts_is_not_placed() {
        let placer = calibrated(HostTicks::new(0, 64));
        let now = placer.clock().ticks_at(Instant::now());
        assert!(placer.place_window(now, now + 1_000).is_some());
        assert!(placer.place_window(now + 1_000, now).is_none());
    }

    #[test]
    fn stamps_on_either_side_of_a_wrap_are_placed_within_their_bound() {
        // 32 valid bits wrap every 4.3 s; the clock wraps 1 ms after the
        // anchor.
        let wrap = (1_u64 << 32) - 1_000_000;
        let placer = calibrated(HostTicks::new(wrap, 32));
        for ms in [-5_i64, 0, 2, 500] {
            let at = if ms < 0 {
                Instant::now() - Duration::from_millis(ms.unsigned_abs())
            } else {
                Instant::now() + Duration::from_millis(ms.unsigned_abs())
            };
            let stamp = placer.place(placer.clock().ticks_at(at)).expect("placed");
            assert!(
                off(stamp.at, at) <= stamp.uncertainty,
                "{ms} ms: {:?} off, bound {:?}",
                off(stamp.at, at),
                stamp.uncertainty
            );
        }
    }

    #[test]
    fn anchors_taken_again_and_again_across_wraps_place_within_their_bound() {
        // 28 valid bits at 1 ns wrap every 268 ms: 400 ms of anchors every
        // 10 ms cross it.
        let mut placer = calibrated(HostTicks::new(0, 28));
        let end = Instant::now() + Duration::from_millis(400);
        while Instant::now() < end {
            placer.calibrate().expect("calibrates");
            for back in [Duration::ZERO, Duration::from_millis(3)] {
                let at = Instant::now() - back;
                let stamp = placer.place(placer.clock().ticks_at(at)).expect("placed");
                assert!(
                    off(stamp.at, at) <= stamp.uncertainty,
                    "{:?} off, bound {:?}",
                    off(stamp.at, at),
                    stamp.uncertainty
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
