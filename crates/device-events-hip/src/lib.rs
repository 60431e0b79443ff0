//! The HIP backend of device-events: [`EventApi`] over the HIP runtime,
//! `libamdhip64`, loaded at run time.
//!
//! Pick it with `device-events-core`: `EventFence<Hip>` and
//! `EventProfiler<Hip>` are the types to use.
//!
//! ```
//! use device_events_core::{EventApi, EventFence, EventProfiler};
//! use device_events_hip::Hip;
//!
//! let (a, b) = (Hip::stream_create_non_blocking()?, Hip::stream_create_non_blocking()?);
//! let mut profiler = EventProfiler::<Hip>::new();
//!
//! let window = profiler.start(a);
//! // ... enqueue work on `a` ...
//! let fence = EventFence::<Hip>::new(a);
//! fence.wait_async(b)?; // `b` runs after `a`'s work; the host does not block
//! let timing = profiler.stop(a, window)?;
//!
//! let ticks = pollster::block_on(timing.resolve()).expect("the window was read");
//! println!("{:?} on the device", ticks.duration());
//! # drop((fence, profiler));
//! # Hip::stream_destroy(a)?;
//! # Hip::stream_destroy(b)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Runtime
//!
//! Minimum ROCm: 5.0. The crate calls only `hipInit`, `hipGetDevice`,
//! `hipSetDevice`, `hipGetDeviceCount`, `hipEventCreateWithFlags`,
//! `hipEventRecord`, `hipEventSynchronize`, `hipEventQuery`, `hipEventElapsedTime`,
//! `hipEventDestroy`, `hipStreamCreateWithFlags`, `hipStreamWaitEvent`,
//! `hipStreamSynchronize`, `hipStreamDestroy`, `hipStreamIsCapturing`,
//! `hipGetErrorName`, `hipRuntimeGetVersion` and `hipDriverGetVersion`, all
//! in ROCm 5's runtime; and, where the runtime has them, for the profiler's
//! anchor gate, `hipDeviceGetAttribute`, `hipExtMallocWithFlags`,
//! `hipStreamWaitValue32` and `hipFree` (a runtime without them loads, and
//! its profiler anchors without a gate), and `hipThreadExchangeStreamCaptureMode`. It resolves nothing else. Nothing of ROCm is built
//! or linked at build time: the runtime is opened on first use from the
//! places [`runtime::search_path`] lists (`$ROCM_PATH/lib`, `$HIP_PATH/lib`,
//! `/opt/rocm/lib`, then the loader's search; `libamdhip64.so` or the
//! sonames of ROCm 7, 6 and 5). `libhiprtc` is never needed. Without a
//! runtime, every call returns an [`ErrorKind::NoDevice`] error.
//!
//! Statuses cross the binding as plain integers, so a code newer than this
//! crate (ROCm 6 and 7 return 911–916) keeps its number and is never read
//! as an invalid enum value. With the runtime and no AMD GPU, `hipInit`
//! returns `hipErrorInvalidDevice` (101), reported as [`ErrorKind::NoDevice`].
//! `hipEventElapsedTime` has been seen to return negative values; they are
//! clamped to zero, as [`EventApi::event_elapsed`] promises.
//!
//! # Graph capture
//!
//! Screen a stream with [`Hip::capture_status`] before profiling on it:
//! inside a capture, records are graph nodes, not timestamps.

mod capture;
mod gate;
pub mod runtime;

use std::ffi::{CStr, c_int};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use device_events_core::driver::{elapsed_from_ms, with_bound};
use device_events_core::handles::{Handle, HandleTable};
use device_events_core::profile::Duration;
use device_events_core::{CaptureStatus, DriverError, ErrorKind, EventApi, EventQuery};
use runtime::{RawEvent, RawStream, Runtime};

/// The HIP backend.
#[derive(Debug)]
pub struct Hip;

/// A HIP event with timing enabled, and the device it was created on.
#[derive(Debug)]
pub struct HipEvent {
    raw: RawEvent,
    device: c_int,
}

// SAFETY: `hipEvent_t` is an opaque handle into the runtime, never
// dereferenced here. The HIP runtime is thread-safe: an event may be
// recorded, synchronized, timed and destroyed from any host thread, given its
// device is current for the call, which every call here arranges by binding
// `device`. No interior mutability; `event_destroy` takes `&mut`.
unsafe impl Send for HipEvent {}
// SAFETY: as for `Send`: `&self` methods only pass the handle to thread-safe
// runtime calls.
unsafe impl Sync for HipEvent {}

impl HipEvent {
    /// The raw event, for calls this crate does not wrap.
    pub fn raw(&self) -> RawEvent {
        self.raw
    }

    /// The device the event was created on.
    pub fn device(&self) -> c_int {
        self.device
    }
}

