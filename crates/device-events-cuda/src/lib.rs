//! The CUDA backend of device-events: [`EventApi`] over the CUDA driver API,
//! through cudarc's bindings, with `libcuda` loaded at run time.
//!
//! Pick it with `device-events-core`: `EventFence<Cuda>` and
//! `EventProfiler<Cuda>` are the types to use.
//!
//! ```
//! use cudarc::driver::result;
//! use device_events_core::{EventApi, EventFence, EventProfiler};
//! use device_events_cuda::Cuda;
//!
//! // Whatever runtime you use binds a context to the thread; here, by hand.
//! result::init()?;
//! // SAFETY: device 0 exists once `init` succeeded; the primary context is
//! // released by the driver at process exit.
//! unsafe { result::ctx::set_current(result::primary_ctx::retain(result::device::get(0)?)?)? };
//!
//! let (a, b) = (Cuda::stream_create_non_blocking()?, Cuda::stream_create_non_blocking()?);
//! let mut profiler = EventProfiler::<Cuda>::new();
//!
//! let window = profiler.start(a);
//! // ... enqueue work on `a` ...
//! let fence = EventFence::<Cuda>::new(a);
//! fence.wait_async(b)?; // `b` runs after `a`'s work; the host does not block
//! let timing = profiler.stop(a, window)?;
//!
//! let ticks = pollster::block_on(timing.resolve()).expect("the window was read");
//! println!("{:?} on the device", ticks.duration());
//! # drop((fence, profiler));
//! # Cuda::stream_destroy(a)?;
//! # Cuda::stream_destroy(b)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Driver
//!
//! Minimum driver: CUDA 11.0 (R450). The crate resolves only `cuInit`,
//! `cuCtxGetCurrent`, `cuCtxPushCurrent_v2`, `cuCtxPopCurrent_v2`,
//! `cuEventCreate`, `cuEventRecord`, `cuEventSynchronize`,
//! `cuEventElapsedTime`, `cuEventDestroy_v2`, `cuStreamCreate`,
//! `cuStreamWaitEvent`, `cuStreamSynchronize`, `cuStreamDestroy_v2` and
//! `cuStreamIsCapturing`, all present since CUDA 10. It binds cudarc at the
//! CUDA 12.9 level, the newest that still calls `cuEventElapsedTime` rather
//! than the `_v2` only drivers from 12.8 on export, and whose status enum
//! knows the most codes a driver can return.
//!
//! No feature flags: cudarc is used with `driver` and `dynamic-loading` only,
//! so the crate builds with no CUDA toolkit installed.
//!
//! # Graph capture
//!
//! Inside a capture, records and waits are graph nodes, not timestamps. The
//! trait stays as specified, so screen a stream before profiling it:
//!
//! ```
//! # use cudarc::driver::result;
//! # use device_events_core::{CaptureStatus, EventApi, EventProfiler};
//! # use device_events_cuda::Cuda;
//! # result::init()?;
//! # unsafe { result::ctx::set_current(result::primary_ctx::retain(result::device::get(0)?)?)? };
//! # let stream = Cuda::stream_create_non_blocking()?;
//! # let mut profiler = EventProfiler::<Cuda>::new();
//! if Cuda::capture_status(stream)? == CaptureStatus::None {
//!     let window = profiler.start(stream);
//!     // ...
//!     # profiler.abandon(window)?;
//! }
//! # drop(profiler);
//! # Cuda::stream_destroy(stream)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::OnceLock;

use cudarc::driver::result;
use cudarc::driver::sys::{self, CUresult};
use device_events_core::driver::{elapsed_from_ms, with_bound};
use device_events_core::profile::Duration;
use device_events_core::{CaptureStatus, DriverError, ErrorKind, EventApi};

/// The CUDA backend.
#[derive(Debug)]
pub struct Cuda;

/// A CUDA event with timing enabled, and the context it was created in.
#[derive(Debug)]
pub struct CudaEvent {
    raw: sys::CUevent,
    ctx: sys::CUcontext,
}

