//! What a process at its thread limit sees: the library's threads cannot
//! be started. Its own binary, since refusing starts is process-wide.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::mpsc;
use std::time::Duration;

use device_events_core::process::{
    library_threads_running, refuse_thread_starts, wait_for_calibrations,
};
use device_events_core::sim::Sim;
use device_events_core::{EventApi, EventProfiler};

/// Refuses thread starts while it lives, once the library's threads from
/// earlier tests are gone.
struct Refusing;

impl Refusing {
    fn new() -> Self {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while library_threads_running() {
            assert!(
                std::time::Instant::now() < deadline,
                "the library's threads outlive every profiler"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        refuse_thread_starts(true);
        Self
    }
}

impl Drop for Refusing {
    fn drop(&mut self) {
        refuse_thread_starts(false);
    }
}

/// Run `f` on a thread of the test's own, within `limit`.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (sent, answer) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = sent.send(f());
    });
    answer.recv_timeout(limit).expect("it returned in time")
}

#[test]
fn start_returns_when_no_calibrator_thread_can_be_started() {
    let _sim = support::setup();
    let stream = Sim::stream_create_non_blocking().unwrap();
    let refusing = Refusing::new();
    let stopped = within(Duration::from_secs(5), move || {
        let mut profiler = EventProfiler::<Sim>::new();
        let token = profiler.start(stream);
        profiler
            .stop(stream, token)
            .map(drop)
            .map_err(|e| e.to_string())
    });
    let why = stopped.expect_err("no anchor, so no window");
    assert!(
        why.contains("no calibrator thread could be started"),
        "the window's error says why: {why}"
    );
    drop(refusing);
    assert!(wait_for_calibrations(Duration::from_secs(1)));
    Sim::stream_destroy(stream).unwrap();
    let counts = Sim::counts();
    assert_eq!(
        (counts.live_events, counts.live_streams),
        (0, 0),
        "nothing leaked"
    );
}

#[test]
fn profiling_works_again_once_threads_can_be_started() {
    let _sim = support::setup();
    let stream = Sim::stream_create_non_blocking().unwrap();
    let mut profiler = EventProfiler::<Sim>::new();
    let refusing = Refusing::new();
    let token = profiler.start(stream);
    assert!(
        profiler.stop(stream, token).is_err(),
        "no anchor, so no window"
    );
    drop(refusing);
    // The failed calibration backs off for a millisecond before the next.
    std::thread::sleep(Duration::from_millis(5));
    let token = profiler.start(stream);
    Sim::enqueue_work(stream, Duration::from_micros(100));
    let timing = profiler.stop(stream, token).unwrap();
    let ticks = pollster::block_on(timing.resolve()).expect("read once threads start");
    assert!(ticks.duration >= Duration::from_micros(100));
    drop(profiler);
    assert!(wait_for_calibrations(Duration::from_secs(1)));
    Sim::stream_destroy(stream).unwrap();
    assert_eq!(Sim::counts().live_events, 0, "nothing leaked");
}

#[test]
fn a_window_read_late_without_a_resolver_thread_reads_none_without_waiting() {
    let _sim = support::setup();
    let stream = Sim::stream_create_non_blocking().unwrap();
    let mut profiler = EventProfiler::<Sim>::new();
    // An anchor first, while threads can start.
    let token = profiler.start(stream);
    let timing = profiler.stop(stream, token).unwrap();
    assert!(pollster::block_on(timing.resolve()).is_some());
    assert!(wait_for_calibrations(Duration::from_secs(1)));
    let token = profiler.start(stream);
    // The device stays short of the window's end until released, however
    // long the library's threads take to leave.
    let held = Sim::hold(stream);
    let timing = profiler.stop(stream, token).unwrap();
    // The profiler keeps the resolver up between windows: drop it first.
    drop(profiler);
    let refusing = Refusing::new();
    let started = std::time::Instant::now();
    let read = within(Duration::from_secs(2), move || {
        pollster::block_on(timing.resolve())
    });
    assert!(read.is_none(), "not read: nobody asks for it");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the polling thread did not wait for the device"
    );
    drop(refusing);
    held.release();
    Sim::stream_destroy(stream).unwrap();
}
