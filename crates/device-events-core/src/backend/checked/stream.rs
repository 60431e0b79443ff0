//! Streams as checked handles: a key into the backend's table of live
//! streams, so a copy kept after its stream was destroyed is refused
//! before it reaches the driver.

use std::fmt;
use std::marker::PhantomData;

use super::binding::{bound, dead};
use crate::backend::handle_table::Handle;
use crate::backend::raw::{Permit, RawApi};
use crate::driver::{CaptureStatus, DriverError, ErrorKind};

/// A live stream: the driver's, its context (held), and whether the
/// backend made it and so destroys it.
pub(crate) struct Live<R: RawApi> {
    pub(crate) raw: R::Stream,
    pub(crate) held: R::Held,
    pub(crate) owned: bool,
}

/// A stream: a checked handle into its backend's table of live streams.
///
/// `Copy`, as [`EventApi`](crate::EventApi) requires. Once `stream_destroy` has run on it,
/// every copy is refused with [`ErrorKind::InvalidHandle`](crate::ErrorKind::InvalidHandle) before any
/// driver call; its context is held while it lives.
pub struct CheckedStream<R: RawApi> {
    pub(crate) handle: Handle,
    pub(crate) backend: PhantomData<fn() -> R>,
}

impl<R: RawApi> Clone for CheckedStream<R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R: RawApi> Copy for CheckedStream<R> {}

impl<R: RawApi> PartialEq for CheckedStream<R> {
    fn eq(&self, other: &Self) -> bool {
        self.handle == other.handle
    }
}

impl<R: RawApi> Eq for CheckedStream<R> {}

impl<R: RawApi> std::hash::Hash for CheckedStream<R> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.handle.hash(state);
    }
}

impl<R: RawApi> fmt::Debug for CheckedStream<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckedStream")
            .field("backend", &R::BACKEND)
            .field("handle", &self.handle)
            .finish()
    }
}

impl<R: RawApi> CheckedStream<R> {
    pub(super) fn admit(raw: R::Stream, held: R::Held, owned: bool) -> Self {
        Self {
            handle: R::state().streams.insert(Live { raw, held, owned }),
            backend: PhantomData,
        }
    }

    /// Admit a stream made elsewhere, of the context `held`. Destroying the
    /// handle forgets it and leaves the stream itself to its owner. Raw
    /// streams come only from their backend's own (unsafe) admission call.
    pub fn admit_foreign(raw: R::Stream, held: R::Held) -> Self {
        Self::admit(raw, held, false)
    }

    /// Run `f` with the driver's handle, for calls this crate does not wrap
    /// (a launch, a memset); the stream cannot be destroyed meanwhile.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidHandle`] when the stream was destroyed.
    pub fn with_raw<T>(self, f: impl FnOnce(R::Handle) -> T) -> Result<T, DriverError> {
        self.with_live("with_raw", |raw, _| f(R::stream_handle(raw)))
    }

    /// Run `f` on the live stream and its held context, unbound.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidHandle`] when the stream was destroyed.
    pub fn with_live<T>(
        self,
        call: &'static str,
        f: impl FnOnce(&R::Stream, &R::Held) -> T,
    ) -> Result<T, DriverError> {
        R::state()
            .streams
            .with_noted(self.handle, |live| f(&live.raw, &live.held))
            .ok_or_else(|| dead::<R>(call, "stream"))
    }

    /// The stream's context, held, while the stream lives.
    pub(super) fn held(self, call: &'static str) -> Result<R::Held, DriverError> {
        // Not noted, as `with_live` is: this closure destroys nothing.
        R::state()
            .streams
            .with(self.handle, |live| live.held.clone())
            .ok_or_else(|| dead::<R>(call, "stream"))
    }

    /// The stream's context, while the stream lives.
    pub fn context(self) -> Option<R::Context> {
        R::state()
            .streams
            .with(self.handle, |live| R::context_of(&live.held))
    }

    /// Whether the stream is capturing a graph: screen a stream with this
    /// before profiling on it, since records there are graph nodes, not
    /// timestamps.
    ///
    /// # Errors
    ///
    /// When the stream is not live, the driver cannot say, or refuses.
    pub fn capture_status(self) -> Result<CaptureStatus, DriverError> {
        self.on_live("capture status", |live| {
            R::capture_status(Permit::new(), &live.raw)
        })?
        .ok_or_else(|| {
            DriverError::refused(
                R::BACKEND,
                "capture status",
                ErrorKind::Other,
                "this driver cannot tell whether a stream captures",
            )
        })
    }

    /// Run `f` on the live stream with its context bound.
    pub(super) fn on<T>(
        self,
        call: &'static str,
        f: impl FnOnce(&R::Stream) -> Result<T, DriverError>,
    ) -> Result<T, DriverError> {
        self.on_live(call, |live| f(&live.raw))
    }

    /// Run `f` on the live stream, its context bound.
    pub(super) fn on_live<T>(
        self,
        call: &'static str,
        f: impl FnOnce(&Live<R>) -> Result<T, DriverError>,
    ) -> Result<T, DriverError> {
        R::state()
            .streams
            .with(self.handle, |live| bound::<R, _>(&live.held, || f(live)))
            .ok_or_else(|| dead::<R>(call, "stream"))?
    }
}
