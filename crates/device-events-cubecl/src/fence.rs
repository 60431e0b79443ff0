//! The fence behind a CubeCL server's `flush` and `sync`.

use cubecl_runtime::server::ServerError;
use device_events_core::{AnchorApi, EventFence, EventQuery};

use crate::errors::server_error;

/// A point recorded on a stream, waited for by another stream or the host,
/// with CubeCL's errors. Making one never fails: an error is kept and
/// returned by the first wait. Dropped, it releases its event once.
///
/// ```
/// use device_events_core::{OwnedStream, sim::Sim};
/// use device_events_cubecl::CubeFence;
///
/// let (a, b) = (OwnedStream::<Sim>::new()?, OwnedStream::<Sim>::new()?);
/// let fence = CubeFence::<Sim>::new(a.get());
/// fence.wait_async(b.get())?; // `b` runs after `a`'s work so far
/// fence.wait_sync()?; // the host waits for it
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CubeFence<A: AnchorApi> {
    fence: EventFence<A>,
}

impl<A: AnchorApi> CubeFence<A> {
    /// Record a point on `stream`, after everything queued there so far.
    pub fn new(stream: A::Stream) -> Self {
        Self {
            fence: EventFence::new(stream),
        }
    }

    /// Make `stream` wait for the point on the device; the host runs on.
    ///
    /// # Errors
    ///
    /// The driver's error, as a [`ServerError`].
    pub fn wait_async(&self, stream: A::Stream) -> Result<(), ServerError> {
        self.fence
            .wait_async(stream)
            .map_err(|err| server_error(&err))
    }

    /// Block the host until the device has reached the point.
    ///
    /// # Errors
    ///
    /// The driver's error (the fault the wait uncovered), as a
    /// [`ServerError`].
    pub fn wait_sync(&self) -> Result<(), ServerError> {
        self.fence.wait_sync().map_err(|err| server_error(&err))
    }

    /// Whether the device has passed the point; never waits.
    ///
    /// # Errors
    ///
    /// The driver's error, as a [`ServerError`].
    pub fn is_complete(&self) -> Result<bool, ServerError>
    where
        A: EventQuery,
    {
        self.fence.is_complete().map_err(|err| server_error(&err))
    }
}

impl<A: AnchorApi> std::fmt::Debug for CubeFence<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.fence.fmt(f)
    }
}
