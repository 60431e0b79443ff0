//! `EventProfiler` over the simulated device.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use device_events_core::sim::{Sim, SimStream};
use device_events_core::{
    AnchorConfig, DriverError, ErrorKind, EventApi, EventProfiler, ProfileError, ProfilerConfig,
};
use device_events_core::{PlacedWindow, Placement};
use std::time::Instant;
use support::{OnWait, WaitHook, logged, setup};

fn stream() -> SimStream {
    Sim::stream_create_non_blocking().unwrap()
}

fn on_sim_clock() -> EventProfiler<Sim> {
    on_sim_clock_of()
}

/// The same, over a wrapper of the simulated backend.
fn on_sim_clock_of<
    A: device_events_core::backend::AnchorApi + device_events_core::backend::FenceApi,
>() -> EventProfiler<A> {
    EventProfiler::with_config(ProfilerConfig {
        anchor: AnchorConfig {
            host_clock: Sim::host_now,
            ..AnchorConfig::default()
        },
        ..ProfilerConfig::default()
    })
}

/// A host clock that stands still, for a test whose outcome must not
/// depend on how long the machine takes between two steps: no anchor ages
/// and no back-off ends.
fn still_clock() -> Instant {
    static AT: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *AT.get_or_init(Sim::host_now)
}

fn on_still_clock() -> EventProfiler<Sim> {
    EventProfiler::with_config(ProfilerConfig {
        anchor: AnchorConfig {
            host_clock: still_clock,
            ..AnchorConfig::default()
        },
        ..ProfilerConfig::default()
    })
}

/// Wait for the anchor calibrations in flight, which run off the
/// caller's thread.
fn settle() {
    assert!(device_events_core::process::wait_for_calibrations(
        Duration::from_secs(10)
    ));
}

/// A profiler over `A` on the simulated clock, one window on `s` read and
/// its calibrations settled: its anchor stream has had work.
fn anchored<
    A: device_events_core::backend::AnchorApi<Stream = SimStream>
        + device_events_core::backend::FenceApi,
>(
    s: SimStream,
) -> EventProfiler<A> {
    let mut profiler = on_sim_clock_of::<A>();
    let token = profiler.start(s);
    let window = profiler.stop(s, token).unwrap();
    assert!(resolve(window).is_some());
    settle();
    profiler
}

fn resolve<A: device_events_core::backend::AnchorApi>(
    window: PlacedWindow<A>,
) -> Option<Placement> {
    pollster::block_on(window)
}

fn distance(a: Instant, b: Instant) -> Duration {
    a.saturating_duration_since(b)
        .max(b.saturating_duration_since(a))
}

fn start_of(placed: &Placement, epoch: Instant) -> Duration {
    placed.start.saturating_duration_since(epoch)
}

fn end_of(placed: &Placement, epoch: Instant) -> Duration {
    placed.end.saturating_duration_since(epoch)
}

#[test]
fn window_measures_the_work_inside_it() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let token = profiler.start(s);
    Sim::enqueue_work(s, Duration::from_millis(2));
    let ticks = resolve(profiler.stop(s, token).unwrap()).unwrap();
    assert!(
        ticks.duration >= Duration::from_millis(2),
        "{:?}",
        ticks.duration
    );
    assert!(
        ticks.duration < Duration::from_micros(2500),
        "{:?}",
        ticks.duration
    );
}

#[test]
fn window_is_placed_where_the_device_stamped_it() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let token = profiler.start(s);
    let truth = Sim::last_record_instant().unwrap();
    Sim::enqueue_work(s, Duration::from_micros(500));
    let ticks = resolve(profiler.stop(s, token).unwrap()).unwrap();

    let epoch = truth - Duration::from_secs(1);
    let placed = epoch + start_of(&ticks, epoch);
    let bound = profiler.anchor_uncertainty().unwrap() + Duration::from_micros(1);
    assert!(
        distance(placed, truth) <= bound,
        "{:?} off, bound {bound:?}",
        distance(placed, truth)
    );
}

#[test]
fn nested_windows_lie_inside_their_outer_window() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let outer = profiler.start(s);
    Sim::enqueue_work(s, Duration::from_micros(300));
    let inner = profiler.start(s);
    Sim::enqueue_work(s, Duration::from_micros(300));
    let inner = resolve(profiler.stop(s, inner).unwrap()).unwrap();
    Sim::enqueue_work(s, Duration::from_micros(300));
    let outer = resolve(profiler.stop(s, outer).unwrap()).unwrap();

    let epoch = Sim::host_now() - Duration::from_secs(10);
    assert!(start_of(&outer, epoch) <= start_of(&inner, epoch));
    assert!(end_of(&inner, epoch) <= end_of(&outer, epoch));
    assert!(outer.duration >= inner.duration + Duration::from_micros(600));
}

