//! How a profiler keeps its anchor and reads its windows: what a user
//! sets. The library's internal timings (its threads' polls, sleeps and
//! back-offs) are not settable; they are in [`crate::tunables`].

use std::time::{Duration, Instant};

/// How an [`EventProfiler`](crate::EventProfiler) keeps its anchor
/// (`anchor`) and reads its windows.
#[derive(Clone, Copy, Debug)]
pub struct ProfilerConfig {
    /// How its anchors are taken, placed and refreshed.
    pub anchor: AnchorConfig,
    /// Idle events kept for reuse; beyond it, returned events are destroyed.
    /// Default: 1024.
    pub max_idle_events: usize,
    /// The driver's timestamp resolution, which [`EventApi`](crate::EventApi) does not
    /// report; part of every stated bound ([`Placement::uncertainty`](crate::Placement::uncertainty)).
    /// Default: 1 µs, the coarser of CUDA's (~0.5 µs) and HIP's (~1 µs).
    pub timer_resolution: Duration,
    /// The caller opens and closes windows (`start`, `stop`, `split`) only
    /// with the stream's context current on its thread, as a CubeCL server
    /// does (each of its commands makes its context current first): each
    /// record then takes that on the caller's word instead of asking the
    /// driver which context is current, one driver call fewer per record
    /// (see [`ThreadApi::event_record_in_current`](crate::backend::ThreadApi::event_record_in_current)
    /// for what a wrong word costs). Default: off, each record checks and
    /// binds the context itself, from any thread.
    pub context_current: bool,
}

/// What anchoring reads, for an [`EventProfiler`](crate::EventProfiler)
/// ([`ProfilerConfig::anchor`]) and a [`ClockPlacer`](crate::ClockPlacer) alike.
///
/// ```
/// let config = device_events_core::AnchorConfig::default();
/// assert_eq!(config.calibration_samples, 5);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct AnchorConfig {
    /// Re-anchor once the anchor is older than this on the host clock.
    /// Elapsed times come back as `f32` milliseconds, whose step grows with
    /// distance from the anchor: ~61 ns one second away, ~0.25 ms one hour
    /// away. Default: one second.
    pub anchor_max_age: Duration,
    /// Brackets taken per anchor; the tightest is kept. Default: 5.
    pub calibration_samples: usize,
    /// The host clock windows are placed on. Default: [`Instant::now`].
    pub host_clock: fn() -> Instant,
    /// A window whose end lies further than this from its anchor, on the
    /// device clock, resolves to `None` (logged): an `f32` reading's step
    /// there has outgrown a placement worth having. Only a window queued far
    /// behind its start, or one placed against an anchor whose refresh
    /// keeps failing, gets there. Default: 60 s, where the step is ~4 µs.
    pub max_anchor_distance: Duration,
    /// Fit the device clock's rate across anchors (see [`EventProfiler`](crate::EventProfiler)'s
    /// placement notes). Off, each anchor stands alone at rate 1 and is
    /// refreshed every `anchor_max_age`: for measuring what the fit buys.
    /// Default: on.
    pub drift_correction: bool,
    /// Record the anchor behind a gate where the backend has one
    /// ([`AnchorApi::gate`](crate::backend::AnchorApi::gate)), so that the record call and the launch
    /// latency fall before the bracket opens. Default: on.
    pub gated_anchor: bool,
    /// The longest the host waits for a gated anchor's stream to reach the
    /// gate before opening it. The gate opens as soon as a mark recorded
    /// ahead of it is reached, so this bounds the wait for a stream behind
    /// other work, whose bracket is then wide and weighs little. Default:
    /// `None`, the gate's own ([`Gate::settle`](crate::backend::Gate::settle): 50 µs
    /// on CUDA and HIP; none on OpenCL, which opens at once).
    ///
    /// A soft bound on how long a closed gate holds work sharing its
    /// stream's hardware queue: the gate opens once the calibrator thread
    /// has seen the stream reach it, so the hold also lasts however long
    /// that thread waits to be scheduled between its polls (on a loaded
    /// machine, the scheduler's latency), and at most `settle` plus that
    /// latency.
    pub gate_settle: Option<Duration>,
    /// What an anchor makes of the driver's own pairing of its clock with
    /// the host's, where it has one ([`AnchorApi::pairing`](crate::backend::AnchorApi::pairing):
    /// PoCL's stamps on `CLOCK_MONOTONIC_RAW`; [`StampClock::pairing`](crate::backend::StampClock::pairing):
    /// Vulkan's calibrated timestamps). Default: [`DriverPairing::Bracketed`].
    pub driver_pairing: DriverPairing,
}

impl Default for ProfilerConfig {
    fn default() -> Self {
        Self {
            anchor: AnchorConfig::default(),
            max_idle_events: 1024,
            timer_resolution: Duration::from_micros(1),
            context_current: false,
        }
    }
}

impl Default for AnchorConfig {
    fn default() -> Self {
        Self {
            anchor_max_age: Duration::from_secs(1),
            calibration_samples: 5,
            host_clock: Instant::now,
            max_anchor_distance: Duration::from_secs(60),
            drift_correction: true,
            gated_anchor: true,
            gate_settle: None,
            driver_pairing: DriverPairing::Bracketed,
        }
    }
}

/// What an anchor makes of a driver's own pairing of its clock with the
/// host's ([`AnchorConfig::driver_pairing`]). A pairing outside the bracket
/// taken beside it is refused (such pairings have been seen seconds off).
///
/// ```
/// use device_events_core::{DriverPairing, ProfilerConfig};
///
/// assert_eq!(ProfilerConfig::default().anchor.driver_pairing, DriverPairing::Bracketed);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverPairing {
    /// Not asked: the anchor sits at its bracket's midpoint.
    Off,
    /// The pairing chooses the point inside the bracket; the bound is its
    /// distance to the bracket's farther edge (narrowed only by what the
    /// drift fit's other anchors verify): never less than what was checked.
    Bracketed,
    /// Unchecked: the driver's stated deviation is the bound, where that
    /// interval lies inside the bracket and is the narrower. A pairing later
    /// than it claims places every window outside its stated bound.
    Unchecked,
}
