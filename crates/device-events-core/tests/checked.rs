//! The checked layer over a raw backend: what every backend's calls are
//! spared, on the counting backend. A fault is a driver call on a handle
//! that is not live or with a context bound that is not the handle's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Mutex, MutexGuard, PoisonError};

use device_events_core::backend::EventQuery;
use device_events_core::tally::Tally;
use device_events_core::{ErrorKind, EventApi};

/// The counts are process-wide: one test at a time.
fn exclusive() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(PoisonError::into_inner)
}

#[test]
fn a_destroyed_stream_is_refused_before_the_driver() {
    let _one = exclusive();
    Tally::set_current(Some(1));
    let s = Tally::stream_create_non_blocking().unwrap();
    let mut event = Tally::event_create().unwrap();
    Tally::stream_destroy(s).unwrap();
    let (syncs, records, destroys) = (
        Tally::calls("synchronize_stream"),
        Tally::calls("record_event"),
        Tally::calls("destroy_stream"),
    );
    for err in [
        Tally::stream_synchronize(s).unwrap_err(),
        Tally::event_record(&event, s).unwrap_err(),
        Tally::stream_wait_event(s, &event).unwrap_err(),
        Tally::stream_destroy(s).unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidHandle, "{err}");
    }
    assert_eq!(
        (
            Tally::calls("synchronize_stream"),
            Tally::calls("record_event"),
            Tally::calls("destroy_stream")
        ),
        (syncs, records, destroys)
    );
    Tally::event_destroy(&mut event).unwrap();
    assert_eq!(Tally::faults(), 0);
}

#[test]
fn an_event_is_destroyed_once() {
    let _one = exclusive();
    Tally::set_current(Some(1));
    let mut event = Tally::event_create().unwrap();
    let destroys = Tally::calls("destroy_event");
    Tally::event_destroy(&mut event).unwrap();
    let again = Tally::event_destroy(&mut event).unwrap_err();
    assert_eq!(again.kind(), ErrorKind::InvalidHandle);
    assert!(Tally::event_query(&event).is_err());
    assert_eq!(Tally::calls("destroy_event"), destroys + 1);
    assert_eq!(Tally::faults(), 0);
}

#[test]
fn a_call_binds_the_handles_context_and_gives_the_caller_its_own_back() {
    let _one = exclusive();
    Tally::set_current(Some(1));
    let s = Tally::stream_create_non_blocking().unwrap();
    let mut event = Tally::event_create().unwrap();
    Tally::event_record(&event, s).unwrap();
    let faults = Tally::faults();
    for current in [Some(2), None] {
        Tally::set_current(current);
        Tally::stream_synchronize(s).unwrap();
        Tally::event_wait(&event).unwrap();
        assert!(Tally::event_query(&event).unwrap());
        Tally::event_elapsed(&event, &event).unwrap();
        assert_eq!(
            device_events_core::backend::CheckedStream::context(s),
            Some(1),
            "the stream keeps its context"
        );
        // What the thread had current is current again.
        Tally::set_current(current);
    }
    Tally::set_current(Some(2));
    Tally::event_destroy(&mut event).unwrap();
    Tally::stream_destroy(s).unwrap();
    assert_eq!(Tally::faults(), faults, "every call ran in context 1");
}

#[test]
fn no_binding_when_the_handles_context_is_current() {
    let _one = exclusive();
    Tally::set_current(Some(1));
    let binds = Tally::calls("bind");
    let s = Tally::stream_create_non_blocking().unwrap();
    let mut event = Tally::event_create().unwrap();
    Tally::event_record(&event, s).unwrap();
    Tally::event_wait(&event).unwrap();
    Tally::stream_synchronize(s).unwrap();
    Tally::event_destroy(&mut event).unwrap();
    Tally::stream_destroy(s).unwrap();
    assert_eq!(Tally::calls("bind"), binds);
}

#[test]
fn recording_on_another_contexts_stream_is_refused_before_the_driver() {
    let _one = exclusive();
    Tally::set_current(Some(1));
    let s = Tally::stream_create_non_blocking().unwrap();
    Tally::set_current(Some(2));
    let mut event = Tally::event_create().unwrap();
    let records = Tally::calls("record_event");
    let err = Tally::event_record(&event, s).unwrap_err();
    assert!(err.to_string().contains("different contexts"), "{err}");
    assert_eq!(Tally::calls("record_event"), records);
    // A wait may cross contexts, as CUDA and HIP allow.
    Tally::stream_wait_event(s, &event).unwrap();
    Tally::event_destroy(&mut event).unwrap();
    Tally::stream_destroy(s).unwrap();
    assert_eq!(Tally::faults(), 0);
}

#[test]
fn a_panic_in_a_closure_run_in_a_streams_context_restores_the_callers() {
    use device_events_core::backend::ThreadApi;
    let _one = exclusive();
    Tally::set_current(Some(1));
    let s = Tally::stream_create_non_blocking().unwrap();
    Tally::set_current(Some(2));
    let unwound = std::panic::catch_unwind(|| {
        Tally::in_context_of(s, || {
            assert_eq!(Tally::current(), Some(1), "the stream's context, inside");
            panic!("the user's closure panics")
        })
    });
    assert!(unwound.is_err(), "the panic reaches the caller");
    assert_eq!(Tally::current(), Some(2), "the caller's context is back");
    Tally::stream_destroy(s).unwrap();
}