#[test]
fn overlapping_windows_are_each_measured() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let first = profiler.start(s);
    Sim::enqueue_work(s, Duration::from_micros(400));
    let second = profiler.start(s);
    Sim::enqueue_work(s, Duration::from_micros(400));
    let first = resolve(profiler.stop(s, first).unwrap()).unwrap();
    Sim::enqueue_work(s, Duration::from_micros(400));
    let second = resolve(profiler.stop(s, second).unwrap()).unwrap();

    let epoch = Sim::host_now() - Duration::from_secs(10);
    assert!(start_of(&first, epoch) < start_of(&second, epoch));
    assert!(start_of(&second, epoch) < end_of(&first, epoch));
    assert!(end_of(&first, epoch) < end_of(&second, epoch));
    assert!(first.duration >= Duration::from_micros(800));
    assert!(second.duration >= Duration::from_micros(800));
}

#[test]
fn windows_on_two_streams_are_placed_on_one_clock() {
    let _sim = setup();
    let (a, b) = (stream(), stream());
    let mut profiler = on_sim_clock();
    Sim::enqueue_work(a, Duration::from_millis(3));
    let late = profiler.start(a);
    let late_truth = Sim::last_record_instant().unwrap();
    let early = profiler.start(b);
    let early_truth = Sim::last_record_instant().unwrap();
    let late = profiler.stop(a, late).unwrap();
    let early = profiler.stop(b, early).unwrap();
    let late = pollster::block_on(late.resolve()).unwrap();
    let early = pollster::block_on(early.resolve()).unwrap();

    // Each start where the device stamped it, within its stated bound: one
    // clock for both streams, whatever the host's scheduler did meanwhile
    // (the stream behind 3 ms of work usually starts later, not always).
    let epoch = Sim::host_now() - Duration::from_secs(10);
    for (placed, truth) in [(late, late_truth), (early, early_truth)] {
        let at = epoch + start_of(&placed, epoch);
        assert!(
            distance(at, truth) <= placed.uncertainty,
            "{:?} off, bound {:?}",
            distance(at, truth),
            placed.uncertainty
        );
    }
}

#[test]
fn windows_resolve_out_of_order_and_on_other_threads() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let mut pending = Vec::new();
    for i in 0..8u64 {
        let token = profiler.start(s);
        Sim::enqueue_work(s, Duration::from_micros(100 * (i + 1)));
        pending.push((i, profiler.stop(s, token).unwrap()));
    }
    pending.reverse();
    let handles: Vec<_> = pending
        .into_iter()
        .map(|(i, duration)| std::thread::spawn(move || (i, resolve(duration))))
        .collect();
    for handle in handles {
        let (i, ticks) = handle.join().unwrap();
        let ticks = ticks.unwrap();
        assert!(ticks.duration >= Duration::from_micros(100 * (i + 1)));
    }
}

#[test]
fn abandoned_window_returns_its_events() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let token = profiler.start(s);
    let idle = profiler.idle_events();
    profiler.abandon(token).unwrap();
    assert_eq!(profiler.idle_events(), idle + 1);
    assert_eq!(profiler.open_windows(), 0);
    assert_eq!(
        profiler.stop(s, token).err().unwrap(),
        ProfileError::StaleToken
    );
}

#[test]
fn windows_marked_failed_return_their_events() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let (a, b) = (profiler.start(s), profiler.start(s));
    let idle = profiler.idle_events();
    let fault = DriverError::refused("sim", "kernel launch", ErrorKind::DevicePoisoned, "test");
    profiler.fail_open_windows(&fault);
    assert_eq!(profiler.idle_events(), idle + 2);
    assert!(profiler.stop(s, a).is_err() && profiler.stop(s, b).is_err());
}

#[test]
fn idle_events_stay_within_max_idle_events() {
    let _sim = setup();
    let s = stream();
    let mut profiler = EventProfiler::<Sim>::with_config(ProfilerConfig {
        anchor: AnchorConfig {
            host_clock: Sim::host_now,
            ..AnchorConfig::default()
        },
        max_idle_events: 4,
        ..ProfilerConfig::default()
    });
    let mut windows: Vec<_> = (0..8)
        .map(|_| {
            let token = profiler.start(s);
            profiler.stop(s, token).unwrap()
        })
        .collect();
    for window in windows.drain(..2) {
        resolve(window).unwrap();
    }
    assert_eq!(profiler.idle_events(), 4);
    // This start takes the idle events into the profiler's own stock; the
    // events given back meanwhile are kept only as far as the stock left
    // room.
    let open = profiler.start(s);
    for window in windows {
        resolve(window).unwrap();
    }
    assert_eq!(profiler.idle_events(), 4);
    profiler.abandon(open).unwrap();
    assert!(profiler.idle_events() <= 4);
}

