//! The behaviour every device-events backend must show, written once.
//!
//! A backend's test suite builds a [`Harness`] (its [`Workload`], its timer
//! resolution, its capture calls) and expands [`conformance_suite!`], which
//! makes each check here a named test of that suite. The same suite runs on
//! the real driver and on the software driver.
//!
//! No check trusts the profiler it is checking. Durations are compared with
//! truth obtained without it:
//! - on the software driver, the driver's own ground-truth stamps of the
//!   window's two events: the profiler's reading must match their distance
//!   within the driver's resolution plus 1 µs (the `f32` millisecond
//!   reading and the rate correction), and the work is known exactly from
//!   the bandwidth the harness sets;
//! - on a real driver, work the device timed itself: a kernel that stamps
//!   its own start and end ([`TimedWork`], CUDA's spin kernel), or else
//!   calibrated memsets each timed by a raw event pair of the backend's own
//!   calls (never a profiler window).
//!
//! Every bound is a promise load cannot break: a window holds the work
//! inside it (its duration is at least the work's own, less the driver's
//! resolution), and lies inside the host time around it. Nothing is
//! compared with a tolerance on a calibrated speed, so a device of any
//! speed, on a machine under any load, passes. A check that must ask
//! before the device passes a point holds the stream behind its anchor
//! gate ([`hold::Hold`]) while the host stalls on purpose, rather than race
//! a duration of work.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

pub mod allocations;
pub mod anchoring;
pub mod chain;
pub mod contract;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod fork;
#[cfg(feature = "hip")]
pub mod hip;
pub mod hold;
pub mod lanes;
pub mod noting;
pub mod soft;
pub mod start;
pub mod sweep;
pub mod timed;

pub use chain::{
    a_chain_of_windows_adds_up_to_its_span, a_failed_boundary_fails_only_the_windows_it_bounds,
};

use std::sync::mpsc;
use std::time::{Duration, Instant};

pub use timed::TimedWork;

use device_events_core::{
    AnchorConfig, Backend, CaptureStatus, DriverError, ErrorKind, EventFence, EventProfiler,
    OwnedStream, PlacedWindow, Placement, ProfilerConfig,
};

/// Device work a backend's tests can queue: a memset of a sized buffer works
/// on CUDA, HIP and the software driver.
pub trait Workload<A: Backend> {
    /// Queue an operation touching `bytes` bytes on `stream`.
    ///
    /// # Errors
    ///
    /// The driver's error.
    fn enqueue_bytes(&self, stream: A::Stream, bytes: usize) -> Result<(), DriverError>;
    /// The largest single operation.
    fn max_bytes(&self) -> usize;
}

/// The backend calls the suite needs beyond [`EventApi`](device_events_core::EventApi).
pub struct Capture<A: Backend> {
    /// Begin capturing a graph on the stream.
    pub begin: fn(A::Stream) -> Result<(), DriverError>,
    /// End the capture and release the graph.
    pub end: fn(A::Stream) -> Result<(), DriverError>,
    /// The backend's capture-status query.
    pub status: fn(A::Stream) -> Result<CaptureStatus, DriverError>,
    /// Make the calling thread's current context (device) the suite's.
    pub bind_thread: fn(),
}

/// What a backend's suite runs against.
pub struct Harness<A: Backend> {
    work: Source<A>,
    /// The driver's elapsed-time resolution.
    pub resolution: Duration,
    /// Where the driver's own timestamps can be read, the truth duration
    /// checks compare with.
    truth: Option<Truth>,
    /// Whether work runs exactly as long as asked (the software driver's).
    work_is_exact: bool,
    /// The backend's capture calls; `None` for an API without graph
    /// capture (OpenCL), whose suite leaves the capture checks out.
    pub capture: Option<Capture<A>>,
    /// Live events as the driver counts them, where it can (the software
    /// driver); checked for leaks.
    pub live_events: Option<fn() -> u64>,
}

/// Where the harness's work comes from.
enum Source<A: Backend> {
    /// Memsets at a rate set (software driver) or measured here.
    Memset {
        workload: Box<dyn Workload<A>>,
        bytes_per_second: f64,
    },
    /// Work the device times itself.
    Timed(Box<dyn TimedWork<A>>),
}

/// Work the harness queued, and how its length is known: exactly (the
/// software driver's memsets), by the driver's stamps of the window around
/// it (the truth), or by the device itself (a raw event pair around it, or
/// the work's own stamps).
pub struct Work<A: Backend> {
    asked: Duration,
    known: Known<A>,
}

enum Known<A: Backend> {
    /// As asked, or by the truth of the window's events.
    Asked,
    /// By the stamps of [`TimedWork`] ticket.
    Stamped(usize),
    /// By a raw event pair around it.
    Paired(A::Event, A::Event),
}

impl<A: Backend> Drop for Work<A> {
    fn drop(&mut self) {
        if let Known::Paired(start, end) = &mut self.known {
            // Legal while in flight: the driver frees them once reached.
            let _ = A::event_destroy(start);
            let _ = A::event_destroy(end);
        }
    }
}

/// Streams a check owns, released when it ends.
pub(crate) struct Streams<A: Backend>(Vec<OwnedStream<A>>);

impl<A: Backend> Streams<A> {
    pub(crate) fn new(n: usize) -> Self {
        Self(
            (0..n)
                .map(|_| OwnedStream::new().expect("create a stream"))
                .collect(),
        )
    }

    pub(crate) fn get(&self, i: usize) -> A::Stream {
        self.0[i].get()
    }
}

