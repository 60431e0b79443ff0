//! The runtime's handles behind [`HipEvent`](crate::HipEvent) and
//! [`HipStream`](crate::HipStream) (`event.raw()`, for calls this crate
//! does not wrap), and the runtime calls: each one the checked layer of
//! `device-events-core` makes on live handles, with the handle's device
//! bound.

use std::ffi::c_int;
use std::sync::OnceLock;

use device_events_core::backend::elapsed_from_ms;
use device_events_core::backend::{CallNames, HostWord, Permit, RawApi, State};
use device_events_core::{CaptureStatus, DriverError};
use std::time::Duration;

use crate::runtime::{self, hipEvent_t, hipStream_t};
use crate::{Hip, check, gate, runtime as rt};

/// A `hipEvent_t` this crate created; not `Clone`, so destroyed once.
#[derive(Debug)]
pub struct RawEvent(hipEvent_t);

/// A `hipStream_t`: one this crate created, or one admitted by
/// [`Hip::stream_from_raw`].
#[derive(Debug)]
pub struct RawStream(pub(crate) hipStream_t);

// SAFETY: opaque runtime handles, never dereferenced here. The HIP runtime
// is thread-safe: an event or stream may be used from any host thread given
// its device is current, which the checked layer arranges.
unsafe impl Send for RawEvent {}
// SAFETY: as for `Send`; `&RawEvent` only hands the handle to calls.
unsafe impl Sync for RawEvent {}
// SAFETY: as for `RawEvent`.
unsafe impl Send for RawStream {}
// SAFETY: as for `RawEvent`.
unsafe impl Sync for RawStream {}

impl RawEvent {
    /// The runtime's event, for calls this crate does not wrap.
    pub fn get(&self) -> hipEvent_t {
        self.0
    }
}

/// Call driver function `$f` and check its status. Only the `RawApi`
/// calls below use it.
macro_rules! hip {
    ($f:ident($($arg:expr),* $(,)?)) => {{
        let f = fns()?.$f;
        // SAFETY: a `RawApi` call's permit says every handle passed is live,
        // of the held device, which is current (a call whose binding fails
        // is refused, except a destroy, which the runtime takes for the
        // handle's own device, current or not), made by this copy of the
        // runtime, and destroyed exactly once (by value); every
        // out-pointer passed is a writable local.
        check(stringify!($f), unsafe { f($($arg),*) })
    }};
}

static STATE: State<Hip> = State::new();

/// Contexts are device ordinals; handles are of the runtime this crate
/// loaded.
impl RawApi for Hip {
    const BACKEND: &'static str = "hip";
    const CALLS: CallNames = CallNames {
        create_event: "hipEventCreateWithFlags",
        destroy_event: "hipEventDestroy",
        record_event: "hipEventRecord",
        synchronize_event: "hipEventSynchronize",
        query_event: "hipEventQuery",
        elapsed: "hipEventElapsedTime",
        create_stream: "hipStreamCreateWithFlags",
        destroy_stream: "hipStreamDestroy",
        wait_event: "hipStreamWaitEvent",
        synchronize_stream: "hipStreamSynchronize",
        bind: "hipSetDevice",
    };
    /// A device ordinal.
    type Context = c_int;
    type Held = c_int;
    type Restore = ();
    type Event = RawEvent;
    type Stream = RawStream;
    type Handle = hipStream_t;

