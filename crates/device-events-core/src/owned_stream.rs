//! A stream that destroys itself.

use crate::EventApi;
use crate::driver::DriverError;

/// A non-blocking stream, destroyed exactly once when dropped, on every
/// path: the RAII form of
/// [`stream_create_non_blocking`](EventApi::stream_create_non_blocking) and
/// [`stream_destroy`](EventApi::stream_destroy).
///
/// A failed release is logged under the backend's name: a destructor has
/// nowhere to report. Copies of the handle taken with [`get`](Self::get)
/// stay safe to use afterwards: every backend refuses a destroyed stream
/// before it reaches the driver.
///
/// ```
/// use device_events_core::{EventFence, OwnedStream, sim::Sim};
///
/// let stream = OwnedStream::<Sim>::new()?;
/// EventFence::<Sim>::new(stream.get()).wait_sync()?;
/// // Dropped here, on this path or an early `?`, and never twice.
/// # Ok::<(), device_events_core::DriverError>(())
/// ```
pub struct OwnedStream<A: EventApi> {
    raw: A::Stream,
}

impl<A: EventApi> OwnedStream<A> {
    /// Create a stream in the calling thread's current context (device).
    ///
    /// # Errors
    ///
    /// The driver's refusal of the stream.
    pub fn new() -> Result<Self, DriverError> {
        A::stream_create_non_blocking().map(|raw| Self { raw })
    }

    /// The stream, to pass to fences, windows and the backend's calls.
    pub fn get(&self) -> A::Stream {
        self.raw
    }
}

impl<A: EventApi> Drop for OwnedStream<A> {
    fn drop(&mut self) {
        if let Err(err) = A::stream_destroy(self.raw) {
            log::error!(
                "{}: the driver refused to release a stream: {err}",
                A::BACKEND
            );
        }
    }
}

impl<A: EventApi> std::fmt::Debug for OwnedStream<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedStream")
            .field("backend", &A::BACKEND)
            .finish_non_exhaustive()
    }
}
