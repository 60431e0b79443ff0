//! The CUDA backend of device-events: [`EventApi`] over the CUDA driver API,
//! through cudarc's bindings, with `libcuda` loaded at run time.
//!
//! Pick it with `device-events-core`: `EventFence<Cuda>` and
//! `EventProfiler<Cuda>` are the types to use.
//!
//! The first steps, in the order that never panics: probe for the driver
//! (cudarc panics on its first call when there is none), bind a context,
//! then fence and profile.
//!
//! ```
//! use device_events_core::{EventFence, EventProfiler, OwnedStream};
//! use device_events_cuda::Cuda;
//!
//! if let Err(err) = Cuda::probe() {
//!     eprintln!("no CUDA here: {err}");
//!     return Ok(());
//! }
//! // Your runtime binds a context to the thread; with cudarc, like this.
//! let ctx = cudarc::driver::CudaContext::new(0)?;
//! ctx.bind_to_thread()?;
//!
//! let (a, b) = (OwnedStream::<Cuda>::new()?, OwnedStream::<Cuda>::new()?);
//! let mut profiler = EventProfiler::<Cuda>::new();
//!
//! let window = profiler.start(a.get());
//! // ... enqueue work on `a` ...
//! let fence = EventFence::<Cuda>::new(a.get());
//! fence.wait_async(b.get())?; // `b` runs after `a`'s work; the host does not block
//! let timing = profiler.stop(a.get(), window)?;
//!
//! match pollster::block_on(timing.resolve()) {
//!     Some(ticks) => println!("{:?} on the device", ticks.duration()),
//!     None => println!("the window could not be read (logged)"),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Streams, events and the contexts they belong to stay alive for as long
//! as the handles do: dropping `ctx` above before the fence is safe, since
//! each event and stream retains its primary context. A `CudaStream` is a
//! checked handle: used after `stream_destroy`, it is refused before the
//! driver sees it.
//!
//! # Driver
//!
//! Minimum driver: CUDA 11.0 (R450), untested on hardware here. The crate
//! resolves only `cuInit`, `cuGetErrorName`, `cuCtxGetCurrent`,
//! `cuCtxGetDevice`, `cuCtxPushCurrent_v2`, `cuCtxPopCurrent_v2`,
//! `cuDevicePrimaryCtxRetain`, `cuDevicePrimaryCtxRelease_v2`,
//! `cuEventCreate`, `cuEventRecord`, `cuEventSynchronize`, `cuEventQuery`,
//! `cuEventElapsedTime`, `cuEventDestroy_v2`, `cuStreamCreate`,
//! `cuStreamWaitEvent`, `cuStreamSynchronize`, `cuStreamDestroy_v2`,
//! `cuStreamIsCapturing` and `cuThreadExchangeStreamCaptureMode`, all
//! present since CUDA 11; and, for the
//! profiler's anchor gate, `cuMemHostAlloc`, `cuMemHostGetDevicePointer_v2`,
//! `cuMemFreeHost` and `cuStreamWaitValue32_v2` (on by default since CUDA
//! 11.7), else `cuStreamWaitValue32` where `cuDeviceGetAttribute` says the
//! kernel module enabled it, resolved apart: a driver without them still
//! loads, and its profiler anchors without a gate. They are resolved from
//! the library cudarc loads, bound at the CUDA 12.9 level, but declared
//! here with their status as a plain integer: cudarc's `CUresult` is an
//! enum, and a code newer than it (CUDA 13 returns 917–919) would be
//! undefined behaviour inside it. Such a code becomes a [`DriverError`]
//! that carries its number.
//!
//! # Contexts
//!
//! Events and streams are made in the thread's current context, which must
//! be a primary context (cudarc's `CudaContext` is one), and retain it.
//! Every call binds the handle's context and restores the caller's. An
//! event is recorded only on a stream of its own context: a fence, pool or
//! profiler for a device-1 stream is made with device 1's context current,
//! and a mismatch is refused with an error naming both.
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
//! # use device_events_core::{CaptureStatus, EventProfiler, OwnedStream};
//! # use device_events_cuda::Cuda;
//! # if Cuda::probe().is_err() { return Ok(()); }
//! # let ctx = cudarc::driver::CudaContext::new(0)?;
//! # ctx.bind_to_thread()?;
//! # let stream = OwnedStream::<Cuda>::new()?;
//! # let stream = stream.get();
//! # let mut profiler = EventProfiler::<Cuda>::new();
//! if Cuda::capture_status(stream)? == CaptureStatus::None {
//!     let window = profiler.start(stream);
//!     // ...
//!     # profiler.abandon(window)?;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod capture;
mod context;
mod ffi;
mod gate;
mod stream;

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use cudarc::driver::result;
use cudarc::driver::sys;
use device_events_core::driver::{elapsed_from_ms, with_bound};
use device_events_core::profile::Duration;
use device_events_core::{CaptureStatus, DriverError, ErrorKind, EventApi, EventQuery};