#[test]
fn repeated_token_is_refused() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let token = profiler.start(s);
    drop(profiler.stop(s, token).unwrap());
    assert_eq!(
        profiler.stop(s, token).err().unwrap(),
        ProfileError::StaleToken
    );
    assert_eq!(
        profiler.abandon(token).err().unwrap(),
        ProfileError::StaleToken
    );
}

#[test]
fn stale_token_is_refused_after_its_slot_is_reused() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let old = profiler.start(s);
    profiler.abandon(old).unwrap();
    let new = profiler.start(s);
    assert_eq!(
        profiler.stop(s, old).err().unwrap(),
        ProfileError::StaleToken
    );
    assert!(profiler.stop(s, new).is_ok());
}

#[test]
fn a_split_windows_token_is_refused_once_the_next_window_holds_its_slot() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let first = profiler.start(s);
    let (_closed, next) = profiler.split(s, first).unwrap();
    assert!(matches!(
        profiler.split(s, first),
        Err(ProfileError::StaleToken)
    ));
    assert_eq!(
        profiler.abandon(first).err(),
        Some(ProfileError::StaleToken)
    );
    assert_eq!(profiler.open_windows(), 1);
    assert!(profiler.stop(s, next).is_ok());
}

#[test]
fn a_split_that_fails_leaves_no_window_open() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let first = profiler.start(s);
    Sim::stream_destroy(s).unwrap();
    assert!(matches!(
        profiler.split(s, first),
        Err(ProfileError::Driver(_))
    ));
    assert_eq!(profiler.open_windows(), 0);
    let again = profiler.start(stream());
    assert_ne!(again, first);
    assert_eq!(profiler.open_windows(), 1);
    profiler.abandon(again).unwrap();
}

#[test]
fn foreign_token_is_refused() {
    let _sim = setup();
    let s = stream();
    let mut mine = on_sim_clock();
    let mut theirs = on_sim_clock();
    let token = theirs.start(s);
    assert_eq!(
        mine.stop(s, token).err().unwrap(),
        ProfileError::ForeignToken
    );
    assert_eq!(
        mine.abandon(token).err().unwrap(),
        ProfileError::ForeignToken
    );
    assert!(theirs.stop(s, token).is_ok());
}

#[test]
fn windows_marked_failed_return_the_fault() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let (a, b) = (profiler.start(s), profiler.start(s));
    let fault = DriverError::refused("sim", "kernel launch", ErrorKind::DevicePoisoned, "test");
    profiler.fail_open_windows(&fault);
    assert_eq!(
        profiler.stop(s, a).err().unwrap(),
        ProfileError::Driver(fault.clone())
    );
    assert_eq!(
        profiler.stop(s, b).err().unwrap(),
        ProfileError::Driver(fault)
    );
    let later = profiler.start(s);
    assert!(profiler.stop(s, later).is_ok());
}

#[test]
fn device_fault_met_by_the_profiler_fails_every_open_window() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let open = profiler.start(s);
    settle();
    Sim::fail_call(1, ErrorKind::DevicePoisoned);
    let failed = profiler.start(s);
    let err = profiler.stop(s, failed).err().unwrap();
    assert!(
        matches!(&err, ProfileError::Driver(e) if e.is_device_poisoned()),
        "{err}"
    );
    assert_eq!(profiler.stop(s, open).err().unwrap(), err);
}

#[test]
fn anchor_is_refreshed_once_older_than_its_bound() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    // Each calibration waits for its anchor event, off the caller's thread.
    let calibrations = |profiler: &mut EventProfiler<Sim>| {
        let before = Sim::calls_of("simEventSynchronize");
        let token = profiler.start(s);
        profiler.abandon(token).unwrap();
        settle();
        Sim::calls_of("simEventSynchronize") - before
    };
    let first = calibrations(&mut profiler);
    let before = Sim::counts().calls;
    let fresh = profiler.start(s);
    assert_eq!(
        Sim::counts().calls - before,
        1,
        "a window under a fresh anchor is one record"
    );
    profiler.abandon(fresh).unwrap();
    settle();
    Sim::advance_clock(Duration::from_millis(1001));
    let stale = calibrations(&mut profiler);
    assert!(first > 0 && stale > 0, "first {first}, stale {stale}");
}

#[test]
fn window_an_hour_after_the_first_is_placed_within_a_few_microseconds() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let first = profiler.start(s);
    resolve(profiler.stop(s, first).unwrap()).unwrap();

    Sim::advance_clock(Duration::from_secs(3600));
    let token = profiler.start(s);
    let truth = Sim::last_record_instant().unwrap();
    Sim::enqueue_work(s, Duration::from_micros(200));
    let window = profiler.stop(s, token).unwrap();
    let placed = pollster::block_on(window.resolve()).unwrap();

    // Within its stated bound, and that bound a fresh anchor's: an `f32`
    // reading an hour from the first anchor would state ~214 µs for the
    // reading alone. (Not "a few µs": the tightest of five brackets is
    // still as wide as the machine's load makes it.)
    let epoch = truth - Duration::from_secs(1);
    let at = epoch + start_of(&placed, epoch);
    assert!(
        distance(at, truth) <= placed.uncertainty,
        "{:?} off, bound {:?}",
        distance(at, truth),
        placed.uncertainty
    );
    assert!(
        placed.uncertainty < Duration::from_micros(107),
        "{placed:?}"
    );
}