impl<A: Backend> Harness<A> {
    /// A harness of memsets, whose speed is set on the software driver and
    /// measured here with events on a real one.
    ///
    /// # Panics
    ///
    /// When the driver cannot run the calibration: the suite cannot run.
    pub fn new(
        workload: Box<dyn Workload<A>>,
        resolution: Duration,
        capture: Option<Capture<A>>,
        live_events: Option<fn() -> u64>,
    ) -> Self {
        let source = Source::Memset {
            workload,
            bytes_per_second: 1.0,
        };
        let mut harness = Self::with_source(source, resolution, capture, live_events);
        let soft = live_events.and_then(|_| soft::SoftDriver::get().ok());
        let speed = match soft {
            Some(driver) => {
                // Exact by construction: the driver runs memsets at this rate.
                driver.set_bandwidth(SOFT_BANDWIDTH);
                SOFT_BANDWIDTH
            }
            None => harness.measure_speed(),
        };
        if let Source::Memset {
            bytes_per_second, ..
        } = &mut harness.work
        {
            *bytes_per_second = speed;
        }
        harness
    }

    /// A harness of work the device times itself: nothing to calibrate, at
    /// any device speed.
    pub fn timed(
        work: Box<dyn TimedWork<A>>,
        resolution: Duration,
        capture: Option<Capture<A>>,
        live_events: Option<fn() -> u64>,
    ) -> Self {
        Self::with_source(Source::Timed(work), resolution, capture, live_events)
    }

    fn with_source(
        work: Source<A>,
        resolution: Duration,
        capture: Option<Capture<A>>,
        live_events: Option<fn() -> u64>,
    ) -> Self {
        // The software driver's presence is what `live_events` says.
        let soft = live_events.and_then(|_| soft::SoftDriver::get().ok());
        Self {
            work,
            resolution,
            capture,
            live_events,
            truth: soft.map(|_| Truth {
                last_event: soft_last_event,
                event_ns: soft_event_ns,
            }),
            work_is_exact: soft.is_some(),
        }
    }

    /// Whether the harness's work is the device's own timed work.
    pub fn is_timed(&self) -> bool {
        matches!(self.work, Source::Timed(_))
    }

    /// Device time between two events recorded back to back around `work`
    /// on `stream`, through the backend's raw calls: no profiler involved.
    fn raw_pair(&self, stream: A::Stream, work: impl FnOnce()) -> Duration {
        let mut start = A::event_create().expect("an event");
        let mut end = A::event_create().expect("an event");
        A::event_record(&start, stream).expect("record");
        work();
        A::event_record(&end, stream).expect("record");
        A::event_wait(&end).expect("wait");
        let elapsed = A::event_elapsed(&start, &end).expect("elapsed");
        A::event_destroy(&mut start).expect("release");
        A::event_destroy(&mut end).expect("release");
        elapsed
    }

    /// Bytes per second the memsets run at, timed with raw event pairs:
    /// the size is grown until a run takes 20 ms (doubled while runs are
    /// too short to scale from, then scaled), and the fastest of three
    /// runs is kept, since noise on a shared machine only ever slows a
    /// run. Any device speed: bounded by time and by the number of memsets
    /// a run queues, not by a size.
    fn measure_speed(&self) -> f64 {
        const TARGET: Duration = Duration::from_millis(20);
        let Source::Memset { workload, .. } = &self.work else {
            return 1.0;
        };
        let max = workload.max_bytes().max(1);
        let streams = Streams::<A>::new(1);
        let s = streams.get(0);
        let time = |bytes: usize| self.raw_pair(s, || self.enqueue_raw(s, bytes));
        // Bounded: a driver whose elapsed times do not follow the work
        // (one that stamps nothing, or placeholders) fails here, never
        // growing its work for hours.
        let started = std::time::Instant::now();
        let mut bytes = max.clamp(1, 1 << 20);
        loop {
            let took = time(bytes);
            if took >= TARGET {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10) && bytes / max < 1 << 16,
                "the driver measured {took:?} for {bytes} bytes of work, after {:?} \
                 of growing it: its elapsed times do not follow the work",
                started.elapsed()
            );
            // A millisecond is far above a launch's jitter: scaled from
            // there straight past the target, doubled below it.
            bytes = if took >= Duration::from_millis(1) {
                let scaled = bytes as f64 * 1.25 * TARGET.as_secs_f64() / took.as_secs_f64();
                (scaled as usize).max(bytes + 1)
            } else {
                bytes.saturating_mul(2)
            };
        }
        let fastest = (0..3).map(|_| time(bytes)).min().unwrap_or(Duration::MAX);
        bytes as f64 / fastest.as_secs_f64().max(1e-9)
    }

    /// Compare durations with the driver's own timestamps, read through
    /// `truth`, rather than with calibrated work: for a device whose work
    /// runs at no steady speed (a CPU device such as PoCL's).
    #[must_use]
    pub fn with_truth(mut self, truth: Truth) -> Self {
        self.truth = Some(truth);
        self
    }

    /// Whether the driver's own stamps can be read (the software driver's).
    pub fn knows_truth(&self) -> bool {
        self.truth.is_some()
    }

    /// The event the driver recorded last, where the truth can be read:
    /// taken right after a `start` or `stop`, the window's end it recorded.
    pub fn last_event(&self) -> Option<usize> {
        self.truth.as_ref().map(|truth| (truth.last_event)())
    }

    /// `measured`, a window around `work` whose two ends were `events`,
    /// read within `host` of the host's time from before its start to
    /// after it was done. Every window lies inside that host time. Against
    /// the truth: the driver's stamps of the two events on the software
    /// driver (and the work ran as long as asked); on a real driver, the
    /// window is at least as long as the work inside it, as the device
    /// timed that work.
    pub fn assert_window(
        &self,
        measured: Duration,
        work: &[&Work<A>],
        events: (Option<usize>, Option<usize>),
        host: Duration,
    ) {
        // Device time between two events the host queued and then saw
        // reached; a millisecond per second for the clocks' rates.
        let inside = host + self.resolution + host / 1000;
        assert!(
            measured <= inside,
            "measured {measured:?}, longer than the {host:?} the host saw around it"
        );
        let asked: Duration = work.iter().map(|w| w.asked).sum();
        let (Some(truth), (Some(start), Some(end))) = (&self.truth, events) else {
            let ran: Duration = work.iter().map(|w| self.ran(w)).sum();
            // Each of the window's two ends and each timed piece of work
            // may be off by the driver's resolution, and the device's two
            // timers (its events', its kernels') by a microsecond and a
            // thousandth of their rates.
            let pieces = u32::try_from(work.len() + 2).unwrap_or(u32::MAX);
            let allowed = (self.resolution + Duration::from_micros(1)) * pieces + ran / 1000;
            assert!(
                measured + allowed >= ran,
                "measured {measured:?} around work the device timed at {ran:?} \
                 ({asked:?} asked; {allowed:?} allowed)"
            );
            return;
        };
        let truth = |event| (truth.event_ns)(event).expect("a reached event's truth");
        let span = Duration::from_nanos(truth(end).saturating_sub(truth(start)));
        let off = measured.abs_diff(span);
        assert!(
            off <= self.resolution + Duration::from_micros(1),
            "measured {measured:?}; the driver's stamps are {span:?} apart ({off:?} off)"
        );
        // The work itself ran at least as long as the rate the harness
        // set makes it: truth against truth, no profiler.
        assert!(
            !self.work_is_exact || span + self.resolution >= asked,
            "the driver ran {asked:?} of work in {span:?}"
        );
    }

    /// How long `work` ran by the device's own account, once it is done.
    fn ran(&self, work: &Work<A>) -> Duration {
        match (&work.known, &self.work) {
            (Known::Asked, _) => work.asked,
            (Known::Stamped(ticket), Source::Timed(timed)) => timed
                .span(*ticket)
                .expect("the work's own stamps, once it is done"),
            (Known::Stamped(_), Source::Memset { .. }) => {
                unreachable!("stamped work comes from timed work")
            }
            (Known::Paired(start, end), _) => {
                A::event_wait(end).expect("wait for the work's end");
                A::event_elapsed(start, end).expect("the work's elapsed time")
            }
        }
    }

    fn enqueue_raw(&self, stream: A::Stream, mut bytes: usize) {
        let Source::Memset { workload, .. } = &self.work else {
            unreachable!("memsets only in a memset harness")
        };
        let max = workload.max_bytes().max(1);
        while bytes > 0 {
            let chunk = bytes.min(max);
            workload.enqueue_bytes(stream, chunk).expect("enqueue work");
            bytes -= chunk;
        }
    }

    /// Queue work of about `duration` on `stream` (at least `duration`
    /// where the device times it). What it returns tells a window check
    /// how long the work really ran.
    pub fn enqueue(&self, stream: A::Stream, duration: Duration) -> Work<A> {
        let known = match &self.work {
            Source::Timed(timed) => {
                Known::Stamped(timed.enqueue_for(stream, duration).expect("enqueue work"))
            }
            Source::Memset {
                bytes_per_second, ..
            } => {
                let bytes = ((bytes_per_second * duration.as_secs_f64()) as usize).max(1);
                if self.truth.is_some() {
                    self.enqueue_raw(stream, bytes);
                    Known::Asked
                } else {
                    let start = A::event_create().expect("an event");
                    let end = A::event_create().expect("an event");
                    A::event_record(&start, stream).expect("record");
                    self.enqueue_raw(stream, bytes);
                    A::event_record(&end, stream).expect("record");
                    Known::Paired(start, end)
                }
            }
        };
        Work {
            asked: duration,
            known,
        }
    }
}

