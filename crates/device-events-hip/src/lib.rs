//! The HIP backend of device-events: [`EventApi`] over the HIP runtime,
//! through `cubecl-hip-sys`, with `libamdhip64` loaded at run time.
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
//! `hipSetDevice`, `hipEventCreateWithFlags`, `hipEventRecord`,
//! `hipEventSynchronize`, `hipEventElapsedTime`, `hipEventDestroy`,
//! `hipStreamCreateWithFlags`, `hipStreamWaitEvent`, `hipStreamSynchronize`,
//! `hipStreamDestroy`, `hipStreamIsCapturing` and `hipGetErrorName`, all in
//! ROCm 5's runtime. Nothing of ROCm is built or linked at build time:
//! `cubecl-hip-sys` opens `libamdhip64` and `libhiprtc` when first called
//! (`$ROCM_PATH/lib`, `$HIP_PATH/lib`, then the loader's search), and this
//! crate checks they load before any call, because the binding panics when
//! they do not.
//!
//! Statuses cross the binding as plain integers, so a code newer than the
//! bindings (ROCm 6 and 7 return 911–916) is reported, not undefined.
//! `hipEventElapsedTime` has been seen to return negative values; they are
//! clamped to zero, as [`EventApi::event_elapsed`] promises.
//!
//! # Graph capture
//!
//! Screen a stream with [`Hip::capture_status`] before profiling on it:
//! inside a capture, records are graph nodes, not timestamps.

use std::ffi::{CStr, c_int};
use std::sync::OnceLock;

use cubecl_hip_sys as sys;
use device_events_core::driver::{elapsed_from_ms, with_bound};
use device_events_core::handles::{Handle, HandleTable};
use device_events_core::profile::Duration;
use device_events_core::{CaptureStatus, DriverError, ErrorKind, EventApi};

/// The HIP backend.
#[derive(Debug)]
pub struct Hip;