#[test]
fn negative_reading_of_an_empty_window_is_clamped_to_zero() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let token = profiler.start(s);
    let timing = profiler.stop(s, token).unwrap();
    settle();
    // The span, the span the other way round, then the start's offset from
    // the anchor: both ends at one point, so the window is empty, not
    // reversed.
    Sim::queue_elapsed_readings([-0.5, -0.5, 0.010]);
    let ticks = resolve(timing).unwrap();
    assert_eq!(ticks.duration, Duration::ZERO);
}

#[test]
fn window_whose_end_precedes_its_start_is_none_and_logged() {
    let _sim = setup();
    let (a, b) = (stream(), stream());
    let mut profiler = on_sim_clock();
    Sim::enqueue_work(a, Duration::from_millis(5));
    let token = profiler.start(a);
    // `b` is idle: it reaches the end before `a` reaches the start.
    let timing = profiler.stop(b, token).unwrap();
    assert!(resolve(timing).is_none(), "a reversed window is not a zero");
    assert!(
        logged(&["sim", "unreadable", "precedes its start"]),
        "{:?}",
        support::logs()
    );
}

#[test]
fn window_across_a_fence_hand_off_times_the_whole_hand_off() {
    let _sim = setup();
    let (a, b) = (stream(), stream());
    let mut profiler = on_sim_clock();
    let token = profiler.start(a);
    Sim::enqueue_work(a, Duration::from_millis(3));
    let fence = device_events_core::EventFence::<Sim>::new(a);
    fence.wait_async(b).unwrap();
    Sim::enqueue_work(b, Duration::from_millis(2));
    let ticks = resolve(profiler.stop(b, token).unwrap()).unwrap();
    assert!(
        ticks.duration >= Duration::from_millis(5),
        "{:?}",
        ticks.duration
    );
}

#[test]
fn failed_anchor_refresh_backs_off_instead_of_retrying_at_every_start() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let first = profiler.start(s);
    profiler.abandon(first).unwrap();
    settle();
    Sim::advance_clock(Duration::from_millis(1001));
    // Every calibration waits for its anchor event: make those waits fail.
    Sim::fail_every("simEventSynchronize", ErrorKind::Other);
    let before = Sim::calls_of("simEventSynchronize");
    let started = Sim::host_now();
    for _ in 0..100 {
        let token = profiler.start(s);
        profiler.abandon(token).unwrap();
        settle();
    }
    let elapsed = Sim::host_now() - started;
    let tries = Sim::calls_of("simEventSynchronize") - before;
    // Back-off doubles from 1 ms: one try, and on a machine slow enough to
    // take longer over the 100 starts, one more per doubling of the time.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let doublings = (elapsed.as_secs_f64() * 1e3).max(1.0).log2().ceil() as u64;
    assert!(
        (1..=1 + doublings).contains(&tries),
        "{tries} calibrations in {elapsed:?}: one failed, then a back-off"
    );
    assert!(logged(&["sim", "anchor refresh failed", "next try in"]));
}

#[test]
fn window_far_from_an_anchor_that_cannot_be_refreshed_is_none() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let first = profiler.start(s);
    resolve(profiler.stop(s, first).unwrap()).unwrap();
    settle();
    Sim::fail_every("simEventSynchronize", ErrorKind::Other);
    Sim::advance_clock(Duration::from_secs(61));
    let token = profiler.start(s);
    let timing = profiler.stop(s, token).unwrap();
    // Reading does not wait: the sim's clock has passed both ends.
    assert!(resolve(timing).is_none());
    assert!(logged(&[
        "sim",
        "unreadable",
        "from its anchor, past the 60s bound"
    ]));
}

