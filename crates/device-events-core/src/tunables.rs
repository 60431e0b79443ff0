//! Every internal timing and size of the library's own threads, in one
//! place, by thread: how often each asks the driver, how long it sleeps or
//! stays idle, how it backs off. What a user sets is
//! [`ProfilerConfig`](crate::ProfilerConfig)'s; these are not settable.
//! Documentation links here instead of restating a value.

use std::time::Duration;

/// The resolver thread's, which answers windows whose device work was not
/// done when first polled ([`crate::waiting::resolver`]). A lane (one
/// profiler's windows ending on one stream) is asked again at an interval
/// that starts at [`FIRST`](resolver::FIRST) and doubles up to
/// [`LAST`](resolver::LAST); a lane that just answered, or a busy one, at
/// [`HOT`](resolver::HOT).
pub(crate) mod resolver {
    use super::Duration;

    /// The first interval at which a window is asked again: a window about
    /// to finish is seen within microseconds.
    pub(crate) const FIRST: Duration = Duration::from_micros(5);
    /// Until the next ask is this close, the thread yields instead of
    /// sleeping: a sleep that short lasts the kernel's timer slack (50 µs
    /// on Linux) instead. A window is in this tight phase for its first
    /// ~100 µs only; windows pending longer are asked from a sleep.
    pub(crate) const TIGHT: Duration = Duration::from_micros(50);
    /// The longest interval: the most a long-pending window's answer can
    /// lag its end. One pending for a second is asked about twenty times a
    /// second, from a sleeping thread.
    pub(crate) const LAST: Duration = Duration::from_millis(50);
    /// How soon the next window of a lane that just answered one is asked:
    /// on a busy stream it ends soon, and asking at this pace answers it
    /// within a fraction of a millisecond from a sleeping thread.
    pub(crate) const HOT: Duration = Duration::from_micros(400);
    /// How long after its reader's usual hand-over a busy lane's next
    /// window is asked: a server timing every kernel hands each over as
    /// its first poll finds it about to end.
    pub(crate) const FOLLOW: Duration = Duration::from_micros(50);
    /// The most a busy lane's next ask waits after its last answer, its
    /// reader's pace notwithstanding: a window answered within a
    /// millisecond of its end.
    pub(crate) const SLOWEST: Duration = Duration::from_micros(600);
    /// How early a hot lane (one that just answered, or a busy one) is
    /// asked when the thread is awake for another: busy streams' asks fall
    /// into one turn, one wake-up for all of them, and no window is asked
    /// later than at its own pace.
    pub(crate) const EARLY: Duration = Duration::from_micros(200);
    /// How long a lane stays busy without answering one, and an idle
    /// lane's pace is remembered.
    pub(crate) const HOT_FOR: Duration = Duration::from_millis(20);
    /// A window answered this long after it was handed over was queued
    /// behind work (on a busy lane this wait includes the [`HOT`] pace
    /// itself). Two in a row make its lane busy; two in a row answered
    /// sooner make it idle again. One read right after `stop` on an idle
    /// stream waits only for its launch, a few microseconds.
    pub(crate) const BEHIND_WORK: Duration = Duration::from_micros(25);
    /// A window answered at once counts toward a lane's idleness only when
    /// handed over this long after the lane's last answer: sooner, its
    /// reader polls at the stream's own pace (a server reading each window
    /// about as it ends), a moment before the end, on a stream still busy.
    pub(crate) const QUIET: Duration = Duration::from_micros(1000);
    /// How long the thread stays awake, yielding, after answering the last
    /// pending window of a lane that is not busy: a server reading windows
    /// one after another hands the next over within microseconds, and a
    /// thread already awake takes it without a wake-up's latency.
    pub(crate) const YIELD_AFTER_LAST: Duration = Duration::from_micros(50);
}

/// The calibrator threads', one per device, which take anchors and release
/// a dropped profiler's anchor stream and gate
/// ([`crate::anchoring::calibrator`]). A calibration polls tightly for
/// [`POLL_FOR`](calibrator::POLL_FOR), then asks from sleeps; its thread
/// makes no driver call that waits on the device, so the process's exit
/// finds it between asks within the longest of those sleeps.
pub(crate) mod calibrator {
    use super::Duration;

    /// How long a device's thread stays idle for the next task before it
    /// leaves, once no profiler of the device is alive (while one is, it
    /// stays: its refreshes come every `anchor_max_age`).
    pub(crate) const STAY_IDLE_FOR: Duration = Duration::from_secs(2);