/// A HIP event with timing enabled, and the device it was created on.
#[derive(Debug)]
pub struct HipEvent {
    raw: sys::hipEvent_t,
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
    pub fn raw(&self) -> sys::hipEvent_t {
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
    raw: sys::hipStream_t,
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
    /// [`Hip::stream_destroy`] on the result forgets it and leaves the
    /// stream itself to its owner.
    ///
    /// # Safety
    ///
    /// `raw` is a live stream of `device` (or null) and stays live until
    /// `Hip::stream_destroy` has run on the returned handle.
    ///
    /// # Errors
    ///
    /// When the runtime is missing or `device` does not exist.
    pub unsafe fn from_raw(raw: sys::hipStream_t, device: c_int) -> Result<Self, DriverError> {
        runtime()?;
        let mut count = 0;
        // SAFETY: `count` is writable.
        check("hipGetDeviceCount", unsafe {
            sys::hipGetDeviceCount(&mut count)
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
    pub fn with_raw<R>(self, f: impl FnOnce(sys::hipStream_t) -> R) -> Result<R, DriverError> {
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
    call: impl FnOnce(&Live) -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    STREAMS
        .with(stream.handle, |live| on_device(live.device, || call(live)))
        .ok_or_else(|| dead(name))?
}

fn live_event(event: &HipEvent, call: &'static str) -> Result<sys::hipEvent_t, DriverError> {
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
/// success. For code that mixes its own HIP calls with this crate's.
///
/// # Errors
///
/// The [`DriverError`] for any status but `hipSuccess`.
pub fn check(call: &'static str, status: sys::hipError_t) -> Result<(), DriverError> {
    if status == sys::HIP_SUCCESS {
        return Ok(());
    }
    // Named by the runtime only when it is loaded: the binding panics on a
    // call otherwise, and a status can reach here from a caller's own code.
    let name = loaded().then(|| {
        // SAFETY: the runtime is loaded, and `hipGetErrorName` returns a
        // static string (or null) for any code.
        unsafe {
            let name = sys::hipGetErrorName(status);
            (!name.is_null()).then(|| CStr::from_ptr(name).to_string_lossy().into_owned())
        }
    });
    let name = name.flatten();
    Err(DriverError::from_c_status(
        Hip::BACKEND,
        call,
        i64::from(status),
        name,
    ))
}

/// Whether the runtime's libraries load, probed once.
fn loaded() -> bool {
    static LOADED: OnceLock<bool> = OnceLock::new();
    *LOADED.get_or_init(sys::is_available)
}

/// Load the runtime and initialise it, once per process: the binding panics
/// on the first call when the libraries are absent, so nothing reaches it
/// before this.
fn runtime() -> Result<(), DriverError> {
    static RUNTIME: OnceLock<Result<(), DriverError>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            if !loaded() {
                return Err(DriverError::refused(
                    Hip::BACKEND,
                    "hipInit",
                    ErrorKind::NoDevice,
                    "no HIP runtime found (libamdhip64.so and libhiprtc.so could not be loaded)",
                ));
            }
            // SAFETY: the libraries are loaded; `hipInit` takes flags 0.
            check("hipInit", unsafe { sys::hipInit(0) })
        })
        .clone()
}

/// The calling thread's current device.
fn current() -> Result<c_int, DriverError> {
    runtime()?;
    let mut device = 0;
    // SAFETY: `device` is writable.
    check("hipGetDevice", unsafe { sys::hipGetDevice(&mut device) })?;
    Ok(device)
}

/// Run `call` with `device` current, then restore the caller's device.
fn on_device<T>(
    device: c_int,
    call: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    runtime()?;
    let set = |device: c_int| {
        // SAFETY: the runtime is loaded; a device a handle was made on, or
        // the one current a moment ago.
        check("hipSetDevice", unsafe { sys::hipSetDevice(device) })
    };
    with_bound(
        Hip::BACKEND,
        device,
        || current().map(Some),
        set,
        |previous| previous.map_or(Ok(()), set),
        call,
    )
}

impl Hip {
    /// Whether `stream` is capturing a graph: screen a stream with this before
    /// profiling on it.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the runtime is missing or refuses the query.
    pub fn capture_status(stream: HipStream) -> Result<CaptureStatus, DriverError> {
        const CALL: &str = "hipStreamIsCapturing";
        runtime()?;
        let status = on_stream(stream, CALL, |live| {
            let mut status = 0;
            // SAFETY: the stream is live, its device bound; `status` is
            // writable.
            check(CALL, unsafe {
                sys::hipStreamIsCapturing(live.raw, &mut status)
            })?;
            Ok(status)
        })?;
        Ok(match status {
            sys::hipStreamCaptureStatus_hipStreamCaptureStatusNone => CaptureStatus::None,
            sys::hipStreamCaptureStatus_hipStreamCaptureStatusActive => CaptureStatus::Active,
            _ => CaptureStatus::Invalidated,
        })
    }

    /// Whether a HIP runtime can be loaded and initialised here; never panics.
    ///
    /// # Errors
    ///
    /// A [`DriverError`] of kind [`ErrorKind::NoDevice`] when the libraries
    /// are not found, or the runtime's own when `hipInit` fails.
    pub fn probe() -> Result<(), DriverError> {
        runtime()
    }
}

impl EventApi for Hip {
    type Event = HipEvent;
    type Stream = HipStream;
    const BACKEND: &'static str = "hip";

    fn event_create() -> Result<HipEvent, DriverError> {
        let device = current()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is writable; `hipEventDefault` keeps timing enabled.
        check("hipEventCreateWithFlags", unsafe {
            sys::hipEventCreateWithFlags(&mut raw, sys::hipEventDefault)
        })?;
        Ok(HipEvent { raw, device })
    }

    fn event_destroy(event: &mut HipEvent) -> Result<(), DriverError> {
        let raw = live_event(event, "hipEventDestroy")?;
        event.raw = std::ptr::null_mut();
        on_device(event.device, || {
            // SAFETY: `raw` was created by `event_create` and, swapped out
            // above, is destroyed exactly once.
            check("hipEventDestroy", unsafe { sys::hipEventDestroy(raw) })
        })
    }

    fn event_record(event: &HipEvent, stream: HipStream) -> Result<(), DriverError> {
        const CALL: &str = "hipEventRecord";
        let raw = live_event(event, CALL)?;
        on_stream(stream, CALL, |live| {
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
            check(CALL, unsafe { sys::hipEventRecord(raw, live.raw) })
        })
    }

    fn event_wait(event: &HipEvent) -> Result<(), DriverError> {
        let raw = live_event(event, "hipEventSynchronize")?;
        on_device(event.device, || {
            // SAFETY: the event is live, its device bound.
            check("hipEventSynchronize", unsafe {
                sys::hipEventSynchronize(raw)
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
        on_device(start.device, || {
            // SAFETY: both events are live and of one device; `ms` is writable.
            check(CALL, unsafe { sys::hipEventElapsedTime(&mut ms, from, to) })
        })?;
        elapsed_from_ms(Self::BACKEND, CALL, ms)
    }

    fn stream_wait_event(stream: HipStream, event: &HipEvent) -> Result<(), DriverError> {
        const CALL: &str = "hipStreamWaitEvent";
        let raw = live_event(event, CALL)?;
        on_stream(stream, CALL, |live| {
            // SAFETY: both handles are live, the stream's device bound;
            // flags 0 is the default wait.
            check(CALL, unsafe { sys::hipStreamWaitEvent(live.raw, raw, 0) })
        })
    }

    fn stream_synchronize(stream: HipStream) -> Result<(), DriverError> {
        const CALL: &str = "hipStreamSynchronize";
        on_stream(stream, CALL, |live| {
            // SAFETY: the stream is live, its device bound.
            check(CALL, unsafe { sys::hipStreamSynchronize(live.raw) })
        })
    }

    fn stream_create_non_blocking() -> Result<HipStream, DriverError> {
        let device = current()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is writable.
        check("hipStreamCreateWithFlags", unsafe {
            sys::hipStreamCreateWithFlags(&mut raw, sys::hipStreamNonBlocking)
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
        on_device(live.device, || {
            // SAFETY: made by `stream_create_non_blocking`, removed from the
            // table above, so destroyed exactly once; its device is bound.
            check(CALL, unsafe { sys::hipStreamDestroy(live.raw) })
        })
    }
}