#[test]
fn each_windows_stated_bound_contains_the_truth() {
    let _sim = setup();
    Sim::set_drift_ppm(80.0);
    let s = stream();
    let mut profiler = on_sim_clock();
    let mut worst = Duration::ZERO;
    for i in 0..200u64 {
        if i % 20 == 0 {
            // Not in the middle of a calibration's bracket: a real clock
            // does not jump.
            settle();
            Sim::advance_clock(Duration::from_millis(300));
        }
        let token = profiler.start(s);
        let start_truth = Sim::last_record_instant().unwrap();
        Sim::enqueue_work(s, Duration::from_micros(50 + i * 7));
        let window = profiler.stop(s, token).unwrap();
        let end_truth = Sim::last_record_instant().unwrap();
        let placed = pollster::block_on(window.resolve()).unwrap();
        let epoch = start_truth - Duration::from_secs(10);
        let start = epoch + start_of(&placed, epoch);
        let end = epoch + end_of(&placed, epoch);
        for (at, truth) in [(start, start_truth), (end, end_truth)] {
            let off = distance(at, truth);
            assert!(
                off <= placed.uncertainty,
                "window {i}: {off:?} from the truth, bound {:?}",
                placed.uncertainty
            );
            worst = worst.max(off);
        }
        assert!(placed.uncertainty < Duration::from_millis(1));
    }
    assert!(worst > Duration::ZERO, "the check could fail");
}

#[test]
fn nan_reading_resolves_to_no_measurement_and_is_logged() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let token = profiler.start(s);
    let timing = profiler.stop(s, token).unwrap();
    settle();
    Sim::queue_elapsed_readings([f32::NAN]);
    assert!(resolve(timing).is_none());
    assert!(logged(&["sim", "unreadable", "NaN"]));
}

#[test]
fn unreadable_window_is_none_not_zero() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let token = profiler.start(s);
    let timing = profiler.stop(s, token).unwrap();
    settle();
    Sim::fail_call(1, ErrorKind::InvalidHandle);
    assert!(resolve(timing).is_none());
    assert!(logged(&["sim", "unreadable", "SIM_INVALID_HANDLE"]));
}

#[test]
fn steady_state_creates_no_events() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_still_clock();
    let round = |profiler: &mut EventProfiler<Sim>| {
        let tokens: Vec<_> = (0..16).map(|_| profiler.start(s)).collect();
        for token in tokens {
            resolve(profiler.stop(s, token).unwrap()).unwrap();
        }
    };
    round(&mut profiler);
    let created = Sim::counts().events_created;
    for _ in 0..10 {
        round(&mut profiler);
    }
    assert_eq!(Sim::counts().events_created, created);
}

#[test]
fn dropping_the_profiler_with_windows_open_releases_everything() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let _open = profiler.start(s);
    let done = profiler.start(s);
    let pending = profiler.stop(s, done).unwrap();
    drop(profiler);
    assert!(
        Sim::counts().live_events > 0,
        "the pending window still holds its events"
    );
    drop(pending);
    settle();
    let counts = Sim::counts();
    assert_eq!(
        (
            counts.live_events,
            counts.live_streams - 1,
            counts.bad_releases
        ),
        (0, 0, 0)
    );
}

#[test]
fn set_up_that_fails_half_way_releases_its_stream() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    // The anchor stream is made; the window's event and the anchor's are not.
    Sim::fail_every("simEventCreate", ErrorKind::OutOfResources);
    let token = profiler.start(s);
    let err = profiler.stop(s, token).err().unwrap();
    assert!(matches!(err, ProfileError::Driver(e) if e.call() == "simEventCreate"));
    drop(profiler);
    settle();
    let counts = Sim::counts();
    assert_eq!(
        (counts.live_streams, counts.live_events),
        (1, 0),
        "only the caller's stream is left"
    );
}

/// A dropped profiler's anchor stream is released on a library thread,
/// inside a round of work a `fork` waits for: one it could not drain is
/// left to the process rather than destroyed, since its destroy would
/// wait for the stream's work on the device (`hipStreamDestroy` does).
#[test]
fn an_anchor_stream_that_cannot_be_drained_is_left_to_the_process() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let token = profiler.start(s);
    let window = profiler.stop(s, token).unwrap();
    assert!(resolve(window).is_some());
    // The release's drain records behind the stream's work: refused.
    Sim::fail_every("simEventRecord", ErrorKind::Other);
    let destroyed = Sim::calls_of("simStreamDestroy");
    drop(profiler);
    settle();
    assert_eq!(
        Sim::calls_of("simStreamDestroy"),
        destroyed,
        "the undrained anchor stream was destroyed"
    );
    assert_eq!(
        Sim::counts().live_streams,
        2,
        "the caller's stream, and the anchor stream left to the process"
    );
    assert!(logged(&["left to the process"]), "not said");
}

/// A drain refused because the device is lost: its stream has no work
/// left to wait for, and is destroyed.
#[test]
fn an_anchor_stream_whose_drain_finds_the_device_lost_is_destroyed() {
    let _sim = setup();
    let s = stream();
    let profiler = anchored::<Sim>(s);
    Sim::fail_every("simEventRecord", ErrorKind::DevicePoisoned);
    drop(profiler);
    settle();
    assert_eq!(Sim::counts().live_streams, 1, "only the caller's stream");
    assert!(logged(&["lost device", "destroyed undrained"]), "not said");
}

