//! The device clock's rate and each anchor's place on the host clock,
//! estimated from successive anchors.
//!
//! Refreshing the anchor alone leaves the drift between device and host
//! clocks in every placement: at 100 ppm a window one second from its anchor
//! lands 100 µs off. As Tracy's calibration does, the anchors are treated as
//! samples of one line, host time against device time; a fit weighted by
//! each bracket's width gives the rate, with a worst-case bound on it.
//!
//! An anchor is not placed on that line, though: a line extrapolated past
//! the points it was fitted on can leave the anchor's own bracket. Instead
//! each anchor's interval, which holds the truth, is carried forward by the
//! exact device step to the next anchor (widened by the rate's bound and the
//! reading's error) and intersected with that anchor's bracket. The result
//! lies inside the new bracket, so it is never a worse bound than the
//! bracket alone, and a bracket stretched by a stalled wake-up is cut back
//! to what earlier, tighter anchors allow. The anchor sits at the middle of
//! the intersection, whose half-width is its bound.
//!
//! Device time between anchors is read as `elapsed(previous, new)`, under a
//! second apart, so each step is exact to the `f32` reading. A gap too long
//! for that (the profiler idle for minutes) starts the chain afresh.
//!
//! Until the rate is known better than [`PRIOR`], the anchor is refreshed
//! often enough that the drift it could hide stays under [`TARGET`]; as
//! the chain lengthens, the refresh period grows to the configured bound.
//! A line once trusted is kept until a better one replaces it, so a run of
//! poor brackets cannot send placement back to the prior.

use std::collections::VecDeque;

use std::time::{Duration, Instant};

use crate::anchoring::bracket::Point;
use crate::config::AnchorConfig;
use crate::tunables::drift::{KEEP, MAX_AGE, MIN_AGE, PRIOR, TARGET, WEIGHT_FLOOR_NS};

/// One anchor as a point of the line: host time against device time.
#[derive(Clone, Copy)]
struct FitPoint {
    /// The bracket's midpoint, from the chain's base.
    host_ns: f64,
    device_ns: f64,
    /// The bracket's half-width: how far `host_ns` can be from the truth.
    half_width_ns: f64,
    /// Reading error accumulated along the chain up to `device_ns`.
    chain_error_ns: f64,
}

/// The interval, from the chain's base, that holds the last anchor's true
/// host time, carried forward to the next anchor, and where that anchor
/// lies on the chain.
#[derive(Clone, Copy)]
struct Carried {
    low_ns: f64,
    high_ns: f64,
    device_ns: f64,
    chain_error_ns: f64,
}

/// The rate fitted through recent anchors, and the intervals carried
/// between them.
pub(crate) struct DriftFit {
    /// Twice the driver's timestamp resolution: how far a device span
    /// between two stamps can be off, on top of the readings' rounding.
    ends_ns: f64,
    base: Option<Instant>,
    points: VecDeque<FitPoint>,
    /// The last line whose rate was known better than the prior.
    trusted: Option<Rate>,
    carried: Option<Carried>,
}

/// Where a new anchor sits.
pub(crate) struct AnchorPlacement {
    pub(crate) instant: Instant,
    /// How far `instant` can be from the truth.
    pub(crate) uncertainty: Duration,
    /// Host time per unit of device time.
    pub(crate) scale: f64,
    /// A bound on `scale`'s error, relative: the prior when unfitted.
    pub(crate) rate_uncertainty: f64,
    pub(crate) max_age: Duration,
}

impl AnchorPlacement {
    /// An anchor standing alone: its bracket's midpoint, at rate 1.
    pub(crate) fn alone(measured: Instant, half_width: Duration, max_age: Duration) -> Self {
        Self {
            instant: measured,
            uncertainty: half_width,
            scale: 1.0,
            rate_uncertainty: PRIOR,
            max_age,
        }
    }
}

/// A slope and a worst-case bound on its error.
#[derive(Clone, Copy)]
struct Rate {
    scale: f64,
    worst_case: f64,
}