// SAFETY: `CUevent` and `CUcontext` are opaque handles into the driver, not
// pointers this crate dereferences. The CUDA driver API is thread-safe: an
// event may be recorded, synchronized, timed and destroyed from any host
// thread, given its context is current for the call, which every call here
// arranges by binding `ctx`. The newtype has no interior mutability, and
// `event_destroy` takes it by `&mut`, so no call races its release.
unsafe impl Send for CudaEvent {}
// SAFETY: as for `Send`: every method takes `&self` to pass the handle to a
// thread-safe driver call; nothing is mutated through a shared reference.
unsafe impl Sync for CudaEvent {}

impl CudaEvent {
    /// The raw event, for calls this crate does not wrap.
    pub fn raw(&self) -> sys::CUevent {
        self.raw
    }

    /// The context the event was created in.
    pub fn context(&self) -> sys::CUcontext {
        self.ctx
    }
}

/// A CUDA stream and the context it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaStream {
    raw: sys::CUstream,
    ctx: sys::CUcontext,
}

// SAFETY: a `CUstream` is an opaque driver handle, usable from any host
// thread through the thread-safe driver API; this `Copy` value only carries
// it, with its context, to the calls that use it. `Send` lets a profiler
// holding one live in a server that moves between threads.
unsafe impl Send for CudaStream {}

impl CudaStream {
    /// A stream made elsewhere (by cudarc, or your runtime).
    ///
    /// # Safety
    ///
    /// `raw` is a live stream of context `ctx` (or the null stream) and stays
    /// live while this value, or an event recorded through it, is in use.
    pub unsafe fn from_raw(raw: sys::CUstream, ctx: sys::CUcontext) -> Self {
        Self { raw, ctx }
    }

    /// The raw stream.
    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// The context the stream belongs to.
    pub fn context(&self) -> sys::CUcontext {
        self.ctx
    }
}

/// A cudarc error as a [`DriverError`] naming `call`, classified; for code
/// that mixes cudarc calls with this crate's.
pub fn driver_error(call: &'static str, err: result::DriverError) -> DriverError {
    let code: CUresult = err.0;
    DriverError::from_c_status(Cuda::BACKEND, call, code as i64, Some(format!("{code:?}")))
}

/// Load the driver and initialise it, once per process. cudarc panics on the
/// first call when `libcuda` is absent, so nothing reaches it before this.
fn driver() -> Result<(), DriverError> {
    static DRIVER: OnceLock<Result<(), DriverError>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            // SAFETY: the probe only tries to open the library by its names.
            if !unsafe { sys::is_culib_present() } {
                return Err(DriverError::refused(
                    Cuda::BACKEND,
                    "cuInit",
                    ErrorKind::NoDevice,
                    "no CUDA driver found (libcuda.so could not be loaded)",
                ));
            }
            result::init().map_err(|e| driver_error("cuInit", e))
        })
        .clone()
}

/// The calling thread's current context.
fn current() -> Result<Option<sys::CUcontext>, DriverError> {
    driver()?;
    result::ctx::get_current().map_err(|e| driver_error("cuCtxGetCurrent", e))
}

fn current_or_refuse(call: &'static str) -> Result<sys::CUcontext, DriverError> {
    current()?.ok_or_else(|| {
        DriverError::refused(
            Cuda::BACKEND,
            call,
            ErrorKind::Other,
            "no CUDA context is current on this thread; bind one first",
        )
    })
}

/// Run `call` with `ctx` current, then restore the caller's context.
fn in_context<T>(
    ctx: sys::CUcontext,
    call: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    driver()?;
    with_bound(
        Cuda::BACKEND,
        ctx,
        current,
        |ctx| {
            // SAFETY: `ctx` is the context a live event or stream was made in.
            unsafe { sys::cuCtxPushCurrent_v2(ctx) }
                .result()
                .map_err(|e| driver_error("cuCtxPushCurrent_v2", e))
        },
        |_| {
            let mut popped = std::ptr::null_mut();
            // SAFETY: pops the context pushed above; `popped` is writable.
            unsafe { sys::cuCtxPopCurrent_v2(&mut popped) }
                .result()
                .map_err(|e| driver_error("cuCtxPopCurrent_v2", e))
        },
        call,
    )
}

impl Cuda {
    /// Whether `stream` is capturing a graph: screen a stream with this before
    /// profiling on it, since records there are graph nodes, not timestamps.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver is missing or refuses the query.
    pub fn capture_status(stream: CudaStream) -> Result<CaptureStatus, DriverError> {
        driver()?;
        // SAFETY: `stream` is live, by `CudaStream`'s contract.
        let status = unsafe { result::stream::is_capturing(stream.raw) }
            .map_err(|e| driver_error("cuStreamIsCapturing", e))?;
        Ok(match status {
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => CaptureStatus::None,
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => CaptureStatus::Active,
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED => {
                CaptureStatus::Invalidated
            }
        })
    }