/// A drain that fails once (an error the driver recovers from) is tried
/// again, and the stream drained then is destroyed as usual.
#[test]
fn an_anchor_stream_whose_drain_fails_once_is_drained_again_and_destroyed() {
    let _sim = setup();
    let s = stream();
    let profiler = anchored::<Sim>(s);
    // The next record is the release's drain.
    Sim::fail_next("simEventRecord", ErrorKind::OutOfResources);
    drop(profiler);
    settle();
    let refused = Sim::injected().expect("the drain was refused");
    assert_eq!(refused.call(), "simEventRecord");
    let counts = Sim::counts();
    assert_eq!(
        (counts.live_streams, counts.live_events, counts.bad_releases),
        (1, 0, 0),
        "only the caller's stream is left"
    );
}

/// [`Unbound`]'s next context binds that fail, and with what kind (0:
/// none).
static BIND_FAILS: AtomicUsize = AtomicUsize::new(0);
static BIND_FAILS_AS: AtomicU8 = AtomicU8::new(0);

/// The simulated backend, whose context cannot be bound as [`BIND_FAILS`]
/// says: a release's drain can then make no event.
struct Unbound;

support::events_of_sim!(Unbound);

impl device_events_core::backend::AnchorApi for Unbound {}
impl device_events_core::backend::FenceApi for Unbound {}
impl device_events_core::backend::ThreadApi for Unbound {
    fn in_context_of<T>(stream: SimStream, call: impl FnOnce() -> T) -> Result<T, DriverError> {
        let failing = BIND_FAILS
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        let kind = match BIND_FAILS_AS.load(Ordering::Acquire) {
            _ if !failing => {
                return <Sim as device_events_core::backend::ThreadApi>::in_context_of(
                    stream, call,
                );
            }
            1 => ErrorKind::OutOfResources,
            _ => ErrorKind::DevicePoisoned,
        };
        Err(DriverError::refused("sim", "simBind", kind, "no context"))
    }
}

/// Under [`setup`]: a dropped profiler of [`Unbound`], its anchor taken, whose release
/// finds the next `binds` context binds failing with `kind` (1: out of
/// resources, 2: a lost device): the simulated device's streams once the
/// release ended, the streams it destroyed, and the records it made (a
/// drain's).
fn released_with_binds_failing(binds: usize, kind: u8) -> (u64, u64, u64) {
    let profiler = anchored::<Unbound>(stream());
    let destroyed = Sim::calls_of("simStreamDestroy");
    let recorded = Sim::calls_of("simEventRecord");
    BIND_FAILS_AS.store(kind, Ordering::Release);
    BIND_FAILS.store(binds, Ordering::Release);
    drop(profiler);
    settle();
    BIND_FAILS.store(0, Ordering::Release);
    (
        Sim::counts().live_streams,
        Sim::calls_of("simStreamDestroy") - destroyed,
        Sim::calls_of("simEventRecord") - recorded,
    )
}

/// A release's drain that can make no event for a while (a driver out of
/// them) is asked again, and drains and destroys the stream once it can.
#[test]
fn an_anchor_stream_with_no_event_to_drain_it_is_drained_once_there_is_one() {
    let _sim = setup();
    assert_eq!(
        released_with_binds_failing(3, 1),
        (1, 1, 1),
        "drained, then destroyed: only the caller's stream is left"
    );
}

/// Never an event to drain with: the stream is left to the process, not
/// destroyed undrained, since its destroy could wait for its work inside
/// a round of work that a `fork` waits for.
#[test]
fn an_anchor_stream_never_given_an_event_to_drain_it_is_left_to_the_process() {
    let _sim = setup();
    assert_eq!(
        released_with_binds_failing(usize::MAX, 1),
        (2, 0, 0),
        "the caller's stream, and the anchor stream left to the process"
    );
    assert!(logged(&["left to the process", "no event"]), "not said");
}

/// A lost device's anchor stream has no work to wait for: destroyed at
/// once, undrained.
#[test]
fn a_lost_devices_anchor_stream_is_destroyed_undrained() {
    let _sim = setup();
    assert_eq!(released_with_binds_failing(usize::MAX, 2), (1, 1, 0));
    assert!(logged(&["lost device", "destroyed undrained"]), "not said");
}

#[test]
fn profiler_is_send_and_its_futures_send_and_static() {
    fn assert_send<T: Send>() {}
    fn assert_send_static<T: Send + 'static>(_: &T) {}
    assert_send::<EventProfiler<Sim>>();
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let token = profiler.start(s);
    let future = profiler.stop(s, token).unwrap().into_future();
    assert_send_static(&future);
}

