//! A window's reading, in every order a caller may take: `try_resolve`,
//! awaiting it (by value or through `&mut`), and dropping it. Once a
//! reading has been handed back the window is spent: every later reading
//! gives `None` at once, never a future that waits for nothing. Each order
//! on a window read at once and on one handed to the resolver thread.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use device_events_core::sim::{Sim, SimHold, SimStream};
use device_events_core::{EventApi, EventProfiler, PlacedWindow};
use support::setup;

/// How a window's first reading finds it.
#[derive(Clone, Copy, Debug)]
enum Made {
    /// The device is already past its end: read in place.
    ReadAtOnce,
    /// Held ahead of the device (`Sim::hold`) when first asked, however
    /// long the host takes: handed to the resolver thread.
    Handed,
}

const BOTH: [Made; 2] = [Made::ReadAtOnce, Made::Handed];

/// A profiler whose anchor is taken, so a window is read on its first poll
/// once the device has passed it.
fn anchored(s: SimStream) -> EventProfiler<Sim> {
    let mut profiler = EventProfiler::<Sim>::new();
    let token = profiler.start(s);
    assert!(pollster::block_on(profiler.stop(s, token).unwrap()).is_some());
    assert!(device_events_core::process::wait_for_calibrations(
        Duration::from_secs(10)
    ));
    profiler
}

/// A window, and the hold that keeps a handed one ahead of the device.
fn window(
    profiler: &mut EventProfiler<Sim>,
    s: SimStream,
    made: Made,
) -> (PlacedWindow<Sim>, Option<SimHold>) {
    let hold = matches!(made, Made::Handed).then(|| Sim::hold(s));
    let token = profiler.start(s);
    (profiler.stop(s, token).unwrap(), hold)
}

/// One poll with a waker that does nothing.
fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

/// `try_resolve` until it gives a reading: at once, or after the resolver
/// thread has answered.
fn try_until_read(
    window: &mut PlacedWindow<Sim>,
    hold: Option<SimHold>,
) -> Option<device_events_core::Placement> {
    let first = window.try_resolve();
    match hold {
        None => return first.expect("the device is past its end"),
        Some(hold) => {
            assert!(first.is_none(), "held ahead of the device");
            hold.release();
        }
    }
    loop {
        if let Some(read) = window.try_resolve() {
            return read;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The output of `future`, awaited on a thread of its own, if it completes
/// within `limit`: a future that never completes fails the test instead of
/// hanging it.
fn completes_within<F>(limit: Duration, future: F) -> Option<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(pollster::block_on(future));
    });
    rx.recv_timeout(limit).ok()
}

/// The profiler and the stream gone: every event destroyed (the resolver
/// gives back a window it still asks about when it is answered, within
/// its released hold, and a calibration its own when it ends), none twice.
fn released(profiler: EventProfiler<Sim>, s: SimStream) {
    drop(profiler);
    Sim::stream_destroy(s).unwrap();
    assert!(device_events_core::process::wait_for_calibrations(
        Duration::from_secs(10)
    ));
    let deadline = Instant::now() + Duration::from_secs(5);
    while Sim::counts().live_events > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let counts = Sim::counts();
    assert_eq!(counts.live_events, 0, "events left: {counts:?}");
    assert_eq!(counts.bad_releases, 0, "released twice: {counts:?}");
}

#[test]
fn a_window_awaited_after_try_resolve_read_it_completes_with_none() {
    for made in BOTH {
        let _sim = setup();
        let s = Sim::stream_create_non_blocking().unwrap();
        let mut profiler = anchored(s);
        let (mut w, hold) = window(&mut profiler, s, made);
        assert!(try_until_read(&mut w, hold).is_some(), "{made:?}: read");
        let awaited = completes_within(Duration::from_secs(5), w.resolve());
        assert_eq!(awaited, Some(None), "{made:?}: spent, so None at once");
        released(profiler, s);
    }
}

#[test]
fn a_spent_window_polled_again_is_ready_with_none_at_once() {
    for made in BOTH {
        let _sim = setup();
        let s = Sim::stream_create_non_blocking().unwrap();
        let mut profiler = anchored(s);
        let (mut w, hold) = window(&mut profiler, s, made);
        assert!(try_until_read(&mut w, hold).is_some(), "{made:?}: read");
        assert_eq!(w.try_resolve(), Some(None), "{made:?}: try_resolve again");
        assert_eq!(
            poll_once(&mut w),
            Poll::Ready(None),
            "{made:?}: polled again"
        );
        drop(w);
        released(profiler, s);
    }
}

#[test]
fn a_window_awaited_through_a_reference_is_spent_after_its_reading() {
    for made in BOTH {
        let _sim = setup();
        let s = Sim::stream_create_non_blocking().unwrap();
        let mut profiler = anchored(s);
        let (mut w, hold) = window(&mut profiler, s, made);
        if let Some(hold) = hold {
            assert!(poll_once(&mut w).is_pending(), "held: handed over");
            hold.release();
        }
        let (read, mut w) = completes_within(Duration::from_secs(5), async move {
            let mut w = w;
            let read = (&mut w).await;
            (read, w)
        })
        .expect("awaited to the end");
        assert!(read.is_some(), "{made:?}: read");
        assert_eq!(w.try_resolve(), Some(None), "{made:?}: try_resolve after");
        assert_eq!(
            completes_within(Duration::from_secs(5), w.resolve()),
            Some(None),
            "{made:?}: awaited again"
        );
        released(profiler, s);
    }
}

#[test]
fn a_window_awaited_after_try_resolve_found_it_pending_gives_its_reading() {
    let _sim = setup();
    let s = Sim::stream_create_non_blocking().unwrap();
    let mut profiler = anchored(s);
    let (mut w, hold) = window(&mut profiler, s, Made::Handed);
    assert!(w.try_resolve().is_none(), "held ahead of the device");
    assert!(w.try_resolve().is_none(), "asked again while held");
    hold.expect("held").release();
    let awaited = completes_within(Duration::from_secs(5), w.resolve());
    assert!(matches!(awaited, Some(Some(_))), "read: {awaited:?}");
    released(profiler, s);
}

#[test]
fn a_window_dropped_after_try_resolve_releases_its_events_once() {
    for made in BOTH {
        for read_first in [false, true] {
            let _sim = setup();
            let s = Sim::stream_create_non_blocking().unwrap();
            let mut profiler = anchored(s);
            let (mut w, hold) = window(&mut profiler, s, made);
            if read_first {
                assert!(try_until_read(&mut w, hold).is_some(), "{made:?}: read");
                drop(w);
            } else {
                let _ = w.try_resolve();
                drop(w);
                drop(hold);
            }
            released(profiler, s);
        }
    }
}
