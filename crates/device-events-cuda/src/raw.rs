//! The driver's handles behind [`CudaEvent`](crate::CudaEvent) and
//! [`CudaStream`](crate::CudaStream) (`event.raw()`, for calls this crate
//! does not wrap), and the driver calls: each one the checked layer of
//! `device-events-core` makes on live handles, with the handle's context
//! bound.

use std::ffi::c_uint;
use std::sync::Arc;

use cudarc::driver::sys::{CUevent, CUstream};
use device_events_core::backend::elapsed_from_ms;
use device_events_core::backend::{CallNames, HostWord, Permit, RawApi, State};
use device_events_core::{CaptureStatus, DriverError};
use std::time::Duration;

pub use crate::context::Context;
use crate::context::retain_current;
use crate::{BACKEND, Cuda, api, check_status, ffi, gate};

/// A `CUevent` this crate created; not `Clone`, so destroyed once.
#[derive(Debug)]
pub struct RawEvent(CUevent);

/// A `CUstream`: one this crate created, or one admitted by
/// [`Cuda::stream_from_raw`].
#[derive(Debug)]
pub struct RawStream(pub(crate) CUstream);

// SAFETY: opaque driver handles, never dereferenced here. The CUDA driver
// API is thread-safe: an event or stream may be used from any host thread
// given its context is current, which the checked layer arranges.
unsafe impl Send for RawEvent {}
// SAFETY: as for `Send`; `&RawEvent` only hands the handle to driver calls.
unsafe impl Sync for RawEvent {}
// SAFETY: as for `RawEvent`.
unsafe impl Send for RawStream {}
// SAFETY: as for `RawEvent`.
unsafe impl Sync for RawStream {}

impl RawEvent {
    /// The driver's event, for calls this crate does not wrap.
    pub fn get(&self) -> CUevent {
        self.0
    }
}

/// Call driver function `$f` and check its status. Only the `RawApi`
/// calls below use it.
macro_rules! cu {
    ($f:ident($($arg:expr),* $(,)?)) => {{
        let f = api()?.$f;
        // SAFETY: a `RawApi` call's permit says every handle passed is live,
        // of the held context, which is bound (a call whose binding fails
        // is refused, except a destroy, which the driver takes for the
        // handle's own context, bound or not; and a record the caller
        // vouched for, on a stream `records_in_own_context` says names its
        // context, which the driver takes for that context), and destroyed
        // exactly once (by value); every out-pointer passed is a writable
        // local.
        check_status(stringify!($f), unsafe { f($($arg),*) })
    }};
}

static STATE: State<Cuda> = State::new();

/// Contexts are primary contexts, retained by every handle of theirs.
impl RawApi for Cuda {
    const BACKEND: &'static str = BACKEND;
    const CALLS: CallNames = CallNames {
        create_event: "cuEventCreate",
        destroy_event: "cuEventDestroy_v2",
        record_event: "cuEventRecord",
        synchronize_event: "cuEventSynchronize",
        query_event: "cuEventQuery",
        elapsed: "cuEventElapsedTime",
        create_stream: "cuStreamCreate",
        destroy_stream: "cuStreamDestroy_v2",
        wait_event: "cuStreamWaitEvent",
        synchronize_stream: "cuStreamSynchronize",
        bind: "cuCtxPushCurrent_v2",
    };
    /// A `CUcontext`'s address.
    type Context = usize;
    type Held = Arc<Context>;
    type Restore = ();
    type Event = RawEvent;
    type Stream = RawStream;
    type Handle = CUstream;

