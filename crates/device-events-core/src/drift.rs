//! The device clock's rate and offset, estimated from successive anchors.
//!
//! Refreshing the anchor alone leaves the drift between device and host
//! clocks in every placement: at 100 ppm a window one second from its anchor
//! lands 100 µs off. As Tracy's calibration does, the anchors are treated as
//! samples of one line, host time against device time, and a least-squares
//! fit over the recent ones gives the rate (placing a window `offset` after
//! its anchor at `offset × host/device`) and smooths each anchor's position,
//! averaging away the scatter of single brackets.
//!
//! Device time between anchors is read as `elapsed(previous, new)`, under a
//! second apart, so each step is exact to the `f32` reading. A gap too long
//! for that (the profiler idle for minutes) starts the chain afresh.
//!
//! Until the fit's rate is known better than a crystal's ±100 ppm, it is not
//! used, and the anchor is refreshed often enough that the drift it could
//! hide stays under [`TARGET`]; as the chain lengthens, the refresh period
//! grows to the configured bound.

use std::collections::VecDeque;

use cubecl_common::profile::{Duration, Instant};

/// The placement error drift is allowed to add between refreshes.
pub(crate) const TARGET: Duration = Duration::from_micros(1);
/// The rate uncertainty assumed before any is measured: a crystal's spread.
const PRIOR: f64 = 1e-4;
/// Shortest refresh period, so a profiler never spends its time anchoring.
const MIN_AGE: Duration = Duration::from_millis(5);
/// Anchors further apart than this start a new chain: an `f32` reading of
/// the gap would lose more than the fit can gain.
pub(crate) const MAX_GAP: Duration = Duration::from_secs(10);
/// Anchors kept for the fit.
const KEEP: usize = 32;
/// Brackets this close in width count as equally tight, whatever 1.5x the
/// tightest says (a 100 ns bracket is not better than a 160 ns one).
const SAME_WIDTH_NS: f64 = 250.0;

/// One anchor as a point of the line: host time against device time.
#[derive(Clone, Copy)]
struct Point {
    host_ns: f64,
    device_ns: f64,
    /// The bracket's half-width: how far `host_ns` can be from the truth.
    half_width_ns: f64,
    /// Reading error accumulated along the chain up to `device_ns`.
    chain_error_ns: f64,
}

/// The fitted line through recent anchors.
pub(crate) struct DriftFit {
    base: Option<Instant>,
    points: VecDeque<Point>,
}

/// Where a new anchor sits, by the fit.
pub(crate) struct Placement {
    pub(crate) instant: Instant,
    /// Host time per unit of device time.
    pub(crate) scale: f64,
    /// A bound on `scale`'s error, relative: the prior when unfitted.
    pub(crate) rate_uncertainty: f64,
    pub(crate) max_age: Duration,
}

impl DriftFit {
    pub(crate) fn new() -> Self {
        Self {
            base: None,
            points: VecDeque::with_capacity(KEEP),
        }
    }

    /// Forget every anchor: the next one starts a chain.
    pub(crate) fn restart(&mut self) {
        self.base = None;
        self.points.clear();
    }

    /// Add an anchor measured at `measured` (± `half_width`) at `device_ns`
    /// (± `device_error_ns`) along the chain, and place it.
    pub(crate) fn admit(
        &mut self,
        measured: Instant,
        half_width: Duration,
        device_ns: f64,
        device_error_ns: f64,
        max_age: Duration,
    ) -> Placement {
        let base = *self.base.get_or_insert(measured);
        if self.points.len() == KEEP {
            self.points.pop_front();
        }
        self.points.push_back(Point {
            host_ns: measured.saturating_duration_since(base).as_nanos() as f64,
            device_ns,
            half_width_ns: half_width.as_nanos() as f64,
            chain_error_ns: device_error_ns,
        });
        let fallback = Placement {
            instant: measured,
            scale: 1.0,
            rate_uncertainty: PRIOR,
            max_age: age_for(PRIOR).min(max_age),
        };
        let Some(Line {
            offset,
            scale,
            uncertainty,
            worst_case,
        }) = self.line()
        else {
            return fallback;
        };
        if uncertainty >= PRIOR || !(0.5..2.0).contains(&scale) {
            return fallback;
        }
        let host_ns = offset + scale * device_ns;
        if !host_ns.is_finite() || host_ns < 0.0 {
            return fallback;
        }
        Placement {
            instant: base + Duration::from_nanos(host_ns as u64),
            scale,
            rate_uncertainty: worst_case,
            max_age: age_for(uncertainty).min(max_age),
        }
    }

    /// Least squares `host = offset + scale × device`.
    fn line(&self) -> Option<Line> {
        let n = self.points.len();
        if n < 3 {
            return None;
        }
        // As Tracy does: only anchors whose bracket is within 1.5x the
        // tightest kept take part; a wake-up the scheduler delayed widens a
        // bracket and moves its midpoint, and one such anchor would pull
        // the whole line.
        let tightest = self
            .points
            .iter()
            .map(|p| p.half_width_ns)
            .fold(f64::INFINITY, f64::min);
        let points: Vec<&Point> = self
            .points
            .iter()
            .filter(|p| p.half_width_ns <= 1.5 * tightest + SAME_WIDTH_NS)
            .collect();
        if points.len() < 3 {
            return None;
        }
        let count = points.len() as f64;
        let mean_d = points.iter().map(|p| p.device_ns).sum::<f64>() / count;
        let mean_h = points.iter().map(|p| p.host_ns).sum::<f64>() / count;
        let (mut var, mut cov) = (0.0, 0.0);
        for p in &points {
            var += (p.device_ns - mean_d).powi(2);
            cov += (p.device_ns - mean_d) * (p.host_ns - mean_h);
        }
        if var <= 0.0 {
            return None;
        }
        let scale = cov / var;
        let front = *points.first()?;
        let span = points.last()?.device_ns - front.device_ns;
        let widest = points.iter().map(|p| p.half_width_ns).fold(0.0, f64::max);
        // The slope is linear in each point's values, with weight
        // (d - mean) / var: its worst case sums each weight times that
        // point's error, the bracket's half-width and the chain's reading
        // error since the oldest point kept (an error all points share
        // moves none of the slope).
        let worst: f64 = points
            .iter()
            .map(|p| {
                let error = p.half_width_ns + (p.chain_error_ns - front.chain_error_ns);
                (p.device_ns - mean_d).abs() * error.max(1.0)
            })
            .sum();
        Some(Line {
            offset: mean_h - scale * mean_d,
            scale,
            // Two end points each off by up to the widest half-width, over
            // the span: what decides trust and the refresh period.
            uncertainty: 2.0 * widest.max(1.0) / span.max(1.0),
            worst_case: worst / var,
        })
    }
}

/// A fitted line and how far its slope can be off.
struct Line {
    offset: f64,
    scale: f64,
    /// The typical slope error, from the widest bracket over the span.
    uncertainty: f64,
    /// The slope error if every point were off by its full error in the
    /// worst direction: what a window's stated bound uses.
    worst_case: f64,
}

/// Refresh period for which a rate uncertain by `uncertainty` hides no more
/// than [`TARGET`] of drift.
fn age_for(uncertainty: f64) -> Duration {
    let seconds = TARGET.as_secs_f64() / uncertainty.max(1e-12);
    Duration::from_secs_f64(seconds.min(3600.0)).max(MIN_AGE)
}