/// Where a driver's own timestamps can be read, outside the profiler: the
/// event it recorded last, and the device time an event was reached at, in
/// nanoseconds on one clock.
#[derive(Clone, Copy, Debug)]
pub struct Truth {
    /// The event recorded most recently, as a number `event_ns` takes.
    pub last_event: fn() -> usize,
    /// When the device reached the event, if it has.
    pub event_ns: fn(usize) -> Option<u64>,
}

fn soft_last_event() -> usize {
    soft::SoftDriver::get().map_or(0, soft::SoftDriver::last_recorded_event)
}

fn soft_event_ns(event: usize) -> Option<u64> {
    soft::SoftDriver::get().ok()?.event_truth_ns(event)
}

/// The rate the harness sets on the software driver: memsets run at exactly
/// this many bytes per second.
const SOFT_BANDWIDTH: f64 = 10e9;

/// A [`Harness`] on the driver under test, holding the software driver (when
/// it is the one) for the test alone.
pub struct Suite<A: Backend> {
    harness: Harness<A>,
    _soft: Option<soft::Exclusive<'static>>,
}

impl<A: Backend> Suite<A> {
    /// Take the software driver unless the real one is under test
    /// ([`soft::SoftDriver::unless_real`]), run `prepare` (bind a context,
    /// say), then build the harness with `make`, which is told whether the
    /// software driver's live-event count can be checked.
    pub fn new(
        prepare: impl FnOnce(),
        make: impl FnOnce(Option<fn() -> u64>) -> Harness<A>,
    ) -> Self {
        let soft = soft::SoftDriver::unless_real();
        prepare();
        let live = soft.is_some().then_some(soft::live_events as fn() -> u64);
        Self {
            harness: make(live),
            _soft: soft,
        }
    }
}

impl<A: Backend> std::ops::Deref for Suite<A> {
    type Target = Harness<A>;
    fn deref(&self) -> &Harness<A> {
        &self.harness
    }
}

fn resolve<A: Backend>(window: PlacedWindow<A>) -> Placement {
    pollster::block_on(window).expect("the window was read")
}

/// Time from `epoch` on the host clock, for comparing placements.
pub(crate) fn at(epoch: Instant, placed: &Placement) -> (Duration, Duration) {
    (
        placed.start.saturating_duration_since(epoch),
        placed.end.saturating_duration_since(epoch),
    )
}

