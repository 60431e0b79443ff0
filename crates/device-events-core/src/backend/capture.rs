//! Graph-capture interaction modes, as CUDA defines them and HIP mirrors.
//!
//! While any thread captures a graph in the default GLOBAL mode, the driver
//! refuses queries and synchronizations from other threads in GLOBAL mode
//! and invalidates that capture. The library's queries and waits are on no
//! capture's behalf, so they run in RELAXED mode: for good on the library's
//! own threads, and around each call on a caller's, whose mode is restored.
//! A backend gives the exchange call ([`RawApi::exchange_capture_mode`]);
//! this is the rest, written once.

use std::any::TypeId;
use std::cell::RefCell;

use crate::backend::raw::{Permit, RawApi};
use crate::driver::{DriverError, Undo};

/// `CU_STREAM_CAPTURE_MODE_RELAXED`, `hipStreamCaptureModeRelaxed`.
const RELAXED: i32 = 2;

thread_local! {
    /// The backends this thread, one of the library's own, is relaxed for.
    static OWN: RefCell<Vec<TypeId>> = const { RefCell::new(Vec::new()) };
}

fn is_own<R: RawApi>() -> bool {
    OWN.with_borrow(|own| own.contains(&TypeId::of::<R>()))
}

/// Swap; whether the driver did. A refusal is logged: the call goes on in
/// the thread's own mode.
fn swap<R: RawApi>(mode: &mut i32) -> bool {
    R::exchange_capture_mode(Permit::new(), mode)
        .inspect_err(|err| log::warn!("{}: capture mode unchanged: {err}", R::BACKEND))
        .unwrap_or(false)
}

/// Make the calling thread, one of the library's own, relaxed for good.
pub(crate) fn own_thread<R: RawApi>() {
    let mut mode = RELAXED;
    if !is_own::<R>() && swap::<R>(&mut mode) {
        OWN.with_borrow_mut(|own| own.push(TypeId::of::<R>()));
    }
}

/// Run `call`, a query or a wait, in relaxed mode, then give the thread its
/// own mode back.
pub(crate) fn relaxed<R: RawApi, T>(
    call: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    if is_own::<R>() {
        return call();
    }
    let mut mode = RELAXED;
    if !swap::<R>(&mut mode) {
        return call();
    }
    // Given back however `call` ends, unwinding included. A refusal to
    // restore is logged by `swap`.
    let _restoring = Undo(Some(move || swap::<R>(&mut mode)));
    call()
}
