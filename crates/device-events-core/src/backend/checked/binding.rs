//! How every checked call runs: on a live handle, with its context bound
//! and the thread's own given back after, or refused before the driver.

use std::cell::Cell;

use crate::backend::raw::{CheckedEvent, CheckedStream, Live, Permit, RawApi};
use crate::driver::{DriverError, ErrorKind, bound_then};

pub(super) fn dead<R: RawApi>(call: &'static str, what: &str) -> DriverError {
    DriverError::refused(
        R::BACKEND,
        call,
        ErrorKind::InvalidHandle,
        format!("the {what} was destroyed (or never admitted); refused before the driver"),
    )
}

/// Run `call` with `held` bound, then give the thread its own context back;
/// refused, with the binding's error, when `held` cannot be bound: every
/// raw call but a release relies on its handle's context being current.
pub(super) fn bound<R: RawApi, T>(
    held: &R::Held,
    call: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    binding::<R, T>(held, call, false)
}

/// As [`bound`], for a release (a destroy, a free): made unbound when the
/// binding fails, since a release must happen whatever the binding does,
/// and the releases take their handle's context from the handle.
pub(super) fn releasing<R: RawApi, T>(
    held: &R::Held,
    call: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    binding::<R, T>(held, call, true)
}

fn binding<R: RawApi, T>(
    held: &R::Held,
    call: impl FnOnce() -> Result<T, DriverError>,
    unbound_ok: bool,
) -> Result<T, DriverError> {
    let permit = Permit::new();
    let restore = Cell::new(None);
    bound_then(
        R::BACKEND,
        R::context_of(held),
        (
            || R::current(permit),
            |_| {
                restore.set(Some(R::bind(permit, held)?));
                Ok(())
            },
            |previous| {
                restore
                    .take()
                    .map_or(Ok(()), |token| R::unbind(permit, token, previous))
            },
        ),
        call,
        unbound_ok,
    )
}

pub(super) fn on_stream<R: RawApi, T>(
    stream: CheckedStream<R>,
    call: &'static str,
    f: impl FnOnce(&Live<R>) -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    R::state()
        .streams
        .with(stream.handle, |live| bound::<R, _>(&live.held, || f(live)))
        .ok_or_else(|| dead::<R>(call, "stream"))?
}

pub(super) fn same_context<R: RawApi>(
    call: &'static str,
    event: &CheckedEvent<R>,
    stream: &R::Held,
) -> Result<(), DriverError> {
    let (event, stream) = (event.context(), R::context_of(stream));
    if event == stream {
        return Ok(());
    }
    Err(DriverError::refused(
        R::BACKEND,
        call,
        ErrorKind::InvalidHandle,
        format!(
            "the event and the stream belong to different contexts (event: {event:?}, stream: \
             {stream:?}); a fence pool's events are of the context current when it made them, \
             a profiler's of its first window's stream"
        ),
    ))
}
