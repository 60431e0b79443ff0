//! The fence behind a CubeCL server's `flush` and `sync`.

use cubecl_runtime::server::ServerError;
use device_events_core::backend::{EventQuery, FenceApi};
use device_events_core::{DriverError, ErrorKind, EventFence};

use crate::StreamOf;
use crate::errors::server_error;

/// A point recorded on a stream, waited for by another stream or the host,
/// with CubeCL's errors and its methods, which consume the fence. Making
/// one never fails: an error is kept and returned by the wait. Dropped, it
/// releases its event once.
///
/// As CubeCL's own fence, it falls back where the driver refuses: a record
/// refused synchronizes the stream there and then, and a stream wait
/// refused waits on the host, each keeping every guarantee a fence gives.
/// Only for an error that leaves the device and any capture as they were:
/// a record refused out of resources or for a reason this crate does not
/// class (the synchronize is refused before the driver on a capturing
/// stream), a stream wait refused out of resources (a host wait would
/// leave a capture's graph without the ordering; into a capturing stream
/// it is an error instead). A fault that poisons
/// the device is returned as it is, and a stale handle would be refused
/// again.
///
/// With the `cubecl-server` feature it is a `drop_queue::Fence`, so a
/// backend writes `type Fence = CubeFence<Cuda>`.
///
/// ```
/// use device_events_core::{OwnedStream, sim::Sim};
/// use device_events_cubecl::CubeFence;
///
/// let (a, b) = (OwnedStream::<Sim>::new()?, OwnedStream::<Sim>::new()?);
/// CubeFence::<Sim>::new(a.get()).wait_async(b.get())?; // `b` runs after `a`'s work so far
/// CubeFence::<Sim>::new(a.get()).wait_sync()?; // the host waits for it
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CubeFence<A: FenceApi> {
    point: Point<A>,
}

enum Point<A: FenceApi> {
    Recorded(EventFence<A>),
    /// The record was refused, and the stream synchronized instead.
    Reached,
    /// Boxed: CubeCL's error is several words, and a fence is made and
    /// moved on every flush, where it is rare.
    Failed(Box<ServerError>),
}

impl<A: FenceApi> CubeFence<A> {
    /// Record a point on `stream`, after everything queued there so far; if
    /// the driver refuses, synchronize `stream` instead where that is sound.
    /// A raw stream never admitted, or forgotten, is an error its waits
    /// return.
    ///
    /// On CubeCL's contract, as [`CubeProfiler`](crate::CubeProfiler)'s:
    /// the stream's context is current on the calling thread (a CubeCL
    /// server's every command makes it so), so on CUDA the record skips
    /// asking the driver which context is, and a fence costs its one
    /// record ([`EventFence::new_in_current`]).
    pub fn new(stream: impl StreamOf<A>) -> Self {
        let stream = match stream.stream() {
            Ok(stream) => stream,
            Err(err) => {
                return Self {
                    point: Point::Failed(Box::new(err)),
                };
            }
        };
        let fence = EventFence::new_in_current(stream);
        if fence.error().is_none() {
            return Self {
                point: Point::Recorded(fence),
            };
        }
        Self::refused(fence, stream)
    }

    /// A fence whose record the driver refused: the stream synchronized
    /// instead where that is sound, else the error. Apart from
    /// [`new`](Self::new), so that a recorded fence is moved once.
    #[cold]
    #[inline(never)]
    fn refused(fence: EventFence<A>, stream: A::Stream) -> Self {
        let point = match fence.error() {
            None => Point::Recorded(fence),
            Some(err) if falls_back(err) => {
                log::warn!(
                    "{}: a fence could not be recorded, synchronizing its stream instead: {err}",
                    A::BACKEND
                );
                match A::stream_synchronize(stream) {
                    Ok(()) => Point::Reached,
                    Err(err) => Point::Failed(Box::new(server_error(&err))),
                }
            }
            Some(err) => Point::Failed(Box::new(server_error(err))),
        };
        Self { point }
    }

    /// Make `stream` wait for the point on the device; the host runs on,
    /// unless the driver refuses the dependency, where the host waits for
    /// the point itself, which orders the work just the same.
    ///
    /// # Errors
    ///
    /// The driver's error, as a [`ServerError`]: a poisoning fault is
    /// [`ServerError::DevicePoisoned`].
    pub fn wait_async(self, stream: impl StreamOf<A>) -> Result<(), ServerError> {
        let stream = stream.stream()?;
        match self.point {
            Point::Recorded(fence) => match fence.wait_async(stream) {
                Ok(()) => Ok(()),
                // Out of resources only, and never into a capture: a host
                // wait would leave the captured graph without the
                // ordering (a refusal for any other reason may come of a
                // capture itself).
                Err(err) if err.kind() == ErrorKind::OutOfResources => {
                    match A::stream_captures(stream) {
                        Ok(false) => {}
                        Ok(true) => {
                            log::warn!(
                                "{}: a capturing stream could not be made to wait on a fence, \
                                 and a host wait would leave its graph without the ordering: {err}",
                                A::BACKEND
                            );
                            return Err(server_error(&err));
                        }
                        Err(asked) => {
                            log::warn!(
                                "{}: a stream could not be made to wait on a fence ({err}), \
                                 nor asked whether it captures: {asked}",
                                A::BACKEND
                            );
                            return Err(server_error(&err));
                        }
                    }
                    log::warn!(
                        "{}: a stream could not be made to wait on a fence, waiting on the host: {err}",
                        A::BACKEND
                    );
                    fence.wait_sync().map_err(|err| server_error(&err))
                }
                Err(err) => Err(server_error(&err)),
            },
            Point::Reached => Ok(()),
            Point::Failed(err) => Err(*err),
        }
    }

    /// Block the host until the device has reached the point.
    ///
    /// # Errors
    ///
    /// The driver's error (the fault the wait uncovered), as a
    /// [`ServerError`].
    pub fn wait_sync(self) -> Result<(), ServerError> {
        match self.point {
            Point::Recorded(fence) => fence.wait_sync().map_err(|err| server_error(&err)),
            Point::Reached => Ok(()),
            Point::Failed(err) => Err(*err),
        }
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
        match &self.point {
            Point::Recorded(fence) => fence.is_complete().map_err(|err| server_error(&err)),
            Point::Reached => Ok(true),
            Point::Failed(err) => Err(ServerError::clone(err)),
        }
    }
}

/// Whether CubeCL's fallback is sound after `err`: the device is sound, the
/// handles live, and no capture is in the way.
fn falls_back(err: &DriverError) -> bool {
    matches!(err.kind(), ErrorKind::OutOfResources | ErrorKind::Other)
}

#[cfg(feature = "cubecl-server")]
impl<A: FenceApi> cubecl_server::memory_management::drop_queue::Fence for CubeFence<A> {
    fn wait(self) -> Result<(), ServerError> {
        self.wait_sync()
    }
}

impl<A: FenceApi> std::fmt::Debug for CubeFence<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.point {
            Point::Recorded(fence) => fence.fmt(f),
            Point::Reached => f.write_str("CubeFence(reached)"),
            Point::Failed(err) => write!(f, "CubeFence(failed: {err})"),
        }
    }
}