    fn state() -> &'static State<Self> {
        &STATE
    }

    fn current(_: Permit<Self>) -> Result<Option<c_int>, DriverError> {
        crate::current().map(Some)
    }

    fn hold_current(_: Permit<Self>, _: &'static str) -> Result<c_int, DriverError> {
        crate::current()
    }

    fn context_of(device: &c_int) -> c_int {
        *device
    }

    fn bind(_: Permit<Self>, device: &c_int) -> Result<(), DriverError> {
        crate::set_device(*device)
    }

    fn unbind(_: Permit<Self>, (): (), previous: Option<c_int>) -> Result<(), DriverError> {
        previous.map_or(Ok(()), crate::set_device)
    }

    fn create_event(
        _: Permit<Self>,
        _: &c_int,
        blocking_sync: bool,
        timing: bool,
    ) -> Result<RawEvent, DriverError> {
        let mut flags = if blocking_sync {
            runtime::HIP_EVENT_BLOCKING_SYNC
        } else {
            runtime::HIP_EVENT_DEFAULT
        };
        if !timing {
            flags |= runtime::HIP_EVENT_DISABLE_TIMING;
        }
        let mut raw = std::ptr::null_mut();
        hip!(hipEventCreateWithFlags(&mut raw, flags))?;
        Ok(RawEvent(raw))
    }

    fn destroy_event(_: Permit<Self>, event: RawEvent) -> Result<(), DriverError> {
        hip!(hipEventDestroy(event.0))
    }

    fn record_event(
        _: Permit<Self>,
        event: &RawEvent,
        stream: &RawStream,
    ) -> Result<(), DriverError> {
        hip!(hipEventRecord(event.0, stream.0))
    }

    fn synchronize_event(_: Permit<Self>, event: &RawEvent) -> Result<(), DriverError> {
        hip!(hipEventSynchronize(event.0))
    }

    fn query_event(_: Permit<Self>, event: &RawEvent) -> Result<bool, DriverError> {
        // SAFETY: the permit's, as for `hip!`.
        match unsafe { (fns()?.hipEventQuery)(event.0) } {
            runtime::HIP_ERROR_NOT_READY => Ok(false),
            status => check("hipEventQuery", status).map(|()| true),
        }
    }

    fn elapsed(_: Permit<Self>, start: &RawEvent, end: &RawEvent) -> Result<Duration, DriverError> {
        let mut ms = 0.0f32;
        hip!(hipEventElapsedTime(&mut ms, start.0, end.0))?;
        elapsed_from_ms(Self::BACKEND, "hipEventElapsedTime", ms)
    }

    fn create_stream(_: Permit<Self>, _: &c_int) -> Result<RawStream, DriverError> {
        let mut raw = std::ptr::null_mut();
        hip!(hipStreamCreateWithFlags(
            &mut raw,
            runtime::HIP_STREAM_NON_BLOCKING
        ))?;
        Ok(RawStream(raw))
    }

    fn destroy_stream(_: Permit<Self>, stream: RawStream) -> Result<(), DriverError> {
        hip!(hipStreamDestroy(stream.0))
    }

    fn wait_event(
        _: Permit<Self>,
        stream: &RawStream,
        event: &RawEvent,
    ) -> Result<(), DriverError> {
        hip!(hipStreamWaitEvent(stream.0, event.0, 0))
    }

    fn synchronize_stream(_: Permit<Self>, stream: &RawStream) -> Result<(), DriverError> {
        hip!(hipStreamSynchronize(stream.0))
    }

    fn stream_handle(stream: &RawStream) -> hipStream_t {
        stream.0
    }

    fn capture_status(
        _: Permit<Self>,
        stream: &RawStream,
    ) -> Result<Option<CaptureStatus>, DriverError> {
        let mut status = 0;
        hip!(hipStreamIsCapturing(stream.0, &mut status))?;
        Ok(Some(match status {
            runtime::HIP_STREAM_CAPTURE_STATUS_NONE => CaptureStatus::None,
            runtime::HIP_STREAM_CAPTURE_STATUS_ACTIVE => CaptureStatus::Active,
            _ => CaptureStatus::Invalidated,
        }))
    }

    /// clr (`hipEventSynchronize` from 6.0, `ihipEventQuery` from 6.2, to
    /// today's amd-staging) reads the stream of an event's last record,
    /// unless that was the null stream, with no check that it still lives;
    /// `hipEventDestroy` and `hipStreamWaitEvent` check it and then use it
    /// with no lock held. `hipStreamDestroy` waits for the stream's work:
    /// clr does (`HostQueue::terminate`), HIP's reference does not say so.
    fn asking_reads_stream_of(stream: &RawStream) -> bool {
        !stream.0.is_null()
    }

    /// clr before 7.2 (`ihipEventQuery`, `hipEventSynchronize`) invalidates
    /// the capture of the stream an event was last recorded on when the
    /// event is asked, unless that was the null stream.
    fn asking_breaks_capture_of(stream: &RawStream) -> bool {
        !stream.0.is_null() && asking_breaks_capture()
    }

    /// Where the runtime has `hipThreadExchangeStreamCaptureMode` (ROCm 5.0
    /// on); a runtime without it is left as it is.
    fn exchange_capture_mode(_: Permit<Self>, mode: &mut i32) -> Result<bool, DriverError> {
        let Some(exchange) = rt::loaded().ok().and_then(|rt| rt.exchange_capture_mode) else {
            return Ok(false);
        };
        // SAFETY: `mode` is valid for a read and a write.
        check("hipThreadExchangeStreamCaptureMode", unsafe {
            exchange(mode)
        })?;
        Ok(true)
    }

    fn host_word(
        _: Permit<Self>,
        device: &c_int,
    ) -> Result<Option<Box<dyn HostWord<Self>>>, DriverError> {
        gate::word(*device)
    }
}

/// Whether the loaded runtime is older than ROCm 7.2, whose clr asks an
/// event's capture only for records made inside one; assumed when its
/// version cannot be read.
fn asking_breaks_capture() -> bool {
    static OLDER: OnceLock<bool> = OnceLock::new();
    *OLDER.get_or_init(|| Hip::runtime().map_or(true, |found| found.runtime_version < 70_200_000))
}

/// The runtime's functions, initialised.
fn fns() -> Result<&'static runtime::Functions, DriverError> {
    crate::runtime_initialised().map(|rt| &rt.fns)
}