    /// Whether a CUDA driver can be loaded and initialised here; never panics.
    ///
    /// # Errors
    ///
    /// A [`DriverError`] of kind [`ErrorKind::NoDevice`] when no driver library
    /// is found, or the driver's own when `cuInit` fails.
    pub fn probe() -> Result<(), DriverError> {
        driver()
    }
}

impl EventApi for Cuda {
    type Event = CudaEvent;
    type Stream = CudaStream;
    const BACKEND: &'static str = "cuda";

    fn event_create() -> Result<CudaEvent, DriverError> {
        let ctx = current_or_refuse("cuEventCreate")?;
        let raw = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|e| driver_error("cuEventCreate", e))?;
        Ok(CudaEvent { raw, ctx })
    }

    fn event_destroy(event: &mut CudaEvent) -> Result<(), DriverError> {
        let raw = std::mem::replace(&mut event.raw, std::ptr::null_mut());
        in_context(event.ctx, || {
            // SAFETY: `raw` was created by `event_create` and, swapped out
            // above, is destroyed exactly once.
            unsafe { result::event::destroy(raw) }.map_err(|e| driver_error("cuEventDestroy_v2", e))
        })
    }

    fn event_record(event: &CudaEvent, stream: CudaStream) -> Result<(), DriverError> {
        if event.ctx != stream.ctx {
            return Err(DriverError::refused(
                Self::BACKEND,
                "cuEventRecord",
                ErrorKind::Other,
                "the event and the stream belong to different contexts",
            ));
        }
        // SAFETY: both handles are live and of one context.
        unsafe { result::event::record(event.raw, stream.raw) }
            .map_err(|e| driver_error("cuEventRecord", e))
    }

    fn event_wait(event: &CudaEvent) -> Result<(), DriverError> {
        in_context(event.ctx, || {
            // SAFETY: the event is live until `event_destroy`.
            unsafe { result::event::synchronize(event.raw) }
                .map_err(|e| driver_error("cuEventSynchronize", e))
        })
    }

    fn event_elapsed(start: &CudaEvent, end: &CudaEvent) -> Result<Duration, DriverError> {
        const CALL: &str = "cuEventElapsedTime";
        if start.ctx != end.ctx {
            return Err(DriverError::refused(
                Self::BACKEND,
                CALL,
                ErrorKind::Other,
                "elapsed time across contexts is undefined",
            ));
        }
        let ms = in_context(start.ctx, || {
            // SAFETY: both events are live and of one context.
            unsafe { result::event::elapsed(start.raw, end.raw) }.map_err(|e| driver_error(CALL, e))
        })?;
        elapsed_from_ms(Self::BACKEND, CALL, ms)
    }

    fn stream_wait_event(stream: CudaStream, event: &CudaEvent) -> Result<(), DriverError> {
        driver()?;
        // SAFETY: both handles are live; the driver allows the event to be of
        // another context than the stream.
        unsafe {
            result::stream::wait_event(
                stream.raw,
                event.raw,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .map_err(|e| driver_error("cuStreamWaitEvent", e))
    }

    fn stream_synchronize(stream: CudaStream) -> Result<(), DriverError> {
        driver()?;
        // SAFETY: the stream is live, by `CudaStream`'s contract.
        unsafe { result::stream::synchronize(stream.raw) }
            .map_err(|e| driver_error("cuStreamSynchronize", e))
    }

    fn stream_create_non_blocking() -> Result<CudaStream, DriverError> {
        let ctx = current_or_refuse("cuStreamCreate")?;
        let raw = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| driver_error("cuStreamCreate", e))?;
        Ok(CudaStream { raw, ctx })
    }

    fn stream_destroy(stream: CudaStream) -> Result<(), DriverError> {
        in_context(stream.ctx, || {
            // SAFETY: the stream was made by `stream_create_non_blocking` and
            // its owner destroys it once.
            unsafe { result::stream::destroy(stream.raw) }
                .map_err(|e| driver_error("cuStreamDestroy_v2", e))
        })
    }
}
