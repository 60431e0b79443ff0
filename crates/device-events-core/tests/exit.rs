//! The process's exit: once `stop_driver_calls` returns, the library's
//! threads make no driver call, and whoever waits on them hears `None`.
//! Its own binary: the stop is for good.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use device_events_core::process::{stop_driver_calls, wait_for_calibrations};
use device_events_core::sim::Sim;
use device_events_core::{EventApi, EventProfiler};

#[test]
fn after_stop_driver_calls_the_librarys_threads_call_the_driver_no_more() {
    let _sim = support::setup();
    let s = Sim::stream_create_non_blocking().unwrap();
    let mut profiler = EventProfiler::<Sim>::new();
    // An anchor first, then a window the resolver thread keeps asking
    // about: its device work lasts a minute.
    let token = profiler.start(s);
    let window = profiler.stop(s, token).unwrap();
    assert!(pollster::block_on(window.resolve()).is_some());
    assert!(wait_for_calibrations(Duration::from_secs(5)));
    let token = profiler.start(s);
    Sim::enqueue_work(s, Duration::from_secs(60));
    let mut pending = profiler.stop(s, token).unwrap();
    assert!(pending.try_resolve().is_none(), "handed to the resolver");
    std::thread::sleep(Duration::from_millis(20));
    let asking = Sim::counts().calls;
    std::thread::sleep(Duration::from_millis(100));
    assert!(Sim::counts().calls > asking, "the resolver asks meanwhile");

    assert!(
        stop_driver_calls(Duration::from_secs(1)),
        "no call left in flight"
    );
    // No deadline at all: waits as long as a call is in flight, and
    // returns at once with none.
    assert!(
        stop_driver_calls(Duration::MAX),
        "no overflow, no call left"
    );
    let stopped = Sim::counts().calls;
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(Sim::counts().calls, stopped, "no driver call since");
    // A calibration handed over now never runs.
    Sim::advance_clock(Duration::from_secs(3600));
    let token = profiler.start(s);
    let started = Sim::counts().calls;
    assert!(wait_for_calibrations(Duration::from_secs(1)));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(Sim::counts().calls, started, "the calibration did not run");
    // Whoever waits hears `None`, without a driver call: the window
    // pending then, and the one whose anchor will never be taken.
    let timing = profiler.stop(s, token).unwrap();
    let (sent, answer) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sent.send((
            pollster::block_on(pending.resolve()).is_none(),
            pollster::block_on(timing.resolve()).is_none(),
        ));
    });
    let read = answer
        .recv_timeout(Duration::from_secs(5))
        .expect("answered");
    assert_eq!(read, (true, true));
    std::mem::forget(profiler);
}