use context::{Context, retain_current};
pub use stream::CudaStream;
use stream::{Live, STREAMS, dead};

const BACKEND: &str = "cuda";

/// The CUDA backend.
#[derive(Debug)]
pub struct Cuda;

/// A CUDA event with timing enabled, and the context it was made in,
/// retained until the event is dropped.
#[derive(Debug)]
pub struct CudaEvent {
    /// Null once destroyed.
    raw: sys::CUevent,
    ctx: Arc<Context>,
}

// SAFETY: `CUevent` is an opaque handle into the driver, not a pointer this
// crate dereferences. The CUDA driver API is thread-safe: an event may be
// recorded, synchronized, timed and destroyed from any host thread, given
// its context is current for the call, which every call here arranges by
// binding `ctx` (retained, so alive). No interior mutability, and
// `event_destroy` takes it by `&mut`, so no call races its release.
unsafe impl Send for CudaEvent {}
// SAFETY: as for `Send`: every method takes `&self` to pass the handle to a
// thread-safe driver call; nothing is mutated through a shared reference.
unsafe impl Sync for CudaEvent {}

impl CudaEvent {
    /// The raw event, for calls this crate does not wrap; null once
    /// destroyed.
    pub fn raw(&self) -> sys::CUevent {
        self.raw
    }

    /// The context the event was created in.
    pub fn context(&self) -> sys::CUcontext {
        self.ctx.raw
    }
}

/// A cudarc error as a [`DriverError`] naming `call`, classified; for code
/// that mixes cudarc calls with this crate's.
pub fn driver_error(call: &'static str, err: result::DriverError) -> DriverError {
    let code = err.0 as u32;
    DriverError::from_c_status(BACKEND, call, i64::from(code), Some(format!("{:?}", err.0)))
}

/// A status as `Ok` or a classified [`DriverError`] naming `call`; the
/// name comes from the driver, and a code it does not know keeps its number.
pub(crate) fn check(call: &'static str, status: u32) -> Result<(), DriverError> {
    if status == 0 {
        return Ok(());
    }
    Err(error_of(api().ok(), call, status))
}

/// The error for a nonzero `status`, named by the driver when it can be.
fn error_of(api: Option<&ffi::Api>, call: &'static str, status: u32) -> DriverError {
    let name = api.and_then(|api| {
        let mut name = std::ptr::null();
        // SAFETY: `name` is writable; the driver points it at a static
        // string, or fails (leaving it null) for a code it does not know.
        let known = unsafe { (api.cuGetErrorName)(status, &mut name) } == 0;
        (known && !name.is_null()).then(|| {
            // SAFETY: a non-null name from the driver is a static C string.
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        })
    });
    DriverError::from_c_status(BACKEND, call, i64::from(status), name)
}