#[test]
fn destroying_a_stream_inside_its_own_with_raw_is_refused_not_a_deadlock() {
    let _one = exclusive();
    Tally::set_current(Some(1));
    let s = Tally::stream_create_non_blocking().unwrap();
    let (sent, answer) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let inside = s.with_raw(|_| {
            // A nested use of the same stream is fine.
            Tally::stream_synchronize(s).unwrap();
            Tally::stream_destroy(s).map_err(|e| e.to_string())
        });
        let _ = sent.send(inside);
    });
    let inside = answer
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("no deadlock");
    let why = inside.unwrap().expect_err("refused while in use");
    assert!(why.contains("inside with_raw"), "{why}");
    Tally::stream_destroy(s).unwrap();
    assert!(Tally::stream_synchronize(s).is_err(), "destroyed after");
    assert_eq!(Tally::faults(), 0);
}

#[test]
fn an_event_dropped_without_a_destroy_releases_itself_once() {
    let _one = exclusive();
    Tally::set_current(Some(1));
    let destroys = Tally::calls("destroy_event");
    drop(Tally::event_create().unwrap());
    assert_eq!(
        Tally::calls("destroy_event"),
        destroys + 1,
        "released on drop"
    );
    let mut event = Tally::event_create().unwrap();
    Tally::event_destroy(&mut event).unwrap();
    drop(event);
    assert_eq!(
        Tally::calls("destroy_event"),
        destroys + 2,
        "not again on drop"
    );
    assert_eq!(Tally::faults(), 0);
}

/// A record on the caller's word that the stream's context is current
/// asks the driver nothing else; an unvouched one asks which context is
/// current first.
#[test]
fn a_record_on_the_callers_word_asks_no_current_context() {
    use device_events_core::backend::ThreadApi;
    let _one = exclusive();
    Tally::set_current(Some(1));
    let s = Tally::stream_create_non_blocking().unwrap();
    let event = Tally::event_create().unwrap();
    let (asked, faults) = (Tally::calls("current"), Tally::faults());
    Tally::event_record_in_current(&event, s).unwrap();
    assert_eq!(Tally::calls("current"), asked);
    Tally::event_record(&event, s).unwrap();
    assert_eq!(Tally::calls("current"), asked + 1);
    assert_eq!(Tally::faults(), faults);
    drop(event);
    Tally::stream_destroy(s).unwrap();
}

/// The caller's word covers the context, never a mismatch: an event of
/// another context is refused before the driver, as without it.
#[test]
fn a_record_on_the_callers_word_still_refuses_an_event_of_another_context() {
    use device_events_core::backend::ThreadApi;
    let _one = exclusive();
    Tally::set_current(Some(1));
    let s = Tally::stream_create_non_blocking().unwrap();
    Tally::set_current(Some(2));
    let event = Tally::event_create().unwrap();
    Tally::set_current(Some(1));
    let records = Tally::calls("record_event");
    let err = Tally::event_record_in_current(&event, s).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidHandle, "{err}");
    assert_eq!(Tally::calls("record_event"), records);
    drop(event);
    Tally::stream_destroy(s).unwrap();
}

/// A destroyed stream is refused on the caller's word too.
#[test]
fn a_record_on_the_callers_word_refuses_a_destroyed_stream() {
    use device_events_core::backend::ThreadApi;
    let _one = exclusive();
    Tally::set_current(Some(1));
    let s = Tally::stream_create_non_blocking().unwrap();
    let event = Tally::event_create().unwrap();
    Tally::stream_destroy(s).unwrap();
    let records = Tally::calls("record_event");
    let err = Tally::event_record_in_current(&event, s).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidHandle, "{err}");
    assert_eq!(Tally::calls("record_event"), records);
}

/// A fence's event is made without timing, the kind the drivers document as
/// fast to record, query and wait on, whether it is the fence's own or a
/// pool's; `event_create`'s, for windows and anchors, with.
#[test]
fn a_fences_event_is_made_without_timing_and_a_windows_with() {
    let _one = exclusive();
    Tally::set_current(Some(1));
    let s = Tally::stream_create_non_blocking().unwrap();
    // None kept from an earlier fence.
    device_events_core::process::release_idle_events();
    let (timed, untimed) = (
        Tally::calls("create_event"),
        Tally::calls("create_event_without_timing"),
    );
    let fence = device_events_core::EventFence::<Tally>::new(s);
    let pool = device_events_core::FencePool::<Tally>::new();
    let pooled = pool.fence(s);
    let event = Tally::event_create().unwrap();
    assert_eq!(Tally::calls("create_event_without_timing"), untimed + 2);
    assert_eq!(Tally::calls("create_event"), timed + 1);
    drop((fence, pooled, pool, event));
    device_events_core::process::release_idle_events();
    Tally::stream_destroy(s).unwrap();
    assert_eq!(Tally::faults(), 0);
}
