//! Streams as checked handles: a key into the backend's table of live
//! streams, so a copy kept after its stream was destroyed is refused
//! before it reaches the driver.

use std::marker::PhantomData;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::binding::{dead, on_stream};
use crate::backend::handle_table::HandleTable;
use crate::backend::raw::{CheckedStream, Live, Permit, RawApi, State};
use crate::driver::{CaptureStatus, DriverError, ErrorKind};

impl<R: RawApi> State<R> {
    /// No streams yet; events spin while they wait.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Self {
            streams: HandleTable::new(),
            blocking_sync: AtomicBool::new(false),
            idle: Mutex::new(Vec::new()),
            words: Mutex::new(Vec::new()),
            registered: AtomicBool::new(false),
        }
    }

    /// Whether events made from now on wait by sleeping rather than
    /// spinning: a sleeping wait costs no core and wakes tens of
    /// microseconds late. Events made before keep their mode.
    pub fn set_blocking_sync(&self, blocking: bool) {
        if self.blocking_sync.swap(blocking, Ordering::Relaxed) != blocking {
            // Idle events wait the old way.
            self.release_idle_events();
        }
    }

    /// How many streams are live (made or admitted, not yet destroyed).
    pub fn live_streams(&self) -> usize {
        self.streams.len()
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
        on_stream(self, "capture status", |live| {
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
        on_stream(self, call, |live| f(&live.raw))
    }
}
