//! Where a device reading lies on the host clock, and how far off it can
//! be: the placement formula, written once. A window's reading gives the
//! device's offsets of its start from its anchor and its span; its
//! [`Anchor`] turns device nanoseconds into host time, and states the
//! error of each part.

use std::time::{Duration, Instant};

pub(crate) mod clock_placer;

use crate::anchoring::line::{HostLine, nanos, reading_error};
use crate::limits::Limits;

/// A window's reading: what the device measured, placed on the host clock.
///
/// The crate's own type, so that a runtime takes no profiling framework to
/// read a window; `device-events-cubecl` makes CubeCL's `ProfileTicks` of
/// [`start`](Self::start) and [`end`](Self::end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The span between the window's start and end, as the device measured it.
    pub duration: Duration,
    /// Where the device reached the window's start, on the host clock.
    pub start: Instant,
    /// Where the device reached the window's end, on the host clock: the
    /// device's span converted at the fitted rate of its clock against the
    /// host's.
    pub end: Instant,
    /// How far either end can be from where the device really was, on the
    /// host clock: the anchor's bracket half-width, how far the drift fit
    /// moved the anchor off the bracket's midpoint, the rate's worst-case
    /// error (the fit's, or a crystal's ±100 ppm before the fit is trusted)
    /// over the distance from the anchor, and each reading's resolution
    /// ([`ProfilerConfig::timer_resolution`](crate::ProfilerConfig::timer_resolution)) and `f32` rounding. It holds
    /// when the device stamps the anchor between the host's clock reads
    /// around its record and wait, as any driver does whose records are not
    /// stamped before they are queued.
    pub uncertainty: Duration,
}

/// A reading too far from its anchor to be placed within the bound stated.
pub(crate) struct TooFar {
    pub(crate) distance: Duration,
    pub(crate) bound: Duration,
}

/// Place a window on the host clock through `anchor`: `span` between its
/// start and end, and its start `after` the anchor (or `before` it, for an
/// anchor taken after the window started; one of the two is zero), all as
/// the device measured them.
pub(crate) fn place_window(
    anchor: &HostLine,
    span: Duration,
    after: Duration,
    before: Duration,
    limits: &Limits,
) -> Result<Placement, TooFar> {
    // Nanoseconds from here on: integer sums, one conversion at the end.
    let (span_ns, after_ns, before_ns) = (nanos(span), nanos(after), nanos(before));
    let distance = after_ns.saturating_add(span_ns).max(before_ns);
    if distance > nanos(limits.max_distance) {
        return Err(TooFar {
            distance: Duration::from_nanos(distance),
            bound: limits.max_distance,
        });
    }
    let begin = if before_ns == 0 {
        anchor.place(after_ns)
    } else {
        anchor.place_before(before_ns)
    };
    let offset = after_ns.max(before_ns);
    let resolution = nanos(limits.resolution);
    let uncertainty = anchor
        .placement_bound(offset)
        .saturating_add(reading_error(offset))
        .saturating_add(resolution)
        .saturating_add(anchor.rate_error(span_ns))
        .saturating_add(reading_error(span_ns))
        .saturating_add(resolution);
    Ok(Placement {
        duration: span,
        start: begin,
        end: begin + Duration::from_nanos(anchor.host_ns_of(span_ns)),
        uncertainty: Duration::from_nanos(uncertainty),
    })
}
