//! The CUDA backend of device-events: [`EventApi`](device_events_core::EventApi) over the CUDA driver API,
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
//!     Some(ticks) => println!("{:?} on the device", ticks.duration),
//!     None => println!("the window could not be read (logged)"),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Streams, events and the contexts they belong to stay alive for as long
//! as the handles do: dropping `ctx` above before the fence is safe, since
//! each event and stream retains its primary context. A `CudaStream` is a
//! checked handle: used after `stream_destroy`, it is refused before the
//! driver sees it. This crate holds only the driver calls ([`RawApi`]);
//! the checks, the binding and the refusals are `device-events-core`'s.
//!
//! # Driver
//!
//! The minimum driver, and what this crate has run on, are in the
//! repository's `README.md`. The crate resolves 20 functions by name from
//! the library cudarc loads: `cuInit`, `cuGetErrorName`, `cuCtxGetCurrent`,
//! `cuCtxGetDevice`, `cuCtxPushCurrent_v2`, `cuCtxPopCurrent_v2`,
//! `cuDevicePrimaryCtxRetain`, `cuDevicePrimaryCtxRelease_v2` (the newest
//! of them, which sets the minimum), `cuEventCreate`, `cuEventRecord`,
//! `cuEventSynchronize`, `cuEventQuery`, `cuEventElapsedTime` (the plain
//! one every driver exports, not the `_v2` drivers export only from 12.8),
//! `cuEventDestroy_v2`, `cuStreamCreate`, `cuStreamWaitEvent`,
//! `cuStreamSynchronize`, `cuStreamDestroy_v2`, `cuStreamIsCapturing` and
//! `cuThreadExchangeStreamCaptureMode`. For the profiler's anchor gate it
//! resolves apart `cuDeviceGetAttribute`, `cuMemHostAlloc`,
//! `cuMemHostGetDevicePointer_v2`, `cuMemFreeHost` and
//! `cuStreamWaitValue32_v2` (on by default since CUDA 11.7), else
//! `cuStreamWaitValue32` where the kernel module enabled it: a driver
//! without them still loads, and its profiler anchors without a gate.
//!
//! Each is declared here with its status as a plain integer: cudarc's
//! `CUresult` is an enum, and a code newer than it (CUDA 13 returns
//! 917–919) would be undefined behaviour inside it. Such a code becomes a
//! [`DriverError`] that carries its number. Since every function is found
//! by its own name, cudarc's bindings level does not matter here and the
//! crate picks none: the build that uses it does (a `cuda-*` feature of
//! cudarc, `CUDARC_CUDA_VERSION`, or the CUDA toolkit's `nvcc`, falling
//! back to the latest). cudarc is taken with `driver`,
//! `fallback-dynamic-loading`, `cuda-version-from-build-system` and
//! `fallback-latest`, from 0.19.6 on, so the crate builds with no CUDA
//! toolkit installed and has no features of its own.
//!
//! # Contexts
//!
//! Events and streams are made in the thread's current context, which must
//! be a primary context (cudarc's `CudaContext` is one), and retain it.
//! Every call binds the handle's context and restores the caller's. An
//! event is recorded only on a stream of its own context: a `FencePool` for
//! a device-1 stream is made with device 1's context current, and a
//! mismatch is refused with an error naming both. `EventFence::new` takes
//! its stream's context itself, and a profiler its first window's.
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

mod context;
mod ffi;
mod gate;
pub mod raw;

use std::ffi::CStr;
use std::sync::OnceLock;

use cudarc::driver::result;
use cudarc::driver::sys::{self, CUcontext, CUstream};
use device_events_core::backend::{CheckedEvent, CheckedStream, RawApi};
use device_events_core::{CaptureStatus, DriverError, ErrorKind};

use raw::RawStream;

const BACKEND: &str = "cuda";

/// The CUDA backend.
#[derive(Debug)]
pub struct Cuda;

/// A CUDA stream: a checked handle (see [`CheckedStream`]).
pub type CudaStream = CheckedStream<Cuda>;

/// A CUDA event with timing enabled, and the context it was made in,
/// retained until the event is dropped.
pub type CudaEvent = CheckedEvent<Cuda>;

/// A cudarc result with its error as a classified [`DriverError`] naming
/// `call`: for code that mixes its own cudarc calls with this crate's.
///
/// ```
/// use cudarc::driver::{DriverError as CudarcError, sys::CUresult};
/// use device_events_core::ErrorKind;
///
/// assert_eq!(device_events_cuda::check("cuMemAlloc_v2", Ok::<_, CudarcError>(7))?, 7);
/// let oom = Err::<(), _>(CudarcError(CUresult::CUDA_ERROR_OUT_OF_MEMORY));
/// let err = device_events_cuda::check("cuMemAlloc_v2", oom).unwrap_err();
/// assert_eq!(err.status(), Some(2));
/// assert_eq!(err.kind(), ErrorKind::OutOfResources);
/// # Ok::<(), device_events_core::DriverError>(())
/// ```
///
/// # Errors
///
/// The [`DriverError`] for cudarc's error.
pub fn check<T>(
    call: &'static str,
    result: Result<T, result::DriverError>,
) -> Result<T, DriverError> {
    result.map_err(|err| {
        let code = err.0 as u32;
        DriverError::from_c_status(BACKEND, call, i64::from(code), Some(format!("{:?}", err.0)))
    })
}

