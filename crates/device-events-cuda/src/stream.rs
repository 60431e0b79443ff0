//! Streams as checked handles: a `CudaStream` is a key into this crate's
//! table of live streams, so a copy kept after its stream was destroyed is
//! refused here instead of reaching the driver.

use std::sync::Arc;

use cudarc::driver::sys::{CUcontext, CUstream};
use device_events_core::handles::{Handle, HandleTable};
use device_events_core::{DriverError, ErrorKind};

use crate::context::{Context, retain_current};
use crate::{BACKEND, in_context};

/// A live stream: the driver's handle, its context (retained), and whether
/// this crate made it and so destroys it.
pub(crate) struct Live {
    pub(crate) raw: CUstream,
    pub(crate) ctx: Arc<Context>,
    pub(crate) owned: bool,
}

// SAFETY: `raw` is an opaque driver handle, never dereferenced here, usable
// from any thread through the thread-safe driver API; the table only hands
// it to calls that bind `ctx` first.
unsafe impl Send for Live {}
// SAFETY: as for `Send`; `&Live` gives only copies of the handle.
unsafe impl Sync for Live {}

pub(crate) static STREAMS: HandleTable<Live> = HandleTable::new();

/// A CUDA stream: a checked handle into this crate's table of live streams.
///
/// `Copy`, as [`EventApi`](device_events_core::EventApi) requires. Once
/// [`Cuda::stream_destroy`](crate::Cuda) has run on it, every copy is
/// refused with an [`ErrorKind::InvalidHandle`] error before any driver
/// call, so no safe code can hand the driver a freed stream. The stream's
/// primary context is retained while it lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CudaStream {
    pub(crate) handle: Handle,
}

impl CudaStream {
    /// Admit a stream made elsewhere (by cudarc, or your runtime), or the
    /// null, legacy (`CU_STREAM_LEGACY`) or per-thread
    /// (`CU_STREAM_PER_THREAD`) stream. [`Cuda::stream_destroy`](crate::Cuda)
    /// on the result forgets it and leaves the stream itself to its owner.
    ///
    /// # Safety
    ///
    /// `ctx` is a live primary context and `raw` a live stream of it (or
    /// one of the special streams), and `raw` stays live until
    /// `Cuda::stream_destroy` has run on the returned handle.
    ///
    /// # Errors
    ///
    /// When the driver is missing or `ctx` is not a primary context.
    pub unsafe fn from_raw(raw: CUstream, ctx: CUcontext) -> Result<Self, DriverError> {
        let ctx = in_context(ctx, || retain_current("CudaStream::from_raw"))?;
        Ok(Self::admit(Live {
            raw,
            ctx,
            owned: false,
        }))
    }

    pub(crate) fn admit(live: Live) -> Self {
        Self {
            handle: STREAMS.insert(live),
        }
    }

    /// Run `f` with the raw stream, for calls this crate does not wrap (a
    /// launch, a memset); the stream cannot be destroyed meanwhile.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidHandle`] when the stream was destroyed.
    pub fn with_raw<R>(self, f: impl FnOnce(CUstream) -> R) -> Result<R, DriverError> {
        self.live("CudaStream::with_raw", |live| f(live.raw))
    }

    /// The stream's context, while the stream lives.
    pub fn context(self) -> Option<CUcontext> {
        STREAMS.with(self.handle, |live| live.ctx.raw)
    }

    /// Run `f` on the live stream; refuse a stream that is not live.
    pub(crate) fn live<R>(
        self,
        call: &'static str,
        f: impl FnOnce(&Live) -> R,
    ) -> Result<R, DriverError> {
        STREAMS.with(self.handle, f).ok_or_else(|| dead(call))
    }
}

/// The error for a stream that is not live.
pub(crate) fn dead(call: &'static str) -> DriverError {
    DriverError::refused(
        BACKEND,
        call,
        ErrorKind::InvalidHandle,
        "the stream was destroyed (or never admitted); refused before the driver",
    )
}