#[test]
fn placement_holds_on_a_device_clock_drifting_100_ppm_for_a_minute() {
    let _sim = setup();
    Sim::set_drift_ppm(100.0);
    let s = stream();
    let mut profiler = on_sim_clock();
    let mut errors = Vec::new();
    let mut calls_late = 0;
    for i in 0..8000 {
        if i == 7000 {
            calls_late = Sim::counts().calls;
        }
        // The sim's clock jumps: never in the middle of a calibration's
        // bracket, which a real clock would not do.
        settle();
        Sim::advance_clock(Duration::from_micros(7500));
        let token = profiler.start(s);
        let truth = Sim::last_record_instant().unwrap();
        let window = profiler.stop(s, token).unwrap();
        let placed = pollster::block_on(window.resolve()).unwrap();
        let epoch = truth - Duration::from_secs(1);
        let error = distance(epoch + start_of(&placed, epoch), truth);
        // Each inside its stated bound: that is what bounds the worst,
        // whose bracket is as wide as the machine's load made it.
        assert!(
            error <= placed.uncertainty,
            "window {i}: {error:?} off, bound {:?}",
            placed.uncertainty
        );
        errors.push(error);
    }
    // The last 1000 windows (7.5 s) took two records and two readings each;
    // what is left over is anchoring. Once the drift is known, an anchor a
    // second is enough: not a hundred.
    let anchoring = (Sim::counts().calls - calls_late).saturating_sub(4 * 1000);
    assert!(anchoring <= 10 * 11, "{} calls spent anchoring", anchoring);
    errors.sort();
    let (median, worst) = (errors[errors.len() / 2], errors[errors.len() - 1]);
    eprintln!("placement error: median {median:?}, worst {worst:?}");
    assert!(median <= Duration::from_micros(2), "median {median:?}");
}

/// During the back-off after a first calibration failed, a new window is
/// refused with an error that says why (no anchor yet, quoting the failure,
/// naming when the next try is), not the old error as if the window's own
/// call had failed.
#[test]
fn a_window_in_the_back_off_before_any_anchor_says_so() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_still_clock();
    Sim::fail_every("simEventSynchronize", ErrorKind::OutOfResources);
    // The first window rides the calibration being taken, which fails: it
    // reads `None`, logged with the failure.
    let first = profiler.start(s);
    let first = profiler.stop(s, first).unwrap();
    assert!(resolve(first).is_none(), "the first window has no anchor");
    assert!(
        logged(&["sim", "no anchor", "simEventSynchronize"]),
        "{:?}",
        support::logs()
    );
    settle();
    let second = profiler.start(s);
    let Err(ProfileError::Driver(err)) = profiler.stop(s, second) else {
        panic!("the second window, in the back-off, has no anchor either")
    };
    assert_eq!(err.call(), "anchor calibration", "{err}");
    assert_eq!(err.kind(), ErrorKind::OutOfResources);
    let text = err.to_string();
    assert!(
        text.contains("no anchor yet") && text.contains("simEventSynchronize"),
        "{text}"
    );
}

static WAITERS: std::sync::Mutex<Vec<std::thread::ThreadId>> = std::sync::Mutex::new(Vec::new());

/// Notes which threads waited in the driver.
struct NoteThread;

impl WaitHook for NoteThread {
    fn waited() {
        WAITERS.lock().unwrap().push(std::thread::current().id());
    }
}

fn waited_here() -> bool {
    let here = std::thread::current().id();
    WAITERS.lock().unwrap().contains(&here)
}

/// Panics: a backend bug.
struct PanicHook;

impl WaitHook for PanicHook {
    fn waited() {
        panic!("a backend bug")
    }
}

type Watched = OnWait<NoteThread>;
type PanickyWaits = OnWait<PanicHook>;

/// `start()` and `stop()` make no waiting driver call: the anchor is taken
/// on the library's thread, at the first window and at each refresh.
#[test]
fn start_and_stop_never_wait_in_the_driver() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock_of::<Watched>();
    let mut windows = Vec::new();
    for _ in 0..3 {
        let token = profiler.start(s);
        Sim::enqueue_work(s, Duration::from_micros(100));
        windows.push(profiler.stop(s, token).unwrap());
        // Stale: the next window begins a refresh. Not in the middle of
        // one, which a real clock would not do.
        settle();
        Sim::advance_clock(Duration::from_secs(2));
    }
    assert!(!waited_here(), "the caller's thread waited in the driver");
    for window in windows {
        assert!(resolve(window).is_some(), "each window is placed");
    }
    settle();
    assert!(
        !WAITERS.lock().unwrap().is_empty(),
        "anchors were waited for"
    );
}