/// A fence orders two streams: the waiting stream's work starts after the
/// fenced work ends, as measured by events.
pub fn fence_orders_two_streams<A: Backend>(h: &Harness<A>) {
    let streams = Streams::<A>::new(2);
    let (a, b) = (streams.get(0), streams.get(1));
    let mut profiler = EventProfiler::<A>::new();
    let fenced = profiler.start(a);
    h.enqueue(a, Duration::from_millis(10));
    let fenced = profiler.stop(a, fenced).unwrap();
    let fence = EventFence::<A>::new(a);
    fence.wait_async(b).unwrap();
    let waiting = profiler.start(b);
    h.enqueue(b, Duration::from_millis(2));
    let waiting = profiler.stop(b, waiting).unwrap();

    let epoch = Instant::now() - Duration::from_secs(3600);
    let (_, fenced_end) = at(epoch, &resolve(fenced));
    let (waiting_start, _) = at(epoch, &resolve(waiting));
    assert!(
        waiting_start + h.resolution >= fenced_end,
        "the waiting stream started {:?} before the fenced work ended",
        fenced_end - waiting_start
    );
}

/// `wait_sync` returns only once the fenced work is done.
pub fn wait_sync_returns_after_the_fenced_work<A: Backend>(h: &Harness<A>) {
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    let mut profiler = EventProfiler::<A>::new();
    let work = profiler.start(s);
    h.enqueue(s, Duration::from_millis(10));
    let work = profiler.stop(s, work).unwrap();
    let fence = EventFence::<A>::new(s);
    fence.wait_sync().unwrap();
    let returned = Instant::now();
    let ticks = resolve(work);
    let bound = profiler.anchor_uncertainty().unwrap() + h.resolution;
    let epoch = returned - Duration::from_secs(3600);
    let (_, end) = at(epoch, &ticks);
    assert!(
        end <= returned.duration_since(epoch) + bound,
        "wait_sync returned {:?} before the work ended",
        end - returned.duration_since(epoch)
    );
}

/// Dropping a fence that was never waited on, while its work is in flight,
/// is safe: the stream finishes and nothing fails.
pub fn dropping_an_unwaited_fence_in_flight_is_safe<A: Backend>(h: &Harness<A>) {
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    let before = h.live_events.map(|live| {
        device_events_core::process::release_idle_events();
        live()
    });
    h.enqueue(s, Duration::from_millis(20));
    drop(EventFence::<A>::new(s));
    A::stream_synchronize(s).unwrap();
    if let (Some(live), Some(before)) = (h.live_events, before) {
        device_events_core::process::release_idle_events();
        assert_eq!(live(), before, "the fence's event was released");
    }
}

/// A window around work measures at least the work, as the device timed
/// it (the driver's stamps exactly, on the software driver), and at most
/// the host time around it.
pub fn window_measures_the_work_inside_it<A: Backend>(h: &Harness<A>) {
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    let mut profiler = EventProfiler::<A>::new();
    for ms in [2, 10, 30] {
        let work = Duration::from_millis(ms);
        let before = Instant::now();
        let token = profiler.start(s);
        let start = h.last_event();
        let queued = h.enqueue(s, work);
        let timing = profiler.stop(s, token).unwrap();
        let end = h.last_event();
        A::stream_synchronize(s).unwrap();
        let host = before.elapsed();
        let ticks = resolve(timing);
        h.assert_window(ticks.duration, &[&queued], (start, end), host);
        // Device time fits in the host time around it.
        assert!(
            ticks.duration <= host + h.resolution,
            "{ticks:?} in {host:?}"
        );
    }
}

/// Nested windows: each inner window lies inside its outer one.
pub fn nested_windows_lie_inside_their_outer_window<A: Backend>(h: &Harness<A>) {
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    let mut profiler = EventProfiler::<A>::new();
    let began = Instant::now();
    let outer = profiler.start(s);
    let outer_start = h.last_event();
    let before = h.enqueue(s, Duration::from_millis(3));
    let inner = profiler.start(s);
    let inner_start = h.last_event();
    let inside = h.enqueue(s, Duration::from_millis(5));
    let inner = profiler.stop(s, inner).unwrap();
    let inner_end = h.last_event();
    let after = h.enqueue(s, Duration::from_millis(3));
    let outer = profiler.stop(s, outer).unwrap();
    let outer_end = h.last_event();

    let epoch = Instant::now() - Duration::from_secs(3600);
    let (outer, inner) = (resolve(outer), resolve(inner));
    let host = began.elapsed();
    let ((os, oe), (is, ie)) = (at(epoch, &outer), at(epoch, &inner));
    let r = h.resolution;
    assert!(
        os <= is + r && ie <= oe + r,
        "inner {is:?}..{ie:?} outside outer {os:?}..{oe:?}"
    );
    h.assert_window(inner.duration, &[&inside], (inner_start, inner_end), host);
    h.assert_window(
        outer.duration,
        &[&before, &inside, &after],
        (outer_start, outer_end),
        host,
    );
}

/// Overlapping windows on one stream are each measured, in order.
pub fn overlapping_windows_are_consistent<A: Backend>(h: &Harness<A>) {
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    let mut profiler = EventProfiler::<A>::new();
    let began = Instant::now();
    let first = profiler.start(s);
    let first_start = h.last_event();
    let a = h.enqueue(s, Duration::from_millis(4));
    let second = profiler.start(s);
    let second_start = h.last_event();
    let b = h.enqueue(s, Duration::from_millis(4));
    let first = profiler.stop(s, first).unwrap();
    let first_end = h.last_event();
    let c = h.enqueue(s, Duration::from_millis(4));
    let second = profiler.stop(s, second).unwrap();
    let second_end = h.last_event();

    let epoch = Instant::now() - Duration::from_secs(3600);
    let (first, second) = (resolve(first), resolve(second));
    let host = began.elapsed();
    let ((fs, fe), (ss, se)) = (at(epoch, &first), at(epoch, &second));
    let r = h.resolution;
    assert!(
        fs <= ss + r && ss <= fe + r && fe <= se + r,
        "{fs:?}..{fe:?} vs {ss:?}..{se:?}"
    );
    h.assert_window(first.duration, &[&a, &b], (first_start, first_end), host);
    h.assert_window(second.duration, &[&b, &c], (second_start, second_end), host);
}