/// A live stream: the runtime's handle, its device, and whether this crate
/// made it and so destroys it.
struct Live {
    raw: RawStream,
    device: c_int,
    owned: bool,
}

// SAFETY: `raw` is an opaque runtime handle, never dereferenced here, usable
// from any thread through the thread-safe runtime; the table hands it only
// to calls that bind `device` first.
unsafe impl Send for Live {}
// SAFETY: as for `Send`; `&Live` gives only copies of the handle.
unsafe impl Sync for Live {}

static STREAMS: HandleTable<Live> = HandleTable::new();

/// A HIP stream: a checked handle into this crate's table of live streams.
///
/// `Copy`, as [`EventApi`] requires. Once [`Hip::stream_destroy`] has run
/// on it, every copy is refused with an [`ErrorKind::InvalidHandle`] error
/// before any runtime call. A HIP handle depends on its device ordinal,
/// which no runtime call invalidates short of `hipDeviceReset`, and on the
/// runtime library, which stays loaded for the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HipStream {
    handle: Handle,
}

impl HipStream {
    /// Admit a stream made elsewhere, or the null stream of `device`.
    ///
    /// The null stream synchronizes implicitly with blocking streams only.
    /// Streams this crate creates are non-blocking (`hipStreamNonBlocking`),
    /// so, as HIP documents, they neither wait for the null stream's work
    /// nor it for theirs: order them with a fence.
    /// [`Hip::stream_destroy`] on the result forgets it and leaves the
    /// stream itself to its owner.
    ///
    /// # Safety
    ///
    /// `raw` is a live stream of `device` (or null), made by the same copy of
    /// the HIP runtime this crate loaded, and stays live until
    /// `Hip::stream_destroy` has run on the returned handle. A stream of
    /// another copy (another `libamdhip64` opened by path) means nothing to
    /// this one. This crate uses a runtime already loaded in the process
    /// before it opens one ([`runtime::search_path`]), so a runtime opened
    /// by the user's bindings first (as `cubecl-hip-sys` does) is the same;
    /// [`Hip::runtime`] says which library it is.
    ///
    /// # Errors
    ///
    /// When the runtime is missing or `device` does not exist.
    pub unsafe fn from_raw(raw: RawStream, device: c_int) -> Result<Self, DriverError> {
        let rt = runtime()?;
        let mut count = 0;
        // SAFETY: `count` is writable.
        check("hipGetDeviceCount", unsafe {
            (rt.fns.hipGetDeviceCount)(&mut count)
        })?;
        if !(0..count).contains(&device) {
            return Err(DriverError::refused(
                Hip::BACKEND,
                "HipStream::from_raw",
                ErrorKind::NoDevice,
                format!("device {device} does not exist (the runtime reports {count})"),
            ));
        }
        Ok(Self::admit(Live {
            raw,
            device,
            owned: false,
        }))
    }

    fn admit(live: Live) -> Self {
        Self {
            handle: STREAMS.insert(live),
        }
    }

    /// Run `f` with the raw stream, for calls this crate does not wrap; the
    /// stream cannot be destroyed meanwhile.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidHandle`] when the stream was destroyed.
    pub fn with_raw<R>(self, f: impl FnOnce(RawStream) -> R) -> Result<R, DriverError> {
        STREAMS
            .with(self.handle, |live| f(live.raw))
            .ok_or_else(|| dead("HipStream::with_raw"))
    }

    /// The device the stream belongs to, while it lives.
    pub fn device(self) -> Option<c_int> {
        STREAMS.with(self.handle, |live| live.device)
    }
}

fn dead(call: &'static str) -> DriverError {
    DriverError::refused(
        Hip::BACKEND,
        call,
        ErrorKind::InvalidHandle,
        "the stream was destroyed (or never admitted); refused before the runtime",
    )
}

/// Run `call` on `stream`'s raw handle with its device bound.
fn on_stream<T>(
    stream: HipStream,
    name: &'static str,
    call: impl FnOnce(&Runtime, &Live) -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    STREAMS
        .with(stream.handle, |live| {
            on_device(live.device, |rt| call(rt, live))
        })
        .ok_or_else(|| dead(name))?
}

fn live_event(event: &HipEvent, call: &'static str) -> Result<RawEvent, DriverError> {
    if event.raw.is_null() {
        return Err(DriverError::refused(
            Hip::BACKEND,
            call,
            ErrorKind::InvalidHandle,
            "the event was destroyed; refused before the runtime",
        ));
    }
    Ok(event.raw)
}

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
    Err(DriverError::from_c_status(Hip::BACKEND, call, status, name))
}

