//! The HIP backend of device-events: [`EventApi`](device_events_core::EventApi) over the HIP runtime,
//! `libamdhip64`, loaded at run time.
//!
//! Pick it with `device-events-core`: `EventFence<Hip>` and
//! `EventProfiler<Hip>` are the types to use.
//!
//! ```
//! use device_events_core::{EventFence, EventProfiler, OwnedStream};
//! use device_events_hip::Hip;
//!
//! if let Err(err) = Hip::probe() {
//!     eprintln!("no HIP runtime with a device here: {err}");
//!     return Ok(());
//! }
//! let (a, b) = (OwnedStream::<Hip>::new()?, OwnedStream::<Hip>::new()?);
//! let mut profiler = EventProfiler::<Hip>::new();
//!
//! let window = profiler.start(a.get());
//! // ... enqueue work on `a` ...
//! let fence = EventFence::<Hip>::new(a.get());
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
//! # Runtime
//!
//! The minimum ROCm, and what this crate has run on, are in the
//! repository's `README.md`; the minimum is set by `hipEventDestroy`, which
//! before ROCm 5.7 read the stream of the event's last record with no check
//! that it still lived, so a fence dropped after its stream read freed
//! memory (clr, rocm-5.6.0 against rocm-5.7.0). An older runtime is refused
//! once `hipInit` has found a device ([`OLDEST_RUNTIME`]); on a machine
//! without one it still reports no device.
//!
//! The crate resolves 18 functions: `hipInit`, `hipRuntimeGetVersion`,
//! `hipDriverGetVersion`, `hipGetDeviceCount`, `hipGetDevice`,
//! `hipSetDevice`, `hipEventCreateWithFlags`, `hipEventRecord`,
//! `hipEventSynchronize`, `hipEventQuery`, `hipEventElapsedTime`,
//! `hipEventDestroy`, `hipStreamCreateWithFlags`, `hipStreamWaitEvent`,
//! `hipStreamSynchronize`, `hipStreamDestroy`, `hipStreamIsCapturing` and
//! `hipGetErrorName`; and 5 more where the runtime has them: for the
//! profiler's anchor gate `hipDeviceGetAttribute`, `hipExtMallocWithFlags`,
//! `hipStreamWaitValue32` and `hipFree` (a runtime without them loads, and
//! its profiler anchors without a gate), and
//! `hipThreadExchangeStreamCaptureMode`. It resolves nothing else.
//!
//! Nothing of ROCm is built or linked at build time. A runtime already
//! loaded in the process under one of its names (by your own bindings, say)
//! is used first: a second copy would not know your streams. Otherwise the
//! runtime is opened on first use from the places [`runtime::search_path`]
//! lists (`$ROCM_PATH/lib`, `$HIP_PATH/lib`, `/opt/rocm/lib`, then the
//! loader's search; `libamdhip64.so` or the sonames of ROCm 7, 6 and 5), or
//! the one library `DEVICE_EVENTS_HIP_RUNTIME` names. `libhiprtc` is never
//! needed. Without a runtime, every call returns an
//! [`ErrorKind::NoDevice`] error; `cargo run -p device-events-hip --example
//! probe` says in one line which runtime is here and whether it has a GPU.
//!
//! Why its own binding: `hip-sys` needs ROCm headers to build, links
//! `libamdhip64` at build time, and declares `hipError_t` as a Rust enum
//! from ROCm 5.4 that lacks codes ROCm 6 and 7 return; `cubecl-hip-sys`
//! also loads `libhiprtc`, which ROCm 5 does not ship, and tries only
//! `libamdhip64.so`, `.so.1` and `.so.0`, so it finds neither a
//! runtime-only install nor Debian's. The runtime is loaded with
//! `libloading` 0.8 or 0.9, whichever the lockfile has: beside
//! `cubecl-hip-sys` (0.8), `cargo update -p libloading@0.9.1 --precise
//! 0.8.9` leaves one copy.
//!
//! Statuses cross the binding as plain integers, so a code newer than this
//! crate (ROCm 6 and 7 return 911–916) keeps its number and is never read
//! as an invalid enum value. With the runtime and no AMD GPU, `hipInit`
//! returns `hipErrorInvalidDevice` (101), reported as [`ErrorKind::NoDevice`].
//! `hipEventElapsedTime` has been seen to return negative values; they are
//! clamped to zero, as [`EventApi::event_elapsed`](device_events_core::EventApi::event_elapsed) promises.
//!
//! # Graph capture
//!
//! Screen a stream with [`Hip::capture_status`] before profiling on it:
//! inside a capture, records are graph nodes, not timestamps. How a fence
//! is asked on ROCm before 7.2, whose runtime invalidates a capture when an
//! event of the capturing stream is asked: the repository's
//! `docs/design.md`.