/// Each window's host-clock placement lies inside the host interval in which
/// its work could have run, widened by the window's own stated bound
/// ([`stop`](EventProfiler::stop)) and the driver's
/// resolution: the test of anchoring. The anchor's bound
/// ([`EventProfiler::anchor_uncertainty`]) is not a window's: it leaves out
/// the rate's error over the window's distance from its anchor, and it is
/// the newest anchor's, not the one the window was placed by.
pub fn placement_lies_inside_the_host_interval<A: Backend>(h: &Harness<A>) {
    let streams = Streams::<A>::new(2);
    let mut profiler = EventProfiler::<A>::new();
    for round in 0..6 {
        let s = streams.get(round % 2);
        let before = Instant::now();
        let token = profiler.start(s);
        h.enqueue(s, Duration::from_millis(2));
        let window = profiler.stop(s, token).unwrap();
        A::stream_synchronize(s).unwrap();
        let after = Instant::now();
        let placed = pollster::block_on(window.resolve()).expect("the window was read");
        let bound = placed.uncertainty + h.resolution;
        let epoch = before - Duration::from_secs(3600);
        let (start, end) = at(epoch, &placed);
        let (low, high) = (before.duration_since(epoch), after.duration_since(epoch));
        assert!(
            start + bound >= low && end <= high + bound,
            "window {start:?}..{end:?} outside host interval {low:?}..{high:?} (± {bound:?})"
        );
    }
}

/// Thousands of fences and windows in flight, resolved from several threads:
/// nothing lost, nothing leaked, no deadlock.
pub fn thousands_in_flight_resolve_from_several_threads<A: Backend>(h: &Harness<A>) {
    const EACH: usize = 2000;
    const THREADS: usize = 4;
    let streams = Streams::<A>::new(2);
    let before = h.live_events.map(|live| {
        device_events_core::process::release_idle_events();
        live()
    });
    let mut profiler = EventProfiler::<A>::new();
    let mut fences = Vec::with_capacity(EACH);
    let mut windows = Vec::with_capacity(EACH);
    for i in 0..EACH {
        let s = streams.get(i % 2);
        let token = profiler.start(s);
        if i % 500 == 0 {
            h.enqueue(s, Duration::from_micros(200));
        }
        windows.push(profiler.stop(s, token).unwrap());
        fences.push(EventFence::<A>::new(s));
    }
    let (done, results) = mpsc::channel();
    let mut workers = Vec::new();
    type Chunk<A> = (Vec<EventFence<A>>, Vec<PlacedWindow<A>>);
    let mut chunks: Vec<Chunk<A>> = (0..THREADS).map(|_| (Vec::new(), Vec::new())).collect();
    for (i, (fence, window)) in fences.into_iter().zip(windows).enumerate() {
        chunks[i % THREADS].0.push(fence);
        chunks[i % THREADS].1.push(window);
    }
    for (fences, windows) in chunks {
        let done = done.clone();
        workers.push(std::thread::spawn(move || {
            let waited = fences.iter().filter(|f| f.wait_sync().is_ok()).count();
            let read = windows
                .into_iter()
                .map(|w| pollster::block_on(w.resolve()))
                .filter(Option::is_some)
                .count();
            drop(fences);
            let _ = done.send((waited, read));
        }));
    }
    drop(done);
    let (mut waited, mut read) = (0, 0);
    for _ in 0..THREADS {
        let (w, r) = results
            .recv_timeout(Duration::from_secs(120))
            .expect("a worker finished within two minutes (no deadlock)");
        waited += w;
        read += r;
    }
    for worker in workers {
        worker.join().expect("worker did not panic");
    }
    assert_eq!(
        (waited, read),
        (EACH, EACH),
        "every fence waited and every window read"
    );
    drop(profiler);
    if let (Some(live), Some(before)) = (h.live_events, before) {
        device_events_core::process::release_idle_events();
        assert_eq!(live(), before, "every event released");
    }
}

/// Elapsed time on an event never recorded is refused, as invalid.
pub fn elapsed_on_an_unrecorded_event_is_refused<A: Backend>(_: &Harness<A>) {
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    let recorded = A::event_create().unwrap();
    let mut never = A::event_create().unwrap();
    A::event_record(&recorded, s).unwrap();
    A::event_wait(&recorded).unwrap();
    let err = A::event_elapsed(&recorded, &never).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidHandle, "{err}");
    assert_eq!(err.backend(), A::BACKEND);
    let mut recorded = recorded;
    A::event_destroy(&mut recorded).unwrap();
    A::event_destroy(&mut never).unwrap();
}

/// Elapsed time on an event not yet reached is "not ready", however long
/// the host took to ask: the device is held before the end event
/// ([`hold::Hold`]) while the host stalls, or, where it cannot be held,
/// the work is lengthened until the host asks in time.
pub fn elapsed_on_an_unreached_event_is_not_ready<A: Backend>(h: &Harness<A>) {
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    let mut start = A::event_create().unwrap();
    let mut end = A::event_create().unwrap();
    A::event_record(&start, s).unwrap();
    if let Some(hold) = hold::Hold::on::<A>(s) {
        A::event_record(&end, s).unwrap();
        std::thread::sleep(hold::HOST_STALL);
        let err = A::event_elapsed(&start, &end).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotReady, "{err}");
        assert!(
            hold.release(),
            "reading the elapsed time waited for the device"
        );
    } else {
        assert!(
            !h.work_is_exact,
            "the software driver's streams can be held"
        );
        hold::ahead_of_the_device(|work| {
            A::event_record(&start, s).unwrap();
            h.enqueue(s, work);
            A::event_record(&end, s).unwrap();
            match A::event_elapsed(&start, &end) {
                Err(err) => {
                    assert_eq!(err.kind(), ErrorKind::NotReady, "{err}");
                    true
                }
                // Read once both were reached: the host stalled past the work.
                Ok(_) => false,
            }
        });
    }
    A::event_wait(&end).unwrap();
    assert!(A::event_elapsed(&start, &end).is_ok());
    A::event_destroy(&mut start).unwrap();
    A::event_destroy(&mut end).unwrap();
}