/// The runtime, loaded; the no-device error when there is none.
fn library() -> Result<&'static Runtime, DriverError> {
    runtime::loaded().map_err(|why| {
        DriverError::refused(
            Hip::BACKEND,
            "loading the runtime",
            ErrorKind::NoDevice,
            why,
        )
    })
}

/// The runtime, loaded and initialised once per process.
fn runtime() -> Result<&'static Runtime, DriverError> {
    static INIT: OnceLock<Result<(), DriverError>> = OnceLock::new();
    let rt = library()?;
    INIT.get_or_init(|| {
        // SAFETY: `hipInit` takes flags 0.
        check("hipInit", unsafe { (rt.fns.hipInit)(0) })
    })
    .clone()?;
    Ok(rt)
}

/// The calling thread's current device.
fn current() -> Result<c_int, DriverError> {
    let rt = runtime()?;
    let mut device = 0;
    // SAFETY: `device` is writable.
    check("hipGetDevice", unsafe {
        (rt.fns.hipGetDevice)(&mut device)
    })?;
    Ok(device)
}

/// Run `call` with `device` current, then restore the caller's device.
fn on_device<T>(
    device: c_int,
    call: impl FnOnce(&Runtime) -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    let rt = runtime()?;
    let set = |device: c_int| {
        // SAFETY: a device a handle was made on, or the one current a
        // moment ago.
        check("hipSetDevice", unsafe { (rt.fns.hipSetDevice)(device) })
    };
    with_bound(
        Hip::BACKEND,
        device,
        || current().map(Some),
        set,
        |previous| previous.map_or(Ok(()), set),
        || call(rt),
    )
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

/// Whether events made from now on wait by sleeping
/// (`hipEventBlockingSync`) rather than spinning.
static BLOCKING_SYNC: AtomicBool = AtomicBool::new(false);

fn wait_mode_flags() -> std::ffi::c_uint {
    if BLOCKING_SYNC.load(Ordering::Relaxed) {
        runtime::HIP_EVENT_BLOCKING_SYNC
    } else {
        runtime::HIP_EVENT_DEFAULT
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
        BLOCKING_SYNC.store(blocking, Ordering::Relaxed);
    }

    /// Whether `stream` is capturing a graph: screen a stream with this before
    /// profiling on it.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the runtime is missing or refuses the query.
    pub fn capture_status(stream: HipStream) -> Result<CaptureStatus, DriverError> {
        const CALL: &str = "hipStreamIsCapturing";
        let status = on_stream(stream, CALL, |rt, live| {
            let mut status = 0;
            // SAFETY: the stream is live, its device bound; `status` is
            // writable.
            check(CALL, unsafe {
                (rt.fns.hipStreamIsCapturing)(live.raw, &mut status)
            })?;
            Ok(status)
        })?;
        Ok(match status {
            runtime::HIP_STREAM_CAPTURE_STATUS_NONE => CaptureStatus::None,
            runtime::HIP_STREAM_CAPTURE_STATUS_ACTIVE => CaptureStatus::Active,
            _ => CaptureStatus::Invalidated,
        })
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
        runtime().map(drop)
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

impl EventApi for Hip {
    type Event = HipEvent;
    type Stream = HipStream;
    const BACKEND: &'static str = "hip";

    fn event_create() -> Result<HipEvent, DriverError> {
        let device = current()?;
        let rt = runtime()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is writable; the default flags keep timing enabled.
        check("hipEventCreateWithFlags", unsafe {
            (rt.fns.hipEventCreateWithFlags)(&mut raw, wait_mode_flags())
        })?;
        Ok(HipEvent { raw, device })
    }

    fn event_destroy(event: &mut HipEvent) -> Result<(), DriverError> {
        let raw = live_event(event, "hipEventDestroy")?;
        event.raw = std::ptr::null_mut();
        on_device(event.device, |rt| {
            // SAFETY: `raw` was created by `event_create` and, swapped out
            // above, is destroyed exactly once.
            check("hipEventDestroy", unsafe { (rt.fns.hipEventDestroy)(raw) })
        })
    }

    fn event_record(event: &HipEvent, stream: HipStream) -> Result<(), DriverError> {
        const CALL: &str = "hipEventRecord";
        let raw = live_event(event, CALL)?;
        on_stream(stream, CALL, |rt, live| {
            if event.device != live.device {
                return Err(DriverError::refused(
                    Self::BACKEND,
                    CALL,
                    ErrorKind::InvalidHandle,
                    format!(
                        "the event and the stream belong to different devices (event: {}, \
                         stream: {}); make the fence, pool or profiler with the stream's \
                         device current",
                        event.device, live.device
                    ),
                ));
            }
            // SAFETY: both handles are live and of the bound device.
            check(CALL, unsafe { (rt.fns.hipEventRecord)(raw, live.raw) })
        })
    }

    fn event_wait(event: &HipEvent) -> Result<(), DriverError> {
        let raw = live_event(event, "hipEventSynchronize")?;
        on_device(event.device, |rt| {
            capture::MODES.relaxed(|| {
                // SAFETY: the event is live, its device bound.
                check("hipEventSynchronize", unsafe {
                    (rt.fns.hipEventSynchronize)(raw)
                })
            })
        })
    }

    fn event_elapsed(start: &HipEvent, end: &HipEvent) -> Result<Duration, DriverError> {
        const CALL: &str = "hipEventElapsedTime";
        let (from, to) = (live_event(start, CALL)?, live_event(end, CALL)?);
        if start.device != end.device {
            return Err(DriverError::refused(
                Self::BACKEND,
                CALL,
                ErrorKind::Other,
                "elapsed time across devices is undefined",
            ));
        }
        let mut ms = 0.0f32;
        on_device(start.device, |rt| {
            // SAFETY: both events are live and of one device; `ms` is writable.
            check(CALL, unsafe {
                (rt.fns.hipEventElapsedTime)(&mut ms, from, to)
            })
        })?;
        elapsed_from_ms(Self::BACKEND, CALL, ms)
    }

    fn stream_wait_event(stream: HipStream, event: &HipEvent) -> Result<(), DriverError> {
        const CALL: &str = "hipStreamWaitEvent";
        let raw = live_event(event, CALL)?;
        on_stream(stream, CALL, |rt, live| {
            // SAFETY: both handles are live, the stream's device bound;
            // flags 0 is the default wait.
            check(CALL, unsafe {
                (rt.fns.hipStreamWaitEvent)(live.raw, raw, 0)
            })
        })
    }

    fn stream_synchronize(stream: HipStream) -> Result<(), DriverError> {
        const CALL: &str = "hipStreamSynchronize";
        on_stream(stream, CALL, |rt, live| {
            capture::MODES.relaxed(|| {
                // SAFETY: the stream is live, its device bound.
                check(CALL, unsafe { (rt.fns.hipStreamSynchronize)(live.raw) })
            })
        })
    }

    fn stream_create_non_blocking() -> Result<HipStream, DriverError> {
        let device = current()?;
        let rt = runtime()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is writable.
        check("hipStreamCreateWithFlags", unsafe {
            (rt.fns.hipStreamCreateWithFlags)(&mut raw, runtime::HIP_STREAM_NON_BLOCKING)
        })?;
        Ok(HipStream::admit(Live {
            raw,
            device,
            owned: true,
        }))
    }

    fn stream_destroy(stream: HipStream) -> Result<(), DriverError> {
        const CALL: &str = "hipStreamDestroy";
        runtime()?;
        // Out of the table first, once calls in flight on it have returned:
        // no copy of the handle can reach the runtime after this.
        let live = STREAMS.remove(stream.handle).ok_or_else(|| dead(CALL))?;
        if !live.owned {
            return Ok(());
        }
        on_device(live.device, |rt| {
            // SAFETY: made by `stream_create_non_blocking`, removed from the
            // table above, so destroyed exactly once; its device is bound.
            check(CALL, unsafe { (rt.fns.hipStreamDestroy)(live.raw) })
        })
    }
}

impl EventQuery for Hip {
    fn event_query(event: &HipEvent) -> Result<bool, DriverError> {
        const CALL: &str = "hipEventQuery";
        let raw = live_event(event, CALL)?;
        on_device(event.device, |rt| {
            capture::MODES.relaxed(|| {
                // SAFETY: the event is live, its device bound.
                match unsafe { (rt.fns.hipEventQuery)(raw) } {
                    runtime::HIP_ERROR_NOT_READY => Ok(false),
                    status => check(CALL, status).map(|()| true),
                }
            })
        })
    }
}

/// A gate where the runtime and device have stream memory operations, and
/// polls through `hipEventQuery`; stamps only as device time.
impl device_events_core::AnchorApi for Hip {
    fn poll(event: &HipEvent) -> Option<Result<bool, DriverError>> {
        Some(Self::event_query(event))
    }

    fn in_context_of<T>(stream: HipStream, call: impl FnOnce() -> T) -> Result<T, DriverError> {
        // Out of the table first: `call` uses the stream too.
        let device = STREAMS
            .with(stream.handle, |live| live.device)
            .ok_or_else(|| dead("hipSetDevice"))?;
        on_device(device, |_| Ok(call()))
    }

    fn own_thread() {
        capture::MODES.own_thread();
    }

    fn gate(stream: HipStream) -> Result<Option<Box<dyn device_events_core::Gate>>, DriverError> {
        Ok(gate::HipWord::new(stream)?.map(|word| {
            Box::new(device_events_core::WordGate::new(word)) as Box<dyn device_events_core::Gate>
        }))
    }
}