mod gate;
pub mod raw;
pub mod runtime;

use std::ffi::{CStr, c_int};
use std::path::PathBuf;
use std::sync::OnceLock;

use device_events_core::backend::{CheckedEvent, CheckedStream, RawApi};
use device_events_core::{CaptureStatus, DriverError, ErrorKind};
use raw::RawStream;
use runtime::{Runtime, hipStream_t};

/// `hipStreamPerThread`: the calling thread's own default stream.
const HIP_STREAM_PER_THREAD: usize = 0x2;

/// The HIP backend.
#[derive(Debug)]
pub struct Hip;

/// A HIP stream: a checked handle (see [`CheckedStream`]). A HIP handle
/// depends on its device ordinal, which no runtime call invalidates short
/// of `hipDeviceReset`, and on the runtime library, which stays loaded for
/// the process.
pub type HipStream = CheckedStream<Hip>;

/// A HIP event with timing enabled, and the device it was created on.
pub type HipEvent = CheckedEvent<Hip>;

/// A HIP status as a [`DriverError`] naming `call`, classified; `Ok` for
/// success. For code that mixes its own HIP calls with this crate's: any
/// binding's `hipError_t`, signed or not, converts.
///
/// ```
/// use device_events_core::ErrorKind;
///
/// assert!(device_events_hip::check("hipMalloc", 0u32).is_ok());
/// let err = device_events_hip::check("hipMalloc", 2u32).unwrap_err();
/// assert_eq!(err.status(), Some(2));
/// assert_eq!(err.kind(), ErrorKind::OutOfResources);
/// ```
///
/// # Errors
///
/// The [`DriverError`] for any status but `hipSuccess`.
pub fn check(call: &'static str, status: impl Into<i64>) -> Result<(), DriverError> {
    let status = status.into();
    if status == i64::from(runtime::HIP_SUCCESS) {
        return Ok(());
    }
    // Named by the runtime when one is loaded; a status can reach here from
    // a caller's own code on a machine without one.
    // Met at every ask while the device works: named without a copy, so
    // that the error is the one shared, made once (no allocation).
    if status == i64::from(runtime::HIP_ERROR_NOT_READY) {
        return Err(DriverError::from_c_status(
            <Hip as RawApi>::BACKEND,
            call,
            status,
            Some("hipErrorNotReady"),
        ));
    }
    let code = runtime::loaded().ok().zip(c_int::try_from(status).ok());
    let name = code.and_then(|(rt, code)| {
        // SAFETY: `hipGetErrorName` returns a static string, or null, for
        // any code.
        let name = unsafe { (rt.fns.hipGetErrorName)(code) };
        (!name.is_null()).then(|| {
            // SAFETY: non-null, it is a NUL-terminated static string.
            let name = unsafe { CStr::from_ptr(name) };
            name.to_string_lossy().into_owned()
        })
    });
    Err(DriverError::from_c_status(
        <Hip as RawApi>::BACKEND,
        call,
        status,
        name,
    ))
}

/// The runtime, loaded; the no-device error when there is none.
pub(crate) fn library() -> Result<&'static Runtime, DriverError> {
    runtime::loaded().map_err(|why| {
        DriverError::refused(
            <Hip as RawApi>::BACKEND,
            "loading the runtime",
            ErrorKind::NoDevice,
            why,
        )
    })
}

/// The runtime, loaded and initialised once per process.
pub(crate) fn runtime_initialised() -> Result<&'static Runtime, DriverError> {
    static INIT: OnceLock<Result<(), DriverError>> = OnceLock::new();
    let rt = library()?;
    INIT.get_or_init(|| {
        // SAFETY: `hipInit` takes flags 0.
        check("hipInit", unsafe { (rt.fns.hipInit)(0) })?;
        refuse_before_rocm_5_7(rt)?;
        // Registered once the runtime is initialised, so it runs before
        // the exit handlers the runtime registered (the last registered
        // runs first).
        // SAFETY: registers a function of no arguments that does not
        // unwind.
        unsafe { libc::atexit(runtime::stop_driver_calls_at_exit) };
        // SAFETY: registers three functions of no arguments that do
        // not unwind. They take and give back the library's locks and,
        // in the child, reset its counters and drop the parent's queued
        // work: that allocates and frees, which POSIX does not list as
        // async-signal-safe after a fork; glibc's fork resets its
        // allocator's locks in the child, which makes it sound there.
        unsafe {
            libc::pthread_atfork(
                Some(runtime::before_fork),
                Some(runtime::after_fork_in_parent),
                Some(runtime::after_fork_in_child),
            )
        };
        Ok(())
    })
    .clone()?;
    Ok(rt)
}