/// On a capturing stream, records are graph nodes: the capture query says
/// so, a fence recorded there cannot be waited on, and the stream cannot be
/// synchronized; each error is of the capture class. The synchronize is
/// refused before the driver; the wait reaches it (CUDA), which refuses it
/// and invalidates the capture, as it would the caller's own wait.
pub fn a_capturing_stream_gives_capture_errors<A: Backend>(h: &Harness<A>) {
    let capture = h.capture.as_ref().expect("the backend has graph capture");
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    assert_eq!((capture.status)(s).unwrap(), CaptureStatus::None);
    (capture.begin)(s).unwrap();
    assert_eq!((capture.status)(s).unwrap(), CaptureStatus::Active);
    let fence = EventFence::<A>::new(s);
    let waited = fence.wait_sync().unwrap_err();
    let synced = A::stream_synchronize(s).unwrap_err();
    let ended = (capture.end)(s);
    assert_eq!(waited.kind(), ErrorKind::Capture, "{waited}");
    assert_eq!(synced.kind(), ErrorKind::Capture, "{synced}");
    assert_eq!(synced.status(), None, "refused before the driver: {synced}");
    // A wait the driver saw invalidated the capture; one refused before it
    // (HIP before 7.2, whose runtime ties the event to its stream) did not.
    match (waited.status(), ended) {
        (Some(_), Err(err)) => assert_eq!(err.kind(), ErrorKind::Capture),
        (None, Ok(())) => {}
        (status, ended) => panic!("wait status {status:?}, end {ended:?}"),
    }
    assert_eq!((capture.status)(s).unwrap(), CaptureStatus::None);
    drop(fence);
    EventFence::<A>::new(s).wait_sync().unwrap();
}

/// Around a capture: a fence recorded in it forks the stream that waits on
/// it into the capture (as the CUDA and HIP documentation describe
/// fork/join), so ending the capture without joining back fails with a
/// capture error; a window opened and closed inside it resolves to `None`,
/// never to a duration read from a graph node; nothing panics.
pub fn a_fence_out_of_a_capture_forks_and_its_windows_read_none<A: Backend>(h: &Harness<A>) {
    let capture = h.capture.as_ref().expect("the backend has graph capture");
    let streams = Streams::<A>::new(2);
    let (a, b) = (streams.get(0), streams.get(1));
    let mut profiler = EventProfiler::<A>::new();
    let outside = profiler.start(a);
    (capture.begin)(a).unwrap();
    let inside = profiler.start(a);
    h.enqueue(a, Duration::from_millis(1));
    let inside = profiler.stop(a, inside).unwrap();
    let across = profiler.stop(a, outside).unwrap();
    let fence = EventFence::<A>::new(a);
    fence.wait_async(b).unwrap();
    assert_eq!((capture.status)(b).unwrap(), CaptureStatus::Active);

    let ended = (capture.end)(a).unwrap_err();
    assert_eq!(ended.kind(), ErrorKind::Capture, "{ended}");
    assert_eq!((capture.status)(a).unwrap(), CaptureStatus::None);
    assert_eq!((capture.status)(b).unwrap(), CaptureStatus::None);
    assert!(pollster::block_on(inside.resolve()).is_none(), "inside");
    assert!(pollster::block_on(across.resolve()).is_none(), "across");
    // CUDA refuses it: the event's last record is a graph node. ROCm's
    // runtime answers for the event as it was before the capture.
    if let Err(waited) = fence.wait_sync() {
        assert_eq!(waited.kind(), ErrorKind::Capture, "{waited}");
    }
}

/// A fence says it is complete only once the device passed it, and asking
/// never waits: [`EventFence::is_complete`] where the backend can query.
/// The device is held before the fence ([`hold::Hold`]) while the host
/// stalls, and asked before it is let go: an ask that waited for the
/// device would not return until the hold's watchdog let it go. Where the
/// device cannot be held, the work before the fence is lengthened until
/// the host asks in time.
pub fn a_fence_is_complete_only_once_the_device_passes_it<A: Backend>(h: &Harness<A>) {
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    if let Some(hold) = hold::Hold::on::<A>(s) {
        h.enqueue(s, Duration::from_millis(1));
        let fence = EventFence::<A>::new(s);
        std::thread::sleep(hold::HOST_STALL);
        assert!(
            !fence.is_complete().unwrap(),
            "the device is held before the fence"
        );
        assert!(hold.release(), "asking waited for the device");
        fence.wait_sync().unwrap();
        assert!(fence.is_complete().unwrap());
        return;
    }
    assert!(
        !h.work_is_exact,
        "the software driver's streams can be held"
    );
    hold::ahead_of_the_device(|work| {
        h.enqueue(s, work);
        let fence = EventFence::<A>::new(s);
        let ahead = !fence.is_complete().unwrap();
        fence.wait_sync().unwrap();
        assert!(fence.is_complete().unwrap());
        ahead
    });
}

/// A window is read on a thread other than the one that opened it.
pub fn windows_resolve_on_other_threads<A: Backend>(h: &Harness<A>) {
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    let mut profiler = EventProfiler::<A>::new();
    let began = Instant::now();
    let token = profiler.start(s);
    let start = h.last_event();
    let work = h.enqueue(s, Duration::from_millis(2));
    let timing = profiler.stop(s, token).unwrap();
    let end = h.last_event();
    let ticks = std::thread::spawn(move || pollster::block_on(timing.resolve()))
        .join()
        .unwrap();
    h.assert_window(
        ticks.expect("read on another thread").duration,
        &[&work],
        (start, end),
        began.elapsed(),
    );
}