impl DriftFit {
    /// The anchor at `point`, `device` ns along the chain (and its error):
    /// placed by the fit where drift is corrected, else standing alone; at
    /// the point a driver's pairing chose, where one did, inside what the
    /// fit leaves, and bound by that interval's farther edge.
    pub(crate) fn place(
        &mut self,
        point: Point,
        device: (f64, f64),
        config: &AnchorConfig,
    ) -> AnchorPlacement {
        let (at, bound, age) = (point.at, point.bound, config.anchor_max_age);
        let mut placed = if config.drift_correction {
            self.add_anchor(at, bound, device.0, device.1, age)
        } else {
            AnchorPlacement::alone(at, bound, age)
        };
        if let Some(paired) = point.paired {
            let low = placed.instant.checked_sub(placed.uncertainty);
            let (low, high) = (
                low.unwrap_or(placed.instant),
                placed.instant + placed.uncertainty,
            );
            placed.instant = paired.clamp(low, high);
            placed.uncertainty = (placed.instant - low).max(high - placed.instant);
        }
        placed
    }

    pub(crate) fn new(resolution: Duration) -> Self {
        Self {
            ends_ns: 2.0 * resolution.as_nanos() as f64,
            base: None,
            points: VecDeque::with_capacity(KEEP),
            trusted: None,
            carried: None,
        }
    }

    /// Forget every anchor: the next one starts a chain.
    pub(crate) fn restart(&mut self) {
        *self = Self {
            ends_ns: self.ends_ns,
            ..Self::new(Duration::ZERO)
        };
    }

    /// Add an anchor measured at `measured` (± `half_width`) at `device_ns`
    /// (± `device_error_ns`) along the chain, and place it.
    pub(crate) fn add_anchor(
        &mut self,
        measured: Instant,
        half_width: Duration,
        device_ns: f64,
        device_error_ns: f64,
        max_age: Duration,
    ) -> AnchorPlacement {
        let base = *self.base.get_or_insert(measured);
        let host_ns = measured.saturating_duration_since(base).as_nanos() as f64;
        let half_width_ns = half_width.as_nanos() as f64;
        if self.points.len() == KEEP {
            self.points.pop_front();
        }
        self.points.push_back(FitPoint {
            host_ns,
            device_ns,
            half_width_ns,
            chain_error_ns: device_error_ns,
        });
        if let Some(rate) = self.line().filter(|rate| rate.worst_case < PRIOR) {
            self.trusted = Some(rate);
        }
        let rate = self.trusted.unwrap_or(Rate {
            scale: 1.0,
            worst_case: PRIOR,
        });
        let bracket = (host_ns - half_width_ns, host_ns + half_width_ns);
        let (low, high) = self
            .carried
            .and_then(|carried| {
                let step = device_ns - carried.device_ns;
                let spread = step.abs() * rate.worst_case
                    + (device_error_ns - carried.chain_error_ns).abs()
                    + self.ends_ns;
                let forward = (
                    carried.low_ns + step * rate.scale - spread,
                    carried.high_ns + step * rate.scale + spread,
                );
                let low = bracket.0.max(forward.0);
                let high = bracket.1.min(forward.1);
                // Disjoint: one of the two bounds did not hold (a bracket
                // the driver stamped outside of); trust the fresh one.
                (low <= high).then_some((low, high))
            })
            .unwrap_or(bracket);
        self.carried = Some(Carried {
            low_ns: low,
            high_ns: high,
            device_ns,
            chain_error_ns: device_error_ns,
        });
        let middle = (low + high) / 2.0;
        let instant = if middle >= host_ns {
            measured + Duration::from_nanos((middle - host_ns) as u64)
        } else {
            measured - Duration::from_nanos((host_ns - middle) as u64)
        };
        AnchorPlacement {
            instant,
            // Rounded up: the bound must hold after the conversion.
            uncertainty: Duration::from_nanos(((high - low) / 2.0).ceil() as u64 + 1),
            scale: rate.scale,
            rate_uncertainty: rate.worst_case,
            max_age: age_for(rate.worst_case).min(max_age),
        }
    }