/// The oldest runtime this crate uses, as `hipRuntimeGetVersion` encodes
/// it: ROCm 5.7.
///
/// ```
/// use device_events_hip::{Hip, OLDEST_RUNTIME};
///
/// match Hip::runtime() {
///     Ok(found) if found.runtime_version < OLDEST_RUNTIME => {
///         println!("{found} is refused once a device is found")
///     }
///     Ok(found) => println!("{found}"),
///     Err(err) => println!("no HIP runtime: {err}"),
/// }
/// ```
pub const OLDEST_RUNTIME: i32 = 50_700_000;

/// Refuse a runtime older than [`OLDEST_RUNTIME`]: before ROCm 5.7,
/// `hipEventDestroy` reads the stream of the event's last record with no
/// check that it still lives, so a fence dropped after its stream would
/// have the runtime read freed memory. Asked once `hipInit` found a device:
/// an older runtime on a machine without one still says "no device".
fn refuse_before_rocm_5_7(rt: &Runtime) -> Result<(), DriverError> {
    let mut version = 0;
    // SAFETY: a writable output.
    check("hipRuntimeGetVersion", unsafe {
        (rt.fns.hipRuntimeGetVersion)(&mut version)
    })?;
    if version >= OLDEST_RUNTIME {
        return Ok(());
    }
    let found = RuntimeInfo {
        path: rt.path.clone(),
        runtime_version: version,
        driver_version: 0,
    };
    Err(DriverError::refused(
        <Hip as RawApi>::BACKEND,
        "loading the runtime",
        ErrorKind::Other,
        format!(
            "HIP runtime {} ({}) is older than ROCm 5.7, the oldest this crate uses: before 5.7 \
             hipEventDestroy reads freed memory when an event outlives the stream it was \
             recorded on; install ROCm 5.7 or later, or name one with DEVICE_EVENTS_HIP_RUNTIME",
            found.version(),
            found.path.display()
        ),
    ))
}

/// The calling thread's current device.
pub(crate) fn current() -> Result<c_int, DriverError> {
    let rt = runtime_initialised()?;
    let mut device = 0;
    // SAFETY: `device` is writable.
    check("hipGetDevice", unsafe {
        (rt.fns.hipGetDevice)(&mut device)
    })?;
    Ok(device)
}

/// Make `device` current: one a handle was made on, or the one current a
/// moment ago.
pub(crate) fn set_device(device: c_int) -> Result<(), DriverError> {
    let rt = runtime_initialised()?;
    // SAFETY: takes any ordinal; one that does not exist is refused.
    check("hipSetDevice", unsafe { (rt.fns.hipSetDevice)(device) })
}

/// The HIP runtime found here, described before any device is asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeInfo {
    /// The library loaded.
    pub path: PathBuf,
    /// `hipRuntimeGetVersion`: major × 10⁷ + minor × 10⁵ + patch.
    pub runtime_version: i32,
    /// `hipDriverGetVersion`, in the same encoding.
    pub driver_version: i32,
}

impl RuntimeInfo {
    /// `runtime_version` as ROCm writes it, such as `5.2.21153`.
    pub fn version(&self) -> String {
        let v = self.runtime_version;
        format!("{}.{}.{}", v / 10_000_000, v / 100_000 % 100, v % 100_000)
    }
}

impl std::fmt::Display for RuntimeInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HIP runtime {} ({})",
            self.version(),
            self.path.display()
        )
    }
}

impl Hip {
    /// How fences and windows made from now on wait for the device: by
    /// default `hipEventSynchronize` spins a core for the whole wait; with
    /// `blocking` their events are created with `hipEventBlockingSync`, so
    /// a wait sleeps, costs no core, and wakes later. Events made before
    /// keep their mode.
    ///
    /// ```
    /// device_events_hip::Hip::set_blocking_sync(true);
    /// # device_events_hip::Hip::set_blocking_sync(false);
    /// ```
    pub fn set_blocking_sync(blocking: bool) {
        Self::state().set_blocking_sync(blocking);
    }

    /// Whether `stream` is capturing a graph (`hipStreamIsCapturing`):
    /// screen a stream with this before profiling on it.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the runtime is missing or refuses the query.
    pub fn capture_status(stream: HipStream) -> Result<CaptureStatus, DriverError> {
        stream.capture_status()
    }