    fn state() -> &'static State<Self> {
        &STATE
    }

    #[inline]
    fn current(_: Permit<Self>) -> Result<Option<usize>, DriverError> {
        crate::context::current().map(|ctx| ctx.map(|ctx| ctx as usize))
    }

    fn hold_current(_: Permit<Self>, call: &'static str) -> Result<Arc<Context>, DriverError> {
        retain_current(call)
    }

    fn context_of(held: &Arc<Context>) -> usize {
        held.raw as usize
    }

    fn bind(_: Permit<Self>, held: &Arc<Context>) -> Result<(), DriverError> {
        crate::context::push(held.raw)
    }

    fn unbind(_: Permit<Self>, (): (), _: Option<usize>) -> Result<(), DriverError> {
        crate::context::pop()
    }

    fn create_event(
        _: Permit<Self>,
        _: &Arc<Context>,
        blocking_sync: bool,
        timing: bool,
    ) -> Result<RawEvent, DriverError> {
        let mut flags = if blocking_sync {
            ffi::EVENT_BLOCKING_SYNC
        } else {
            ffi::EVENT_DEFAULT
        };
        if !timing {
            flags |= ffi::EVENT_DISABLE_TIMING;
        }
        let mut raw = std::ptr::null_mut();
        cu!(cuEventCreate(&mut raw, flags))?;
        Ok(RawEvent(raw))
    }

    fn destroy_event(_: Permit<Self>, event: RawEvent) -> Result<(), DriverError> {
        cu!(cuEventDestroy_v2(event.0))
    }

    #[inline]
    fn record_event(
        _: Permit<Self>,
        event: &RawEvent,
        stream: &RawStream,
    ) -> Result<(), DriverError> {
        cu!(cuEventRecord(event.0, stream.0))
    }

    fn synchronize_event(_: Permit<Self>, event: &RawEvent) -> Result<(), DriverError> {
        cu!(cuEventSynchronize(event.0))
    }

    fn query_event(_: Permit<Self>, event: &RawEvent) -> Result<bool, DriverError> {
        // SAFETY: the permit's, as for `cu!`.
        match unsafe { (api()?.cuEventQuery)(event.0) } {
            ffi::NOT_READY => Ok(false),
            status => check_status("cuEventQuery", status).map(|()| true),
        }
    }

    fn elapsed(_: Permit<Self>, start: &RawEvent, end: &RawEvent) -> Result<Duration, DriverError> {
        let mut ms = 0.0f32;
        cu!(cuEventElapsedTime(&mut ms, start.0, end.0))?;
        elapsed_from_ms(BACKEND, "cuEventElapsedTime", ms)
    }

    fn create_stream(_: Permit<Self>, _: &Arc<Context>) -> Result<RawStream, DriverError> {
        let mut raw = std::ptr::null_mut();
        cu!(cuStreamCreate(&mut raw, ffi::STREAM_NON_BLOCKING))?;
        Ok(RawStream(raw))
    }

    fn destroy_stream(_: Permit<Self>, stream: RawStream) -> Result<(), DriverError> {
        cu!(cuStreamDestroy_v2(stream.0))
    }

    fn wait_event(
        _: Permit<Self>,
        stream: &RawStream,
        event: &RawEvent,
    ) -> Result<(), DriverError> {
        cu!(cuStreamWaitEvent(stream.0, event.0, 0))
    }

    fn synchronize_stream(_: Permit<Self>, stream: &RawStream) -> Result<(), DriverError> {
        cu!(cuStreamSynchronize(stream.0))
    }

    /// A stream made by `cuStreamCreate` names its context; the null,
    /// legacy (`CU_STREAM_LEGACY`, 0x1) and per-thread
    /// (`CU_STREAM_PER_THREAD`, 0x2) handles name the current context's.
    fn records_in_own_context(stream: &RawStream) -> bool {
        stream.0 as usize > 0x2
    }

    fn stream_handle(stream: &RawStream) -> CUstream {
        stream.0
    }

    fn capture_status(
        _: Permit<Self>,
        stream: &RawStream,
    ) -> Result<Option<CaptureStatus>, DriverError> {
        let mut status = 0u32;
        cu!(cuStreamIsCapturing(stream.0, &mut status))?;
        Ok(Some(match status {
            ffi::CAPTURE_NONE => CaptureStatus::None,
            ffi::CAPTURE_ACTIVE => CaptureStatus::Active,
            _ => CaptureStatus::Invalidated,
        }))
    }

    fn exchange_capture_mode(_: Permit<Self>, mode: &mut i32) -> Result<bool, DriverError> {
        let mut raw: c_uint = mode.cast_unsigned();
        cu!(cuThreadExchangeStreamCaptureMode(&mut raw))?;
        *mode = raw.cast_signed();
        Ok(true)
    }

    fn host_word(
        _: Permit<Self>,
        held: &Arc<Context>,
    ) -> Result<Option<Box<dyn HostWord<Self>>>, DriverError> {
        gate::word(held.device)
    }
}