    /// Least squares `host = offset + scale × device`, each point weighted
    /// by the inverse square of its bracket's half-width: a wake-up the
    /// scheduler delayed widens a bracket and moves its midpoint, and such
    /// a point should barely pull the line, where a hard cut-off (keep only
    /// brackets within 1.5x the tightest) lets one unusually tight bracket
    /// exclude nearly every other point.
    fn line(&self) -> Option<Rate> {
        if self.points.len() < 3 {
            return None;
        }
        let weight = |p: &FitPoint| 1.0 / (p.half_width_ns + WEIGHT_FLOOR_NS).powi(2);
        let total: f64 = self.points.iter().map(weight).sum();
        let mean_d = self
            .points
            .iter()
            .map(|p| weight(p) * p.device_ns)
            .sum::<f64>()
            / total;
        let mean_h = self
            .points
            .iter()
            .map(|p| weight(p) * p.host_ns)
            .sum::<f64>()
            / total;
        let (mut var, mut cov) = (0.0, 0.0);
        for p in &self.points {
            var += weight(p) * (p.device_ns - mean_d).powi(2);
            cov += weight(p) * (p.device_ns - mean_d) * (p.host_ns - mean_h);
        }
        if var <= 0.0 {
            return None;
        }
        let scale = cov / var;
        if !(0.5..2.0).contains(&scale) {
            return None;
        }
        // The slope is linear in each point's host value, with coefficient
        // weight × (d − mean) / var: its worst case sums each coefficient
        // times that point's error, the bracket's half-width and the
        // device position's error against the oldest point kept: the
        // readings' rounding since, and the two stamps' resolution (an
        // error all points share moves none of the slope).
        let front = self.points.front()?.chain_error_ns;
        let worst: f64 = self
            .points
            .iter()
            .map(|p| {
                let error = p.half_width_ns + (p.chain_error_ns - front) + self.ends_ns;
                weight(p) * (p.device_ns - mean_d).abs() * error.max(1.0)
            })
            .sum();
        Some(Rate {
            scale,
            worst_case: worst / var,
        })
    }
}