/// A status as `Ok` or a classified [`DriverError`] naming `call`; the
/// name comes from the driver, and a code it does not know keeps its number.
#[inline]
pub(crate) fn check_status(call: &'static str, status: u32) -> Result<(), DriverError> {
    if status == 0 {
        return Ok(());
    }
    Err(error_of(api().ok(), call, status))
}

/// The error for a nonzero `status`, named by the driver when it can be.
fn error_of(api: Option<&ffi::Api>, call: &'static str, status: u32) -> DriverError {
    // Met at every ask while the device works: named without a copy, so
    // that the error is the one shared, made once (no allocation).
    if status == ffi::NOT_READY {
        return DriverError::from_c_status(
            BACKEND,
            call,
            i64::from(status),
            Some("CUDA_ERROR_NOT_READY"),
        );
    }
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

/// At the process's exit: the library's threads leave the driver before its
/// exit handlers tear it down. Each leaves within its longest sleep
/// between asks (the core's `src/tunables.rs`) of the stop; the bound
/// covers a thread the system is slow to schedule.
extern "C" fn stop_driver_calls_at_exit() {
    let _ = device_events_core::process::stop_driver_calls(std::time::Duration::from_secs(1));
}

/// Around `fork`: no library thread holds one of the library's locks as the
/// process forks (see `device_events_core::process::before_fork`).
extern "C" fn before_fork() {
    device_events_core::process::before_fork();
}

extern "C" fn after_fork_in_parent() {
    device_events_core::process::after_fork_in_parent();
}

extern "C" fn after_fork_in_child() {
    device_events_core::process::after_fork_in_child();
}

/// The driver's functions, loaded and initialised once per process.
static API: OnceLock<Result<ffi::Api, DriverError>> = OnceLock::new();

/// The driver's functions, loaded and initialised once per process. cudarc
/// panics when `libcuda` is absent, so nothing reaches it before the probe.
/// Every driver call starts here: once loaded, a load and a compare.
#[inline]
pub(crate) fn api() -> Result<&'static ffi::Api, DriverError> {
    match API.get() {
        Some(Ok(api)) => Ok(api),
        _ => load_api(),
    }
}

#[cold]
#[inline(never)]
fn load_api() -> Result<&'static ffi::Api, DriverError> {
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
        // SAFETY: the library loads (just probed).
        let api = unsafe { ffi::Api::load() }?;
        // SAFETY: `cuInit` takes flags 0.
        match unsafe { (api.cuInit)(0) } {
            0 => {
                // Registered once the driver is loaded, so it runs before
                // the driver's own exit handlers (the last registered runs
                // first).
                // SAFETY: registers a function of no arguments that does
                // not unwind.
                unsafe { libc::atexit(stop_driver_calls_at_exit) };
                // SAFETY: registers three functions of no arguments that do
                // not unwind. They take and give back the library's locks and,
                // in the child, reset its counters and drop the parent's queued
                // work: that allocates and frees, which POSIX does not list as
                // async-signal-safe after a fork; glibc's fork resets its
                // allocator's locks in the child, which makes it sound there.
                unsafe {
                    libc::pthread_atfork(
                        Some(before_fork),
                        Some(after_fork_in_parent),
                        Some(after_fork_in_child),
                    )
                };
                Ok(api)
            }
            // Named through `api` itself: `api()` is still initialising.
            status => Err(error_of(Some(&api), "cuInit", status)),
        }
    })
    .as_ref()
    .map_err(Clone::clone)
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
        Self::state().set_blocking_sync(blocking);
    }

    /// Whether `stream` is capturing a graph (`cuStreamIsCapturing`): screen
    /// a stream with this before profiling on it, since records there are
    /// graph nodes, not timestamps.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver is missing, the stream is not live or
    /// the driver refuses the query.
    pub fn capture_status(stream: CudaStream) -> Result<CaptureStatus, DriverError> {
        stream.capture_status()
    }

    /// Admit a stream made elsewhere (by cudarc, or your runtime), or the
    /// null, legacy (`CU_STREAM_LEGACY`) or per-thread
    /// (`CU_STREAM_PER_THREAD`) stream. `stream_destroy` on the result
    /// forgets it and leaves the stream itself to its owner.
    ///
    /// # Safety
    ///
    /// `ctx` is a live primary context and `raw` a live stream of it (or
    /// one of the special streams), and `raw` stays live until
    /// `stream_destroy` has run on the returned handle.
    ///
    /// # Errors
    ///
    /// When the driver is missing or `ctx` is not a primary context.
    pub unsafe fn stream_from_raw(
        raw: CUstream,
        ctx: CUcontext,
    ) -> Result<CudaStream, DriverError> {
        context::push(ctx)?;
        let held = context::retain_current("Cuda::stream_from_raw");
        if let Err(err) = context::pop() {
            log::error!("{BACKEND}: the caller's context could not be restored: {err}");
        }
        Ok(CudaStream::admit_foreign(RawStream(raw), held?))
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