/// A window read by `try_resolve` is spent: awaited afterwards it is ready
/// with `None` at once, whether it was read in place or handed to the
/// resolver thread first (a future that waited would hang its task).
pub fn a_window_read_by_try_resolve_is_then_ready_with_none<A: Backend>(h: &Harness<A>) {
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    let mut profiler = EventProfiler::<A>::new();
    // The first window also waits for the anchor; the second is read in
    // place, the device past it.
    for handed in [true, false] {
        // Held ahead of the device however long the host takes; where the
        // stream cannot be held, 30 ms of work ahead of it.
        let hold = handed.then(|| hold::Hold::on::<A>(s)).flatten();
        let token = profiler.start(s);
        if handed && hold.is_none() {
            h.enqueue(s, Duration::from_millis(30));
        }
        let mut window = profiler.stop(s, token).unwrap();
        if let Some(hold) = hold {
            assert!(window.try_resolve().is_none(), "held ahead of the device");
            assert!(hold.release(), "nothing waited for the held work");
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let read = loop {
            if let Some(read) = window.try_resolve() {
                break read;
            }
            assert!(Instant::now() < deadline, "not read in 10 s");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert!(read.is_some(), "read (handed over first: {handed})");
        let again = within(Duration::from_secs(5), move || {
            pollster::block_on(window.resolve())
        });
        assert_eq!(
            again,
            Some(None),
            "awaited once spent (handed over first: {handed})"
        );
    }
}

/// A window handed to the resolver thread costs the submitting thread no
/// allocation once warm: its shared state is reused, and the driver's
/// not-ready answer at its first ask is named without a copy.
/// `allocations` counts this thread's (the test binary's allocator); the
/// hold that keeps each window ahead of the device is not counted.
pub fn a_window_handed_to_the_resolver_allocates_nothing<A: Backend>(allocations: fn() -> u64) {
    const WINDOWS: u64 = 50;
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    let mut profiler = EventProfiler::<A>::new();
    let token = profiler.start(s);
    assert!(resolve(profiler.stop(s, token).unwrap()).duration >= Duration::ZERO);
    assert!(device_events_core::process::wait_for_calibrations(
        Duration::from_secs(10)
    ));
    let handed = |profiler: &mut EventProfiler<A>| -> u64 {
        let hold = hold::Hold::on::<A>(s).expect("the stream held behind its gate");
        let before = allocations();
        let token = profiler.start(s);
        let mut window = profiler.stop(s, token).unwrap();
        assert!(window.try_resolve().is_none(), "held ahead of the device");
        let mut made = allocations() - before;
        assert!(hold.release(), "nothing waited for the held work");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let before = allocations();
            let read = window.try_resolve();
            made += allocations() - before;
            if let Some(read) = read {
                assert!(read.is_some(), "read once released");
                return made;
            }
            assert!(Instant::now() < deadline, "not read in 10 s");
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    for _ in 0..WINDOWS {
        handed(&mut profiler);
    }
    let made: u64 = (0..WINDOWS).map(|_| handed(&mut profiler)).sum();
    assert_eq!(
        made, 0,
        "{made} allocations in {WINDOWS} windows handed over"
    );
}

/// On the software driver: a fence, pooled fences, a profiler with a window
/// abandoned and one read leave no event or stream behind and release
/// nothing twice.
pub fn fences_and_profilers_leak_nothing<A: Backend>(driver: &soft::SoftDriver) {
    let before = driver.counts();
    {
        let streams = Streams::<A>::new(1);
        let s = streams.get(0);
        let pool = device_events_core::FencePool::<A>::new();
        let mut profiler = EventProfiler::<A>::new();
        let _abandoned = profiler.start(s);
        let read = profiler.start(s);
        let fence = EventFence::<A>::new(s);
        pool.fence(s).wait_sync().unwrap();
        let read = profiler.stop(s, read).unwrap();
        drop(fence);
        pollster::block_on(read.resolve()).unwrap();
    }
    let after = driver.counts();
    assert_eq!(
        (after.events, after.streams, after.misuses),
        (before.events, before.streams, before.misuses)
    );
}

/// On the software driver: a fence, a window and a capture query reach only
/// the driver functions the backend documents.
pub fn only_documented_functions_are_called<A: Backend>(
    driver: &soft::SoftDriver,
    documented: &[&str],
    capture_status: fn(A::Stream) -> Result<CaptureStatus, DriverError>,
) {
    driver.reset();
    {
        let streams = Streams::<A>::new(1);
        let s = streams.get(0);
        let mut profiler = EventProfiler::<A>::new();
        let token = profiler.start(s);
        let fence = EventFence::<A>::new(s);
        fence.wait_async(s).unwrap();
        let timing = profiler.stop(s, token).unwrap();
        pollster::block_on(timing.resolve()).unwrap();
        fence.wait_sync().unwrap();
        capture_status(s).unwrap();
        A::stream_synchronize(s).unwrap();
    }
    let called = driver.called();
    assert!(called.len() >= 8, "{called:?}");
    for name in &called {
        assert!(
            documented.contains(&name.as_str()),
            "{name} is not in the crate docs' list"
        );
    }
}

/// `f` on a thread of its own, given `limit`: `None` when it has not
/// returned by then (it is left running), so that a call that could hang
/// fails its test instead of stalling the run.
pub fn within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(f());
    });
    result.recv_timeout(limit).ok()
}

