//! Capture interaction modes. While any thread captures a graph in the
//! default GLOBAL mode, the driver refuses queries and synchronizations
//! from other threads in GLOBAL mode (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`)
//! and invalidates that capture. This crate's queries and waits are on no
//! capture's behalf, so they run in RELAXED mode: for good on the library's
//! own threads, and around each call on a caller's, whose mode is restored.

use std::cell::Cell;
use std::ffi::c_uint;

use device_events_core::DriverError;

use crate::{BACKEND, api, check};

/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
const RELAXED: c_uint = 2;

thread_local! {
    /// This thread is the library's, and relaxed for good.
    static OWN: Cell<bool> = const { Cell::new(false) };
}

/// Swap this thread's mode with `mode`; whether the driver did (a refusal
/// is logged: the call goes on in the thread's own mode).
fn exchange(mode: &mut c_uint) -> bool {
    const CALL: &str = "cuThreadExchangeStreamCaptureMode";
    let Ok(api) = api() else { return false };
    // SAFETY: `mode` is valid for a read and a write.
    let status = unsafe { (api.cuThreadExchangeStreamCaptureMode)(mode) };
    check(CALL, status)
        .inspect_err(|err| log::warn!("{BACKEND}: capture mode unchanged: {err}"))
        .is_ok()
}

/// Make the calling thread, one of the library's own, relaxed for good.
pub(crate) fn own_thread() {
    let mut mode = RELAXED;
    if !OWN.get() && exchange(&mut mode) {
        OWN.set(true);
    }
}

/// Run `call`, a query or wait, in relaxed mode, then give the thread its
/// own mode back.
pub(crate) fn relaxed<T>(call: impl FnOnce() -> Result<T, DriverError>) -> Result<T, DriverError> {
    if OWN.get() {
        return call();
    }
    let mut mode = RELAXED;
    if !exchange(&mut mode) {
        return call();
    }
    let out = call();
    // A refusal to restore is logged by `exchange`.
    exchange(&mut mode);
    out
}
