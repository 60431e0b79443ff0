//! Capture interaction modes, as HIP mirrors CUDA's: while any thread
//! captures a graph in the default GLOBAL mode, queries and
//! synchronizations from other threads in GLOBAL mode are refused
//! (`hipErrorStreamCaptureUnsupported`) and invalidate that capture. This
//! crate's queries and waits are on no capture's behalf, so they run in
//! RELAXED mode: for good on the library's own threads, and around each
//! call on a caller's, whose mode is restored. A runtime without
//! `hipThreadExchangeStreamCaptureMode` (before ROCm 5.0) is left as it is.

use std::cell::Cell;
use std::ffi::c_int;

use device_events_core::DriverError;

use device_events_core::EventApi;

use crate::{Hip, check, runtime};

/// `hipStreamCaptureModeRelaxed`.
const RELAXED: c_int = 2;

thread_local! {
    /// This thread is the library's, and relaxed for good.
    static OWN: Cell<bool> = const { Cell::new(false) };
}

/// Swap this thread's mode with `mode`; whether the runtime did (a
/// refusal is logged: the call goes on in the thread's own mode).
fn exchange(mode: &mut c_int) -> bool {
    let Ok(rt) = runtime::loaded() else {
        return false;
    };
    let Some(exchange) = rt.exchange_capture_mode else {
        return false;
    };
    // SAFETY: `mode` is valid for a read and a write.
    let status = unsafe { exchange(mode) };
    check("hipThreadExchangeStreamCaptureMode", status)
        .inspect_err(|err| log::warn!("{}: capture mode unchanged: {err}", Hip::BACKEND))
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