    /// Admit a stream made elsewhere, or the null stream of `device`.
    ///
    /// The null stream synchronizes implicitly with blocking streams only.
    /// Streams this crate creates are non-blocking (`hipStreamNonBlocking`),
    /// so, as HIP documents, they neither wait for the null stream's work
    /// nor it for theirs: order them with a fence. `stream_destroy` on the
    /// result forgets it and leaves the stream itself to its owner; the
    /// runtime reads the stream of an event's last record when the event is
    /// asked, so forgetting a stream other than the null stream first
    /// waits for its work (`hipStreamSynchronize`), and is refused while it
    /// captures a graph. The fences recorded on it then read complete
    /// without the runtime being asked about a stream you may destroy next.
    ///
    /// `hipStreamPerThread` is refused: it names another stream on each
    /// thread, which the runtime destroys as that thread exits, so an
    /// event recorded there could not be asked from another thread without
    /// the runtime reading a stream it may have freed. Admit a stream you
    /// made, or the null stream.
    ///
    /// # Safety
    ///
    /// `raw` is a live stream of `device` (or null), made by the same copy of
    /// the HIP runtime this crate loaded, and stays live until
    /// `stream_destroy` has run on the returned handle. A stream of another
    /// copy (another `libamdhip64` opened by path) means nothing to this
    /// one. This crate uses a runtime already loaded in the process before
    /// it opens one ([`runtime::search_path`]), so a runtime opened by the
    /// user's bindings first (as `cubecl-hip-sys` does) is the same;
    /// [`Hip::runtime`] says which library it is.
    ///
    /// # Errors
    ///
    /// When the runtime is missing or `device` does not exist.
    pub unsafe fn stream_from_raw(
        raw: hipStream_t,
        device: c_int,
    ) -> Result<HipStream, DriverError> {
        let rt = runtime_initialised()?;
        let mut count = 0;
        // SAFETY: `count` is writable.
        check("hipGetDeviceCount", unsafe {
            (rt.fns.hipGetDeviceCount)(&mut count)
        })?;
        if !(0..count).contains(&device) {
            return Err(DriverError::refused(
                Self::BACKEND,
                "Hip::stream_from_raw",
                ErrorKind::NoDevice,
                format!("device {device} does not exist (the runtime reports {count})"),
            ));
        }
        if raw as usize == HIP_STREAM_PER_THREAD {
            return Err(DriverError::refused(
                Self::BACKEND,
                "Hip::stream_from_raw",
                ErrorKind::InvalidHandle,
                "hipStreamPerThread names another stream on each thread, destroyed as that \
                 thread exits; admit a stream you made, or the null stream",
            ));
        }
        Ok(HipStream::admit_foreign(RawStream(raw), device))
    }

    /// Whether a HIP runtime can be loaded and initialised here, with a
    /// device; never panics.
    ///
    /// ```
    /// use device_events_hip::Hip;
    ///
    /// match Hip::probe() {
    ///     Ok(()) => println!("a HIP device is here"),
    ///     Err(err) => println!("no HIP device: {err}"),
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// A [`DriverError`] of kind [`ErrorKind::NoDevice`] when no runtime is
    /// found, or when it finds no AMD GPU; the runtime's own when `hipInit`
    /// fails otherwise.
    pub fn probe() -> Result<(), DriverError> {
        runtime_initialised().map(drop)
    }

    /// The runtime this crate loads, and its version: found or not, and
    /// which, whether or not a device is here. Calls no `hipInit`.
    ///
    /// ```
    /// use device_events_hip::Hip;
    ///
    /// match Hip::runtime() {
    ///     Ok(found) => println!("{found}"),
    ///     Err(err) => println!("{err}"),
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NoDevice`] when no runtime is found; the runtime's own
    /// when it cannot report its version.
    pub fn runtime() -> Result<RuntimeInfo, DriverError> {
        let rt = library()?;
        let (mut runtime_version, mut driver_version) = (0, 0);
        // SAFETY: writable outputs; neither needs `hipInit`.
        check("hipRuntimeGetVersion", unsafe {
            (rt.fns.hipRuntimeGetVersion)(&mut runtime_version)
        })?;
        // SAFETY: as above.
        check("hipDriverGetVersion", unsafe {
            (rt.fns.hipDriverGetVersion)(&mut driver_version)
        })?;
        Ok(RuntimeInfo {
            path: rt.path.clone(),
            runtime_version,
            driver_version,
        })
    }
}