/// Refresh period for which a rate uncertain by `uncertainty` hides no more
/// than [`TARGET`] of drift.
fn age_for(uncertainty: f64) -> Duration {
    let seconds = TARGET.as_secs_f64() / uncertainty.max(1e-12);
    Duration::from_secs_f64(seconds.min(MAX_AGE.as_secs_f64())).max(MIN_AGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brackets around a device clock running 50 ppm fast against the
    /// host, each `width` wide with the truth at `at` (0: early edge, 1:
    /// late edge) of it, every 10 ms.
    fn feed(
        fit: &mut DriftFit,
        base: Instant,
        brackets: &[(u64, f64)],
    ) -> Vec<(AnchorPlacement, u64)> {
        brackets
            .iter()
            .enumerate()
            .map(|(i, &(width, at))| {
                let truth_ns = 1_000_000_000 + i as u64 * 10_000_000;
                let device_ns = truth_ns as f64 * (1.0 + 50e-6);
                let before = truth_ns - (width as f64 * at) as u64;
                let measured = base + Duration::from_nanos(before + width / 2);
                let placed = fit.add_anchor(
                    measured,
                    Duration::from_nanos(width / 2),
                    device_ns,
                    0.0,
                    Duration::from_secs(1),
                );
                (placed, truth_ns)
            })
            .collect()
    }

    fn error_ns(base: Instant, placed: &AnchorPlacement, truth_ns: u64) -> u64 {
        let truth = base + Duration::from_nanos(truth_ns);
        let (a, b) = (placed.instant, truth);
        a.saturating_duration_since(b)
            .max(b.saturating_duration_since(a))
            .as_nanos() as u64
    }

    #[test]
    fn a_stalled_bracket_is_cut_back_by_the_anchors_before_it() {
        let base = Instant::now();
        let mut fit = DriftFit::new(Duration::from_nanos(500));
        // Forty 4 µs brackets with the truth at their late edge, then one
        // stretched to 600 µs by a wake-up stall, the truth 100 µs in.
        let mut brackets = vec![(4_000, 1.0); 40];
        brackets.push((600_000, 100.0 / 600.0));
        let placed = feed(&mut fit, base, &brackets);
        let (last, truth) = placed.last().unwrap();
        let error = error_ns(base, last, *truth);
        assert!(
            error < 5_000,
            "the stalled anchor is {error} ns off (its midpoint is 200 µs off)"
        );
        assert!(error <= last.uncertainty.as_nanos() as u64);
    }

    #[test]
    fn every_anchor_lies_inside_its_own_bracket_and_its_bound_holds() {
        let base = Instant::now();
        let mut fit = DriftFit::new(Duration::from_nanos(500));
        let brackets: Vec<(u64, f64)> = (0..200)
            .map(|i| (2_000 + (i * 7919 % 13) * 1_000, (i * 31 % 10) as f64 / 10.0))
            .collect();
        for (i, (placed, truth)) in feed(&mut fit, base, &brackets).iter().enumerate() {
            let (width, _) = brackets[i];
            let error = error_ns(base, placed, *truth);
            assert!(error <= placed.uncertainty.as_nanos() as u64, "anchor {i}");
            assert!(
                placed.uncertainty.as_nanos() as u64 <= width / 2 + 1,
                "anchor {i}"
            );
        }
    }

    /// The median and p99 errors of the fit's anchors are no worse than
    /// their brackets' midpoints (anchors standing alone), over brackets a
    /// loaded host gives: mostly narrow, some stretched by a stall, the
    /// truth anywhere inside. Brackets fixed here, not the machine's: the
    /// end-to-end checks compare medians only, p99 being the host's luck.
    #[test]
    fn the_fit_never_places_worse_than_anchors_alone() {
        let base = Instant::now();
        let mut fit = DriftFit::new(Duration::from_nanos(500));
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let brackets: Vec<(u64, f64)> = (0..2_000)
            .map(|_| {
                let width = match next() % 50 {
                    0 => 50_000 + next() % 500_000,
                    1..=4 => 10_000 + next() % 40_000,
                    _ => 1_000 + next() % 4_000,
                };
                (width, (next() % 1_001) as f64 / 1_000.0)
            })
            .collect();
        let placed = feed(&mut fit, base, &brackets);
        let (mut fitted, mut alone): (Vec<u64>, Vec<u64>) = placed
            .iter()
            .zip(&brackets)
            .skip(10)
            .map(|((placed, truth), &(width, at))| {
                let midpoint = (width as f64 * (0.5 - at)).abs() as u64;
                (error_ns(base, placed, *truth), midpoint)
            })
            .unzip();
        fitted.sort_unstable();
        alone.sort_unstable();
        for q in [0.5, 0.99] {
            let i = ((fitted.len() - 1) as f64 * q).round() as usize;
            assert!(
                fitted[i] <= alone[i],
                "at q={q}: {} ns with the fit, {} ns alone",
                fitted[i],
                alone[i]
            );
        }
    }

    #[test]
    fn the_fitted_rate_is_bounded_by_its_stated_error() {
        let base = Instant::now();
        let mut fit = DriftFit::new(Duration::from_nanos(500));
        let brackets: Vec<(u64, f64)> = (0..64).map(|i| (3_000, (i % 4) as f64 / 3.0)).collect();
        let placed = feed(&mut fit, base, &brackets);
        let last = &placed.last().unwrap().0;
        let truth = 1.0 / (1.0 + 50e-6);
        assert!(last.rate_uncertainty < PRIOR, "the rate is trusted");
        assert!(
            (last.scale - truth).abs() <= last.rate_uncertainty,
            "scale {} against {truth}, ± {}",
            last.scale,
            last.rate_uncertainty
        );
    }
}
