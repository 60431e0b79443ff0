//! `EventFence` over the simulated device.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use device_events_core::sim::Sim;
use device_events_core::{ErrorKind, EventApi, EventFence};
use support::{logged, setup};

fn stream() -> <Sim as EventApi>::Stream {
    Sim::stream_create_non_blocking().unwrap()
}

#[test]
fn waiting_stream_runs_after_the_fenced_work() {
    let _sim = setup();
    let (producer, consumer) = (stream(), stream());
    Sim::enqueue_work(producer, Duration::from_millis(3));
    let fence = EventFence::<Sim>::new(producer);
    let fenced_point = Sim::last_record_instant().unwrap();

    fence.wait_async(consumer).unwrap();
    let after = EventFence::<Sim>::new(consumer);
    let consumer_point = Sim::last_record_instant().unwrap();

    assert!(consumer_point >= fenced_point);
    drop((fence, after));
}

#[test]
fn unfenced_stream_does_not_wait() {
    let _sim = setup();
    let (producer, consumer) = (stream(), stream());
    Sim::enqueue_work(producer, Duration::from_millis(50));
    let fence = EventFence::<Sim>::new(producer);
    let fenced_point = Sim::last_record_instant().unwrap();

    let other = EventFence::<Sim>::new(consumer);
    assert!(Sim::last_record_instant().unwrap() < fenced_point);
    drop((fence, other));
}

#[test]
fn host_wait_returns_once_the_point_is_reached() {
    let _sim = setup();
    let s = stream();
    Sim::enqueue_work(s, Duration::from_millis(5));
    let fence = EventFence::<Sim>::new(s);
    let point = Sim::last_record_instant().unwrap();

    fence.wait_sync().unwrap();
    assert!(Sim::host_now() >= point);
}

#[test]
fn dropping_a_waited_fence_releases_its_event_once() {
    let _sim = setup();
    let s = stream();
    let fence = EventFence::<Sim>::new(s);
    fence.wait_sync().unwrap();
    assert_eq!(Sim::counts().live_events, 1);
    drop(fence);
    let counts = Sim::counts();
    assert_eq!((counts.live_events, counts.bad_releases), (0, 0));
}

#[test]
fn dropping_an_unwaited_fence_releases_its_event_once() {
    let _sim = setup();
    let s = stream();
    Sim::enqueue_work(s, Duration::from_millis(20));
    drop(EventFence::<Sim>::new(s));
    let counts = Sim::counts();
    assert_eq!((counts.live_events, counts.bad_releases), (0, 0));
}

#[test]
fn refused_creation_is_returned_by_the_first_wait() {
    let _sim = setup();
    let s = stream();
    Sim::fail_call(1, ErrorKind::OutOfResources);
    let fence = EventFence::<Sim>::new(s);

    let err = fence.wait_sync().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfResources);
    assert_eq!(err.call(), "simEventCreate");
    assert_eq!(fence.wait_async(s).unwrap_err(), err);
    assert_eq!(Sim::counts().live_events, 0);
}

#[test]
fn refused_record_is_returned_by_the_first_wait_and_the_event_released() {
    let _sim = setup();
    let s = stream();
    Sim::fail_call(2, ErrorKind::Capture);
    let fence = EventFence::<Sim>::new(s);

    let err = fence.wait_async(s).unwrap_err();
    assert_eq!(
        (err.kind(), err.call()),
        (ErrorKind::Capture, "simEventRecord")
    );
    assert_eq!(Sim::counts().live_events, 0);
}

#[test]
fn refused_release_is_logged_with_the_backend_name() {
    let _sim = setup();
    let s = stream();
    let fence = EventFence::<Sim>::new(s);
    Sim::fail_call(1, ErrorKind::DevicePoisoned);
    drop(fence);
    assert!(logged(&["sim", "simEventDestroy", "SIM_ILLEGAL_ADDRESS"]));
}

#[test]
fn fence_is_waited_on_from_another_thread() {
    let _sim = setup();
    let s = stream();
    Sim::enqueue_work(s, Duration::from_millis(2));
    let fence = EventFence::<Sim>::new(s);
    let point = Sim::last_record_instant().unwrap();

    let waited_at = std::thread::spawn(move || {
        fence.wait_sync().unwrap();
        Sim::host_now()
    })
    .join()
    .unwrap();
    assert!(waited_at >= point);
    assert_eq!(Sim::counts().live_events, 0);
}

#[test]
fn fence_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<EventFence<Sim>>();
}

#[test]
fn pooled_fences_reuse_their_events() {
    let _sim = setup();
    let s = stream();
    let pool = device_events_core::FencePool::<Sim>::new();
    for _ in 0..10 {
        pool.fence(s).wait_sync().unwrap();
    }
    assert_eq!(Sim::counts().events_created, 1);
    assert_eq!(pool.idle(), 1);
    drop(pool);
    assert_eq!(Sim::counts().live_events, 0);
}

#[test]
fn a_pooled_fence_keeps_its_refused_record_for_the_wait() {
    let _sim = setup();
    let s = stream();
    let pool = device_events_core::FencePool::<Sim>::new();
    Sim::fail_call(2, ErrorKind::Capture);
    let err = pool.fence(s).wait_sync().unwrap_err();
    assert_eq!(err.call(), "simEventRecord");
    assert_eq!(pool.idle(), 1, "the event went back to the pool");
}

/// The rustdoc of the item `item` declares in `source`: its `///` lines,
/// attributes between them and it skipped.
fn doc_of(source: &str, item: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let at = lines
        .iter()
        .position(|line| line.trim_start().starts_with(item))
        .unwrap_or_else(|| panic!("no `{item}`"));
    let mut doc: Vec<&str> = lines[..at]
        .iter()
        .rev()
        .map(|line| line.trim_start())
        .skip_while(|line| line.starts_with("#["))
        .take_while(|line| line.starts_with("///"))
        .map(|line| line.trim_start_matches("///").trim())
        .collect();
    doc.reverse();
    doc.join(" ")
}

/// A wait added on the device holds the host in one case, and both places
/// a caller reads about it say which: on HIP, while another thread destroys
/// the fenced stream, the wait is for that destroy to return.
#[test]
fn the_device_waits_say_when_they_hold_the_host() {
    for (source, item) in [
        (include_str!("../src/api.rs"), "fn stream_wait_event"),
        (
            include_str!("../src/fence/event_fence.rs"),
            "pub fn wait_async",
        ),
    ] {
        let doc = doc_of(source, item);
        assert!(
            doc.contains("HIP") && doc.contains("destroy") && doc.contains("waits on the host"),
            "`{item}` does not say when it holds the host: {doc}"
        );
    }
}