/// Run the test `child` of the current test binary in a process whose
/// loaders find no driver (`hide` lists the variables to remove, `set` the
/// ones that point a loader elsewhere), and assert that it passed: how a
/// missing driver is tested in a process that has one loaded.
pub fn run_without_driver(child: &str, hide: &[&str], set: &[(&str, &str)]) {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", child, "--ignored", "--test-threads=1"])
        .env(start::AS_STARTED_VAR, "1");
    for var in hide {
        cmd.env_remove(var);
    }
    cmd.envs(set.iter().copied());
    let output = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && text.contains("1 passed"),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A graph captured in GLOBAL mode (the drivers' default, and CubeCL's)
/// on this thread, while other threads' windows resolve, their anchors
/// refresh and their fences are asked whether complete: each capture ends
/// as it began. A real driver refuses a query from another GLOBAL-mode
/// thread during such a capture and invalidates it; the library's own
/// threads are relaxed, and its queries on a caller's thread run relaxed.
pub fn a_global_capture_ends_while_the_library_works_elsewhere<A: Backend>(h: &Harness<A>) {
    const WORKERS: usize = 4;
    const CAPTURES: usize = 50;
    let capture = h.capture.as_ref().expect("the backend has graph capture");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let worked = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| {
                (capture.bind_thread)();
                let streams = Streams::<A>::new(1);
                let s = streams.get(0);
                // Stale within a millisecond: anchors refresh throughout.
                let mut profiler = EventProfiler::<A>::with_config(ProfilerConfig {
                    anchor: AnchorConfig {
                        anchor_max_age: Duration::from_millis(1),
                        ..AnchorConfig::default()
                    },
                    ..ProfilerConfig::default()
                });
                let pool = device_events_core::FencePool::<A>::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let token = profiler.start(s);
                    let window = profiler.stop(s, token).unwrap();
                    let fence = pool.fence(s);
                    while !fence.is_complete().unwrap() {
                        std::thread::yield_now();
                    }
                    pollster::block_on(window.resolve()).expect("the window was read");
                    worked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
        let streams = Streams::<A>::new(1);
        let c = streams.get(0);
        for round in 0..CAPTURES {
            (capture.begin)(c).unwrap();
            std::thread::sleep(Duration::from_micros(500));
            if let Err(err) = (capture.end)(c) {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                panic!("capture {round} did not end: {err}");
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert!(
        worked.load(std::sync::atomic::Ordering::Relaxed) >= WORKERS,
        "the other threads worked during the captures"
    );
}

/// A profiler dropped on this thread, in the default GLOBAL mode, while
/// another thread captures a graph in GLOBAL mode: its gate's memory is
/// freed and its anchor stream drained and destroyed off this thread, in
/// RELAXED mode, so the capture ends as it began. (A real driver refuses a
/// GLOBAL-mode thread's memory release during such a capture, and
/// invalidates it.)
pub fn a_profiler_dropped_during_a_global_capture_elsewhere_leaves_it_valid<A: Backend>(
    h: &Harness<A>,
) {
    let capture = h.capture.as_ref().expect("the backend has graph capture");
    let streams = Streams::<A>::new(2);
    let (s, c) = (streams.get(0), streams.get(1));
    let mut profiler = EventProfiler::<A>::new();
    let token = profiler.start(s);
    let window = profiler.stop(s, token).unwrap();
    pollster::block_on(window.resolve()).expect("the window was read");
    assert!(device_events_core::process::wait_for_calibrations(
        Duration::from_secs(10)
    ));
    let (begun, ended) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    let outcome = std::thread::scope(|scope| {
        let capturing = scope.spawn(|| {
            (capture.bind_thread)();
            (capture.begin)(c).unwrap();
            begun.wait();
            ended.wait();
            (capture.end)(c)
        });
        begun.wait();
        drop(profiler);
        assert!(device_events_core::process::wait_for_calibrations(
            Duration::from_secs(10)
        ));
        ended.wait();
        capturing.join().expect("the capturing thread")
    });
    if let Err(err) = outcome {
        panic!("the capture did not end: {err}");
    }
}

/// A fence recorded before its stream begins a capture, asked during it
/// from the capturing thread: whether complete, and a wait. Each answer is
/// the truth or a capture error, and the capture ends as it began. (ROCm's
/// runtime before 7.2 invalidates the capture of the stream an event was
/// last recorded on when the event is asked, in any mode.)
pub fn asking_a_fence_recorded_before_its_stream_captures_leaves_the_capture_valid<A: Backend>(
    h: &Harness<A>,
) {
    let capture = h.capture.as_ref().expect("the backend has graph capture");
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    h.enqueue(s, Duration::from_millis(1));
    let fence = EventFence::<A>::new(s);
    (capture.begin)(s).unwrap();
    let asked = fence.is_complete();
    let waited = fence.wait_sync();
    let status = (capture.status)(s);
    let ended = (capture.end)(s);
    asked.unwrap();
    if let Err(err) = waited {
        assert_eq!(err.kind(), ErrorKind::Capture, "{err}");
    }
    assert_eq!(status.unwrap(), CaptureStatus::Active);
    ended.unwrap();
    fence.wait_sync().unwrap();
    assert!(fence.is_complete().unwrap());
}

/// Makes each check of this crate a named `#[test]` of the calling suite.
///
/// `$harness` is an expression giving a [`Harness`] (or a guard that derefs
/// to one); it runs once per test. `without capture` leaves out the checks
/// of graph capture, for an API that has none (OpenCL).
#[macro_export]
macro_rules! conformance_suite {
    ($backend:ty, $harness:expr, without capture) => {
        $crate::conformance_suite!(@tests $backend, $harness,
            fence_orders_two_streams,
            wait_sync_returns_after_the_fenced_work,
            dropping_an_unwaited_fence_in_flight_is_safe,
            window_measures_the_work_inside_it,
            nested_windows_lie_inside_their_outer_window,
            overlapping_windows_are_consistent,
            placement_lies_inside_the_host_interval,
            thousands_in_flight_resolve_from_several_threads,
            elapsed_on_an_unrecorded_event_is_refused,
            elapsed_on_an_unreached_event_is_not_ready,
            windows_resolve_on_other_threads,
            a_window_read_by_try_resolve_is_then_ready_with_none,
            a_chain_of_windows_adds_up_to_its_span,
            a_failed_boundary_fails_only_the_windows_it_bounds
        );
    };
    ($backend:ty, $harness:expr) => {
        $crate::conformance_suite!($backend, $harness, without capture);
        $crate::conformance_suite!(@tests $backend, $harness,
            a_capturing_stream_gives_capture_errors,
            a_fence_out_of_a_capture_forks_and_its_windows_read_none,
            a_global_capture_ends_while_the_library_works_elsewhere,
            a_profiler_dropped_during_a_global_capture_elsewhere_leaves_it_valid,
            asking_a_fence_recorded_before_its_stream_captures_leaves_the_capture_valid
        );
    };
    (@tests $backend:ty, $harness:expr, $($check:ident),+) => {
        $(
            #[test]
            fn $check() {
                let harness = $harness;
                $crate::$check::<$backend>(&harness);
            }
        )+
    };
}
