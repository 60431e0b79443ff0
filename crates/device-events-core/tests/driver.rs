//! The conversions and binding rule every backend shares.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::cell::Cell;

use device_events_core::backend::with_bound;
use device_events_core::sim::Sim;
use device_events_core::{DriverError, ErrorKind, OwnedStream};
use support::{logged, setup};

#[test]
fn a_call_that_succeeded_is_reported_so_when_restoring_fails() {
    let _sim = setup();
    let bound = Cell::new(1);
    let outcome = with_bound(
        "demo",
        7,
        || Ok(Some(bound.get())),
        |v| {
            bound.set(v);
            Ok(())
        },
        |_| {
            Err(DriverError::refused(
                "demo",
                "restore",
                ErrorKind::Other,
                "refused",
            ))
        },
        || Ok("released"),
    );
    assert_eq!(
        outcome,
        Ok("released"),
        "the release is not reported as failed"
    );
    assert!(logged(&[
        "demo",
        "the call succeeded",
        "could not be restored"
    ]));
}

#[test]
fn statuses_users_meet_have_a_class() {
    for (status, kind) in [
        (101, ErrorKind::NoDevice),
        (3, ErrorKind::Unavailable),
        (4, ErrorKind::Unavailable),
        (46, ErrorKind::Unavailable),
        (999, ErrorKind::DevicePoisoned),
        (400, ErrorKind::InvalidHandle),
        (709, ErrorKind::InvalidHandle),
    ] {
        assert_eq!(ErrorKind::of_status(status), kind, "{status}");
    }
}

#[test]
fn an_owned_stream_is_destroyed_once_when_dropped() {
    let _sim = setup();
    let stream = OwnedStream::<Sim>::new().unwrap();
    assert_eq!(Sim::counts().live_streams, 1);
    drop(stream);
    let counts = Sim::counts();
    assert_eq!((counts.live_streams, counts.bad_releases), (0, 0));
}

#[test]
fn a_call_that_panics_still_gives_the_caller_its_binding_back() {
    let bound = Cell::new(1);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        with_bound(
            "demo",
            7,
            || Ok(Some(bound.get())),
            |v| {
                bound.set(v);
                Ok(())
            },
            |previous| {
                bound.set(previous.unwrap_or(0));
                Ok(())
            },
            || -> Result<(), DriverError> { panic!("the caller's closure panics") },
        )
    }));
    assert!(unwound.is_err(), "the panic reaches the caller");
    assert_eq!(bound.get(), 1, "the caller's binding is back");
}