/// The driver's functions, loaded and initialised once per process. cudarc
/// panics when `libcuda` is absent, so nothing reaches it before the probe.
pub(crate) fn api() -> Result<&'static ffi::Api, DriverError> {
    static API: OnceLock<Result<ffi::Api, DriverError>> = OnceLock::new();
    API.get_or_init(|| {
        // SAFETY: the probe only tries to open the library by its names.
        if !unsafe { sys::is_culib_present() } {
            return Err(DriverError::refused(
                BACKEND,
                "cuInit",
                ErrorKind::NoDevice,
                "no CUDA driver found (libcuda.so could not be loaded)",
            ));
        }
        // SAFETY: the library loads (just probed); cudarc keeps it loaded
        // for the rest of the process.
        let api = ffi::Api::load(unsafe { sys::culib() })?;
        // SAFETY: `cuInit` takes flags 0.
        match unsafe { (api.cuInit)(0) } {
            0 => Ok(api),
            // Named through `api` itself: `api()` is still initialising.
            status => Err(error_of(Some(&api), "cuInit", status)),
        }
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The calling thread's current context.
fn current() -> Result<Option<sys::CUcontext>, DriverError> {
    let api = api()?;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: `ctx` is writable.
    check("cuCtxGetCurrent", unsafe {
        (api.cuCtxGetCurrent)(&mut ctx)
    })?;
    Ok((!ctx.is_null()).then_some(ctx))
}

/// Run `call` with `ctx` current, then restore the caller's context.
pub(crate) fn in_context<T>(
    ctx: sys::CUcontext,
    call: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    let api = api()?;
    with_bound(
        BACKEND,
        ctx,
        current,
        |ctx| {
            // SAFETY: `ctx` is retained by the handle the call is for (or
            // live by `from_raw`'s contract).
            check("cuCtxPushCurrent_v2", unsafe {
                (api.cuCtxPushCurrent_v2)(ctx)
            })
        },
        |_| {
            let mut popped = std::ptr::null_mut();
            // SAFETY: pops the context pushed above; `popped` is writable.
            check("cuCtxPopCurrent_v2", unsafe {
                (api.cuCtxPopCurrent_v2)(&mut popped)
            })
        },
        call,
    )
}

/// Run `call` on `stream`'s raw handle with its context bound.
fn on_stream<T>(
    stream: CudaStream,
    name: &'static str,
    call: impl FnOnce(&Live) -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    stream.live(name, |live| in_context(live.ctx.raw, || call(live)))?
}

fn live_event(event: &CudaEvent, call: &'static str) -> Result<sys::CUevent, DriverError> {
    if event.raw.is_null() {
        return Err(DriverError::refused(
            BACKEND,
            call,
            ErrorKind::InvalidHandle,
            "the event was destroyed; refused before the driver",
        ));
    }
    Ok(event.raw)
}

/// Whether events made from now on wait by sleeping
/// (`CU_EVENT_BLOCKING_SYNC`) rather than spinning.
static BLOCKING_SYNC: AtomicBool = AtomicBool::new(false);

fn wait_mode_flags() -> std::ffi::c_uint {
    if BLOCKING_SYNC.load(Ordering::Relaxed) {
        ffi::EVENT_BLOCKING_SYNC
    } else {
        ffi::EVENT_DEFAULT
    }
}

impl Cuda {
    /// How fences and windows made from now on wait for the device: by
    /// default `cuEventSynchronize` spins a core for the whole wait, waking
    /// within a microsecond; with `blocking` its events are created with
    /// `CU_EVENT_BLOCKING_SYNC`, so a wait sleeps, costs no core, and wakes
    /// tens of microseconds late. Pick blocking for servers with many
    /// waiting threads, spinning for the lowest latency. Events made
    /// before keep their mode.
    ///
    /// ```
    /// device_events_cuda::Cuda::set_blocking_sync(true);
    /// # device_events_cuda::Cuda::set_blocking_sync(false);
    /// ```
    pub fn set_blocking_sync(blocking: bool) {
        BLOCKING_SYNC.store(blocking, Ordering::Relaxed);
    }

    /// Whether `stream` is capturing a graph: screen a stream with this before
    /// profiling on it, since records there are graph nodes, not timestamps.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver is missing, the stream is not live or
    /// the driver refuses the query.
    pub fn capture_status(stream: CudaStream) -> Result<CaptureStatus, DriverError> {
        const CALL: &str = "cuStreamIsCapturing";
        let api = api()?;
        let status = on_stream(stream, CALL, |live| {
            let mut status = 0u32;
            // SAFETY: the stream is live (held by the table meanwhile) and
            // its context bound; `status` is writable.
            check(CALL, unsafe {
                (api.cuStreamIsCapturing)(live.raw, &mut status)
            })?;
            Ok(status)
        })?;
        Ok(match status {
            ffi::CAPTURE_NONE => CaptureStatus::None,
            ffi::CAPTURE_ACTIVE => CaptureStatus::Active,
            _ => CaptureStatus::Invalidated,
        })
    }

    /// Whether a CUDA driver can be loaded and initialised here; never panics.
    /// Call it before anything of cudarc's, which panics without a driver.
    ///
    /// # Errors
    ///
    /// A [`DriverError`] of kind [`ErrorKind::NoDevice`] when no driver library
    /// is found, or the driver's own when `cuInit` fails.
    pub fn probe() -> Result<(), DriverError> {
        api().map(drop)
    }
}

impl EventApi for Cuda {
    type Event = CudaEvent;
    type Stream = CudaStream;
    const BACKEND: &'static str = BACKEND;

    fn event_create() -> Result<CudaEvent, DriverError> {
        const CALL: &str = "cuEventCreate";
        let api = api()?;
        let ctx = retain_current(CALL)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is writable; `ctx` is current.
        check(CALL, unsafe {
            (api.cuEventCreate)(&mut raw, wait_mode_flags())
        })?;
        Ok(CudaEvent { raw, ctx })
    }

    fn event_destroy(event: &mut CudaEvent) -> Result<(), DriverError> {
        const CALL: &str = "cuEventDestroy_v2";
        let api = api()?;
        let raw = live_event(event, CALL)?;
        event.raw = std::ptr::null_mut();
        in_context(event.ctx.raw, || {
            // SAFETY: `raw` was created by `event_create` and, nulled in the
            // event above, is destroyed exactly once; its context is bound.
            check(CALL, unsafe { (api.cuEventDestroy_v2)(raw) })
        })
    }

    fn event_record(event: &CudaEvent, stream: CudaStream) -> Result<(), DriverError> {
        const CALL: &str = "cuEventRecord";
        let api = api()?;
        let raw = live_event(event, CALL)?;
        on_stream(stream, CALL, |live| {
            if live.ctx.raw != event.ctx.raw {
                return Err(DriverError::refused(
                    BACKEND,
                    CALL,
                    ErrorKind::InvalidHandle,
                    format!(
                        "the event and the stream belong to different contexts (event: {:?}, \
                         stream: {:?}); make the fence, pool or profiler with the stream's \
                         context current",
                        event.ctx.raw, live.ctx.raw
                    ),
                ));
            }
            // SAFETY: both handles are live and of the bound context.
            check(CALL, unsafe { (api.cuEventRecord)(raw, live.raw) })
        })
    }

    fn event_wait(event: &CudaEvent) -> Result<(), DriverError> {
        const CALL: &str = "cuEventSynchronize";
        let api = api()?;
        let raw = live_event(event, CALL)?;
        in_context(event.ctx.raw, || {
            capture::MODES.relaxed(|| {
                // SAFETY: the event is live, its context bound.
                check(CALL, unsafe { (api.cuEventSynchronize)(raw) })
            })
        })
    }

    fn event_elapsed(start: &CudaEvent, end: &CudaEvent) -> Result<Duration, DriverError> {
        const CALL: &str = "cuEventElapsedTime";
        let api = api()?;
        let (from, to) = (live_event(start, CALL)?, live_event(end, CALL)?);
        if start.ctx.raw != end.ctx.raw {
            return Err(DriverError::refused(
                BACKEND,
                CALL,
                ErrorKind::Other,
                "elapsed time across contexts is undefined",
            ));
        }
        let mut ms = 0.0f32;
        in_context(start.ctx.raw, || {
            // SAFETY: both events are live and of the bound context; `ms`
            // is writable.
            check(CALL, unsafe { (api.cuEventElapsedTime)(&mut ms, from, to) })
        })?;
        elapsed_from_ms(BACKEND, CALL, ms)
    }

    fn stream_wait_event(stream: CudaStream, event: &CudaEvent) -> Result<(), DriverError> {
        const CALL: &str = "cuStreamWaitEvent";
        let api = api()?;
        let raw = live_event(event, CALL)?;
        on_stream(stream, CALL, |live| {
            // SAFETY: both handles are live, the stream's context bound; the
            // driver allows the event to be of another context.
            check(CALL, unsafe { (api.cuStreamWaitEvent)(live.raw, raw, 0) })
        })
    }

    fn stream_synchronize(stream: CudaStream) -> Result<(), DriverError> {
        const CALL: &str = "cuStreamSynchronize";
        let api = api()?;
        on_stream(stream, CALL, |live| {
            capture::MODES.relaxed(|| {
                // SAFETY: the stream is live, its context bound.
                check(CALL, unsafe { (api.cuStreamSynchronize)(live.raw) })
            })
        })
    }

    fn stream_create_non_blocking() -> Result<CudaStream, DriverError> {
        const CALL: &str = "cuStreamCreate";
        let api = api()?;
        let ctx = retain_current(CALL)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is writable; `ctx` is current.
        check(CALL, unsafe {
            (api.cuStreamCreate)(&mut raw, ffi::STREAM_NON_BLOCKING)
        })?;
        Ok(CudaStream::admit(Live {
            raw,
            ctx,
            owned: true,
        }))
    }

    fn stream_destroy(stream: CudaStream) -> Result<(), DriverError> {
        const CALL: &str = "cuStreamDestroy_v2";
        let api = api()?;
        // Out of the table first, once calls in flight on it have returned:
        // no copy of the handle can reach the driver after this.
        let live = STREAMS.remove(stream.handle).ok_or_else(|| dead(CALL))?;
        if !live.owned {
            return Ok(());
        }
        in_context(live.ctx.raw, || {
            // SAFETY: made by `stream_create_non_blocking`, removed from the
            // table above, so destroyed exactly once; its context is bound.
            check(CALL, unsafe { (api.cuStreamDestroy_v2)(live.raw) })
        })
    }
}

impl EventQuery for Cuda {
    fn event_query(event: &CudaEvent) -> Result<bool, DriverError> {
        const CALL: &str = "cuEventQuery";
        let api = api()?;
        let raw = live_event(event, CALL)?;
        in_context(event.ctx.raw, || {
            capture::MODES.relaxed(|| {
                // SAFETY: the event is live, its context bound.
                match unsafe { (api.cuEventQuery)(raw) } {
                    ffi::NOT_READY => Ok(false),
                    status => check(CALL, status).map(|()| true),
                }
            })
        })
    }
}

/// A gate where the driver has stream memory operations, and polls through
/// `cuEventQuery`; stamps only as device time.
impl device_events_core::AnchorApi for Cuda {
    fn poll(event: &CudaEvent) -> Option<Result<bool, DriverError>> {
        Some(Self::event_query(event))
    }

    fn in_context_of<T>(stream: CudaStream, call: impl FnOnce() -> T) -> Result<T, DriverError> {
        // Out of the table first: `call` uses the stream too.
        let ctx = stream.live("cuCtxPushCurrent_v2", |live| Arc::clone(&live.ctx))?;
        in_context(ctx.raw, || Ok(call()))
    }

    fn own_thread() {
        capture::MODES.own_thread();
    }

    fn gate(stream: CudaStream) -> Result<Option<Box<dyn device_events_core::Gate>>, DriverError> {
        Ok(gate::CudaWord::new(stream)?.map(|word| {
            Box::new(device_events_core::WordGate::new(word)) as Box<dyn device_events_core::Gate>
        }))
    }
}