/// The first window starts before its anchor exists: the anchor, taken
/// after it, still places it within the stated bound.
#[test]
fn a_window_started_before_the_first_anchor_is_placed_within_its_bound() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let token = profiler.start(s);
    let truth = Sim::last_record_instant().unwrap();
    Sim::enqueue_work(s, Duration::from_micros(300));
    let placed = pollster::block_on(profiler.stop(s, token).unwrap().resolve()).unwrap();
    let epoch = truth - Duration::from_secs(1);
    let at = epoch + start_of(&placed, epoch);
    assert!(
        distance(at, truth) <= placed.uncertainty,
        "{:?} off, bound {:?}",
        distance(at, truth),
        placed.uncertainty
    );
    assert!(placed.duration >= Duration::from_micros(300));
}

/// A calibration that panics (a backend bug) on the calibrator thread
/// neither takes that thread down nor leaves the windows waiting for its
/// anchor pending: they read `None`, and later calibrations still run.
#[test]
fn a_calibration_that_panics_leaves_no_window_pending() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock_of::<PanickyWaits>();
    let token = profiler.start(s);
    let window = profiler.stop(s, token).unwrap();
    assert!(resolve(window).is_none(), "no anchor: no placement");
    settle();
    let mut sim_profiler = on_sim_clock();
    let token = sim_profiler.start(s);
    let window = sim_profiler.stop(s, token).unwrap();
    assert!(
        resolve(window).is_some(),
        "the calibrator thread still serves"
    );
}

#[test]
fn a_resolution_too_large_to_add_gives_the_widest_bound_not_a_panic() {
    let _sim = setup();
    let s = stream();
    let mut profiler = EventProfiler::<Sim>::with_config(ProfilerConfig {
        anchor: AnchorConfig {
            host_clock: Sim::host_now,
            ..AnchorConfig::default()
        },
        timer_resolution: Duration::MAX,
        ..ProfilerConfig::default()
    });
    let token = profiler.start(s);
    Sim::enqueue_work(s, Duration::from_micros(200));
    let window = profiler.stop(s, token).unwrap();
    let placed = pollster::block_on(window.resolve()).unwrap();
    assert_eq!(placed.uncertainty, Duration::from_nanos(u64::MAX));
}

/// An anchor that never ages (`anchor_max_age: Duration::MAX`), with the
/// drift fit on or off, is a setting, not an overflow: windows open,
/// close and read, and a failing calibration backs off without one.
#[test]
fn an_anchor_max_age_too_long_to_add_is_never_stale_and_never_a_panic() {
    for drift_correction in [false, true] {
        let _sim = setup();
        let s = stream();
        let mut profiler = EventProfiler::<Sim>::with_config(ProfilerConfig {
            anchor: AnchorConfig {
                host_clock: Sim::host_now,
                anchor_max_age: Duration::MAX,
                drift_correction,
                ..AnchorConfig::default()
            },
            ..ProfilerConfig::default()
        });
        for _ in 0..3 {
            let token = profiler.start(s);
            Sim::enqueue_work(s, Duration::from_micros(10));
            let timing = profiler.stop(s, token).unwrap();
            assert!(resolve(timing).is_some(), "fit {drift_correction}");
        }
        drop(profiler);
        let mut failing = EventProfiler::<Sim>::with_config(ProfilerConfig {
            anchor: AnchorConfig {
                host_clock: Sim::host_now,
                anchor_max_age: Duration::MAX,
                drift_correction,
                ..AnchorConfig::default()
            },
            ..ProfilerConfig::default()
        });
        Sim::fail_every("simEventRecord", ErrorKind::OutOfResources);
        for _ in 0..3 {
            let token = failing.start(s);
            let _ = failing.stop(s, token).map(resolve);
            settle();
            Sim::advance_clock(Duration::from_secs(3600));
        }
        // The calibrator catches a panic and logs it: none may be there.
        assert!(
            !support::logs().iter().any(|line| line.contains("panicked")),
            "{:?}",
            support::logs()
        );
    }
}

/// A chain's boundary serves both windows it bounds, read in either order,
/// and goes back to the pool with the second: the later window read first
/// leaves it for the earlier one.
#[test]
fn a_chains_boundary_serves_both_windows_and_goes_back_with_the_last() {
    let _sim = setup();
    let s = stream();
    let mut profiler = on_sim_clock();
    let first = profiler.start(s);
    Sim::enqueue_work(s, Duration::from_micros(300));
    let (first, second) = profiler.split(s, first).unwrap();
    Sim::enqueue_work(s, Duration::from_micros(200));
    let second = profiler.stop(s, second).unwrap();
    let idle = profiler.idle_events();
    let second = resolve(second).expect("the later window read first");
    // Its start, the boundary, is still the earlier window's end.
    assert_eq!(profiler.idle_events(), idle + 1, "only its own end back");
    let first = resolve(first).expect("the earlier window read after");
    assert_eq!(
        profiler.idle_events(),
        idle + 3,
        "its start and the boundary back"
    );
    assert!(first.duration >= Duration::from_micros(300));
    assert!(second.duration >= Duration::from_micros(200));
}
