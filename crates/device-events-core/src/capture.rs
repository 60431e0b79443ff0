//! Graph-capture interaction modes, as CUDA defines them and HIP mirrors.
//!
//! While any thread captures a graph in the default GLOBAL mode, the driver
//! refuses queries and synchronizations from other threads in GLOBAL mode
//! and invalidates that capture. The library's queries and waits are on no
//! capture's behalf, so they run in RELAXED mode: for good on the library's
//! own threads, and around each call on a caller's, whose mode is restored.
//! A backend gives the exchange call; this is the rest, written once.

use std::cell::Cell;
use std::thread::LocalKey;

use crate::driver::DriverError;

/// `CU_STREAM_CAPTURE_MODE_RELAXED`, `hipStreamCaptureModeRelaxed`.
const RELAXED: i32 = 2;

/// A backend's capture modes: its exchange call
/// (`cuThreadExchangeStreamCaptureMode`, `hipThreadExchangeStreamCaptureMode`)
/// and a thread-local flag of its own for "relaxed for good".
///
/// ```
/// use std::cell::Cell;
/// use device_events_core::CaptureModes;
///
/// thread_local! { static OWN: Cell<bool> = const { Cell::new(false) }; }
/// // A runtime without the call: every query runs in the thread's mode.
/// static MODES: CaptureModes = CaptureModes::new("sim", &OWN, |_| Ok(false));
/// assert_eq!(MODES.relaxed(|| Ok::<_, device_events_core::DriverError>(7))?, 7);
/// # Ok::<(), device_events_core::DriverError>(())
/// ```
pub struct CaptureModes {
    backend: &'static str,
    own: &'static LocalKey<Cell<bool>>,
    /// Swap the calling thread's mode with `*mode`: `Ok(false)` where the
    /// driver has no such call.
    exchange: fn(&mut i32) -> Result<bool, DriverError>,
}

impl CaptureModes {
    /// The modes of `backend`, exchanged by `exchange`, with `own` marking
    /// the library's threads.
    pub const fn new(
        backend: &'static str,
        own: &'static LocalKey<Cell<bool>>,
        exchange: fn(&mut i32) -> Result<bool, DriverError>,
    ) -> Self {
        Self {
            backend,
            own,
            exchange,
        }
    }

    /// Swap; whether the driver did. A refusal is logged: the call goes on
    /// in the thread's own mode.
    fn swap(&self, mode: &mut i32) -> bool {
        (self.exchange)(mode)
            .inspect_err(|err| log::warn!("{}: capture mode unchanged: {err}", self.backend))
            .unwrap_or(false)
    }

    /// Make the calling thread, one of the library's own, relaxed for good.
    pub fn own_thread(&self) {
        let mut mode = RELAXED;
        if !self.own.get() && self.swap(&mut mode) {
            self.own.set(true);
        }
    }

    /// Run `call`, a query or a wait, in relaxed mode, then give the thread
    /// its own mode back.
    ///
    /// # Errors
    ///
    /// `call`'s.
    pub fn relaxed<T>(
        &self,
        call: impl FnOnce() -> Result<T, DriverError>,
    ) -> Result<T, DriverError> {
        if self.own.get() {
            return call();
        }
        let mut mode = RELAXED;
        if !self.swap(&mut mode) {
            return call();
        }
        let out = call();
        // A refusal to restore is logged by `swap`.
        self.swap(&mut mode);
        out
    }
}
