//! How every checked call runs: on a live handle, with its context bound
//! and the thread's own given back after, or refused before the driver.

use std::cell::Cell;

use crate::backend::raw::{Permit, RawApi};
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

#[inline]
fn binding<R: RawApi, T>(
    held: &R::Held,
    call: impl FnOnce() -> Result<T, DriverError>,
    unbound_ok: bool,
) -> Result<T, DriverError> {
    let permit = Permit::new();
    // The usual case, the context current already, asked once and called
    // at once; anything else (another context, none, or the driver's
    // refusal to say) goes the whole way.
    let current = R::current(permit);
    if let Ok(Some(current)) = current
        && current == R::context_of(held)
    {
        return call();
    }
    let restore = Cell::new(None);
    bound_then(
        R::BACKEND,
        R::context_of(held),
        (
            || current,
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