    /// How long a calibration polls tightly, yielding: past a launch
    /// latency and a busy machine's scheduling delays (a sleep would
    /// stretch the bracket by its own lateness), short enough to cost no
    /// core to speak of.
    pub(crate) const POLL_FOR: Duration = Duration::from_millis(1);
    /// After [`POLL_FOR`], the first sleep between asks for the anchor
    /// event; it doubles from there up to [`REACH_SLEEP_UP_TO`].
    pub(crate) const REACH_FIRST_SLEEP: Duration = Duration::from_micros(50);
    /// The longest sleep between asks for the anchor event: an anchor
    /// stream behind a long kernel (one hardware queue shared with the
    /// user's streams) costs the calibrator thread no core, and the
    /// process's exit waits no longer than this for it to leave. Such a
    /// bracket is wide, and the fit weighs it as such.
    pub(crate) const REACH_SLEEP_UP_TO: Duration = Duration::from_millis(1);
    /// How long the wait for a gate's mark sleeps between asks once it has
    /// polled for [`POLL_FOR`]: how long, at most, a gate reached then
    /// stays closed (a stream that far behind other work holds nobody at
    /// its gate yet).
    pub(crate) const ARRIVE_SLEEP: Duration = Duration::from_micros(50);
    /// How long a [`ClockPlacer`](crate::ClockPlacer) waits for the device
    /// to write one anchor stamp before it gives the anchor up: a queue
    /// that far behind other work gives a bracket worth nothing.
    pub(crate) const STAMP_GIVE_UP: Duration = Duration::from_secs(10);

    /// The first sleep between asks while a released anchor stream drains;
    /// it doubles from there up to [`DRAIN_SLEEP_UP_TO`].
    pub(crate) const DRAIN_FIRST_SLEEP: Duration = Duration::from_micros(50);
    /// The longest sleep between asks while a released anchor stream
    /// drains: a release waiting behind a long kernel costs no core, and
    /// the process's exit waits no longer than this for it to leave.
    pub(crate) const DRAIN_SLEEP_UP_TO: Duration = Duration::from_millis(1);

    /// The first pause before a released anchor stream that no event could
    /// be made to drain is asked again; it grows fourfold up to
    /// [`NO_EVENT_LAST_PAUSE`]: about a third of a second in all, for a
    /// driver out of events to free one, before the stream is left to the
    /// process rather than destroyed undrained.
    pub(crate) const NO_EVENT_FIRST_PAUSE: Duration = Duration::from_millis(1);
    /// The longest of those pauses.
    pub(crate) const NO_EVENT_LAST_PAUSE: Duration = Duration::from_millis(256);

    /// The first delay before a failed calibration is tried again; it
    /// doubles from there up to `anchor_max_age`, within
    /// [`LAST_RETRY`]: a failing driver is not asked again at every
    /// `start`.
    pub(crate) const FIRST_RETRY: Duration = Duration::from_millis(1);
    /// The longest delay before a failed calibration is tried again,
    /// whatever `anchor_max_age` says: a driver that recovers is used
    /// again within the minute.
    pub(crate) const LAST_RETRY: Duration = Duration::from_secs(60);
}

/// The drift fit's, run on the calibrator thread for each anchor
/// ([`crate::anchoring::drift`]): until the rate is known better than
/// [`PRIOR`](drift::PRIOR), anchors are refreshed often enough that the
/// drift they could hide stays under [`TARGET`](drift::TARGET).
pub(crate) mod drift {
    use super::Duration;

    /// The placement error drift is allowed to add between refreshes.
    pub(crate) const TARGET: Duration = Duration::from_micros(1);
    /// The rate uncertainty assumed before any is measured: a crystal's
    /// ±100 ppm, doubled, so that a device at the edge of its
    /// specification is still inside the bound.
    pub(crate) const PRIOR: f64 = 2e-4;
    /// Shortest refresh period, so a profiler never spends its time
    /// anchoring.
    pub(crate) const MIN_AGE: Duration = Duration::from_millis(5);
    /// Longest refresh period the fit asks for, however well it knows the
    /// rate; `anchor_max_age` bounds it further.
    pub(crate) const MAX_AGE: Duration = Duration::from_secs(3600);
    /// Anchors further apart than this start a new chain: an `f32` reading
    /// of the gap would lose more than the fit can gain.
    pub(crate) const MAX_GAP: Duration = Duration::from_secs(10);
    /// Anchors kept for the fit.
    pub(crate) const KEEP: usize = 32;
    /// Added to every half-width before weighting: a 10 ns bracket is not a
    /// hundred times better than a 100 ns one, as the clock reads
    /// themselves take about that long.
    pub(crate) const WEIGHT_FLOOR_NS: f64 = 100.0;
}

/// The process's exit ([`crate::process::stop_driver_calls`]). How long
/// the exit waits in all is the caller's: `device-events-cuda`, `-hip` and
/// `-opencl` pass their own bound from their exit handlers.
pub(crate) mod exit {
    use super::Duration;

    /// How long the exit sleeps between looks at whether the library's
    /// threads have left the driver. They leave between their own asks,
    /// at most [`REACH_SLEEP_UP_TO`](super::calibrator::REACH_SLEEP_UP_TO)
    /// or [`DRAIN_SLEEP_UP_TO`](super::calibrator::DRAIN_SLEEP_UP_TO)
    /// apart.
    pub(crate) const STOP_POLL: Duration = Duration::from_micros(200);
}
