//! The OpenCL handles behind [`OpenClEvent`](crate::OpenClEvent) and
//! [`OpenClStream`](crate::OpenClStream) (`event.raw()`, for calls this
//! crate does not wrap), and the OpenCL calls: each one the checked layer
//! of `device-events-core` makes on live handles, with the handle's context
//! selected.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cl3::types::{cl_command_queue, cl_event};
use device_events_core::backend::{
    CallNames, CheckedStream, Gate, HostStamp, Permit, RawApi, State,
};
use device_events_core::{CaptureStatus, DriverError, ErrorKind};
use std::time::Duration;

use crate::anchor::{self, end_time};
use crate::context;
pub use crate::context::Context;
use crate::status::{check, error};
use crate::{LIVE_EVENTS, OpenCl};

const CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE: u64 = 1 << 0;
const CL_QUEUE_PROFILING_ENABLE: u64 = 1 << 1;
const CL_QUEUE_CONTEXT: u32 = 0x1090;
const CL_QUEUE_DEVICE: u32 = 0x1091;
const CL_QUEUE_PROPERTIES: u32 = 0x1093;
const CL_EVENT_COMMAND_EXECUTION_STATUS: u32 = 0x11D3;

/// An event: a slot for the marker of its last record.
#[derive(Debug)]
pub struct RawEvent {
    /// Null until recorded. Locked while a call uses the marker, so a
    /// concurrent record cannot release it meanwhile.
    marker: Mutex<cl_event>,
}

/// A command queue, and one reference to it: made by this crate, or
/// retained by [`OpenCl::stream_from_raw`]. The reference is released once:
/// by `stream_destroy`, or as the handle is forgotten (dropped).
#[derive(Debug)]
pub struct RawStream(cl_command_queue);

impl RawStream {
    /// `queue`, retained, once it is shown to be an in-order profiling
    /// queue of `held`'s context and device.
    ///
    /// # Safety
    ///
    /// `queue` is a live command queue.
    pub(crate) unsafe fn retain(
        queue: cl_command_queue,
        held: &Context,
    ) -> Result<Self, DriverError> {
        const CALL: &str = "OpenCl::stream_from_raw";
        let info = |param| {
            cl3::command_queue::get_command_queue_info(queue, param)
                .map_err(|code| error("clGetCommandQueueInfo", code))
        };
        let refuse = |why: &'static str| {
            Err(DriverError::refused(
                OpenCl::BACKEND_NAME,
                CALL,
                ErrorKind::InvalidHandle,
                why,
            ))
        };
        // Compared as addresses: `held` keeps its context and device
        // alive, so no other object can have either address meanwhile.
        if info(CL_QUEUE_CONTEXT)?.to_ptr() != held.raw as isize {
            return refuse(
                "the queue belongs to another context than the calling thread's (see \
                 OpenCl::select); an event of one context cannot be waited on in another",
            );
        }
        if info(CL_QUEUE_DEVICE)?.to_ptr() != held.device as isize {
            return refuse("the queue is of another device than the calling thread's");
        }
        let properties = u64::from(info(CL_QUEUE_PROPERTIES)?);
        if properties & CL_QUEUE_PROFILING_ENABLE == 0 {
            return refuse(
                "the queue was made without CL_QUEUE_PROFILING_ENABLE, so its markers have no \
                 times to read",
            );
        }
        if properties & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE != 0 {
            return refuse(
                "the queue runs out of order: work enqueued after a window's start marker \
                 could run before it",
            );
        }
        // SAFETY: a live queue (the caller's promise); this reference is
        // the new handle's, released once (`destroy_stream` or `Drop`).
        check("clRetainCommandQueue", unsafe {
            cl3::command_queue::retain_command_queue(queue)
        })?;
        Ok(Self(queue))
    }
}

impl Drop for RawStream {
    /// A queue forgotten by `stream_destroy` (one [`OpenCl::stream_from_raw`]
    /// admitted) lets its reference go here; its owner's stays.
    fn drop(&mut self) {
        // SAFETY: this value's one reference to the queue, released once:
        // `destroy_stream` releases it itself and never drops the value.
        if let Err(err) = check("clReleaseCommandQueue", unsafe {
            cl3::command_queue::release_command_queue(self.0)
        }) {
            log::error!("{}: {err}", OpenCl::BACKEND_NAME);
        }
    }
}

// SAFETY: `cl_event` and `cl_command_queue` are opaque handles, never
// dereferenced here, and the OpenCL API is thread-safe (1.1 on); the marker
// is only touched under its mutex.
unsafe impl Send for RawEvent {}
// SAFETY: as for `Send`: every `&RawEvent` access to the marker goes
// through the mutex.
unsafe impl Sync for RawEvent {}
// SAFETY: as for `RawEvent`.
unsafe impl Send for RawStream {}
// SAFETY: as for `RawEvent`; `&RawStream` only hands the handle to calls.
unsafe impl Sync for RawStream {}

impl RawEvent {
    fn lock(&self) -> MutexGuard<'_, cl_event> {
        self.marker.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Run `f` with the marker of the last record (null: never recorded),
    /// for calls this crate does not wrap, such as reading its profiling
    /// times. It cannot be released meanwhile.
    pub fn with_marker<R>(&self, f: impl FnOnce(cl_event) -> R) -> R {
        f(*self.lock())
    }
}

static STATE: State<OpenCl> = State::new();

// SAFETY (every call below): the permit says the checked layer made the
// call, so each handle is live and of one context (held by the handle), and
// a release gets its handle by value, exactly once.
impl RawApi for OpenCl {
    const BACKEND: &'static str = OpenCl::BACKEND_NAME;
    const CALLS: CallNames = CallNames {
        create_event: "RawEvent::new",
        destroy_event: "clReleaseEvent",
        record_event: "clEnqueueMarkerWithWaitList",
        synchronize_event: "clWaitForEvents",
        query_event: "clGetEventInfo",
        elapsed: "clGetEventProfilingInfo",
        create_stream: "clCreateCommandQueue",
        destroy_stream: "clReleaseCommandQueue",
        wait_event: "clEnqueueBarrierWithWaitList",
        synchronize_stream: "clFinish",
        bind: "clCreateUserEvent",
    };
    const WAITS_ACROSS_CONTEXTS: bool = false;
    /// The context's number in this process.
    type Context = u64;
    type Held = Arc<Context>;
    /// The thread's selection before.
    type Restore = Option<Arc<Context>>;
    type Event = RawEvent;
    type Stream = RawStream;
    type Handle = cl_command_queue;

    fn state() -> &'static State<Self> {
        &STATE
    }

    fn current(_: Permit<Self>) -> Result<Option<u64>, DriverError> {
        Ok(context::selected())
    }

    fn hold_current(_: Permit<Self>, _: &'static str) -> Result<Arc<Context>, DriverError> {
        context::current()
    }

    fn context_of(held: &Arc<Context>) -> u64 {
        held.id
    }

    fn bind(_: Permit<Self>, held: &Arc<Context>) -> Result<Self::Restore, DriverError> {
        Ok(context::swap(Some(Arc::clone(held))))
    }

    fn unbind(_: Permit<Self>, restore: Self::Restore, _: Option<u64>) -> Result<(), DriverError> {
        context::swap(restore);
        Ok(())
    }

    fn create_event(
        _: Permit<Self>,
        _: &Arc<Context>,
        _: bool,
        _: bool,
    ) -> Result<RawEvent, DriverError> {
        LIVE_EVENTS.fetch_add(1, Ordering::Relaxed);
        Ok(RawEvent {
            marker: Mutex::new(std::ptr::null_mut()),
        })
    }

    fn destroy_event(_: Permit<Self>, event: RawEvent) -> Result<(), DriverError> {
        let marker = event
            .marker
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        LIVE_EVENTS.fetch_sub(1, Ordering::Relaxed);
        if marker.is_null() {
            return Ok(());
        }
        // SAFETY: the last record's marker, this slot's own: released once.
        check("clReleaseEvent", unsafe {
            cl3::event::release_event(marker)
        })
    }

    fn record_event(
        _: Permit<Self>,
        event: &RawEvent,
        queue: &RawStream,
    ) -> Result<(), DriverError> {
        const CALL: &str = "clEnqueueMarkerWithWaitList";
        // SAFETY: the queue is live; an empty wait list.
        let marker = unsafe {
            cl3::command_queue::enqueue_marker_with_wait_list(queue.0, 0, std::ptr::null())
        }
        .map_err(|code| error(CALL, code))?;
        let old = std::mem::replace(&mut *event.lock(), marker);
        // Submitted now, so that a waiter never waits for a flush.
        let flushed = check("clFlush", cl3::command_queue::flush(queue.0));
        if !old.is_null() {
            // SAFETY: the marker this record replaced, out of the slot now:
            // released once.
            check("clReleaseEvent", unsafe { cl3::event::release_event(old) })?;
        }
        flushed
    }

    fn synchronize_event(_: Permit<Self>, event: &RawEvent) -> Result<(), DriverError> {
        // Retained, so that the wait runs outside the lock: a record may
        // replace the marker meanwhile.
        let marker = {
            let marker = event.lock();
            if marker.is_null() {
                return Ok(());
            }
            // SAFETY: the slot's live marker, under its lock.
            check("clRetainEvent", unsafe {
                cl3::event::retain_event(*marker)
            })?;
            *marker
        };
        let waited = check("clWaitForEvents", cl3::event::wait_for_events(&[marker]));
        // SAFETY: the retain taken above, released once.
        let released = check("clReleaseEvent", unsafe {
            cl3::event::release_event(marker)
        });
        waited.and(released)
    }

    fn query_event(_: Permit<Self>, event: &RawEvent) -> Result<bool, DriverError> {
        const CALL: &str = "clGetEventInfo";
        event.with_marker(|marker| {
            if marker.is_null() {
                return Ok(true);
            }
            let status = cl3::event::get_event_info(marker, CL_EVENT_COMMAND_EXECUTION_STATUS)
                .map_err(|code| error(CALL, code))?;
            match i32::from(status) {
                0 => Ok(true),
                failed if failed < 0 => Err(error(CALL, failed)),
                _ => Ok(false),
            }
        })
    }

    fn elapsed(_: Permit<Self>, start: &RawEvent, end: &RawEvent) -> Result<Duration, DriverError> {
        if start.with_marker(<*mut _>::is_null) || end.with_marker(<*mut _>::is_null) {
            return Err(DriverError::refused(
                Self::BACKEND,
                "clGetEventProfilingInfo",
                ErrorKind::InvalidHandle,
                "the event was never recorded",
            ));
        }
        let (from, to) = (start.with_marker(end_time)?, end.with_marker(end_time)?);
        Ok(Duration::from_nanos(to.saturating_sub(from)))
    }

    fn create_stream(_: Permit<Self>, held: &Arc<Context>) -> Result<RawStream, DriverError> {
        #[allow(deprecated)] // clCreateCommandQueue: OpenCL 1.2's, which 2.0+ keep.
        // SAFETY: the context and its device are live (held).
        let queue = unsafe {
            cl3::command_queue::create_command_queue(
                held.raw,
                held.device,
                CL_QUEUE_PROFILING_ENABLE,
            )
        }
        .map_err(|code| error("clCreateCommandQueue", code))?;
        Ok(RawStream(queue))
    }

    fn destroy_stream(_: Permit<Self>, queue: RawStream) -> Result<(), DriverError> {
        // Released here, so the error reaches the caller; not again by `Drop`.
        let queue = std::mem::ManuallyDrop::new(queue);
        // SAFETY: see the impl; the value's one reference, and its `Drop`
        // does not run.
        check("clReleaseCommandQueue", unsafe {
            cl3::command_queue::release_command_queue(queue.0)
        })
    }

    fn wait_event(_: Permit<Self>, queue: &RawStream, event: &RawEvent) -> Result<(), DriverError> {
        const CALL: &str = "clEnqueueBarrierWithWaitList";
        let marker = event.lock();
        if marker.is_null() {
            return Ok(());
        }
        // SAFETY: the queue is live; the wait list is the slot's live marker
        // (locked), of the queue's context.
        let barrier =
            unsafe { cl3::command_queue::enqueue_barrier_with_wait_list(queue.0, 1, &*marker) }
                .map_err(|code| error(CALL, code))?;
        drop(marker);
        let flushed = check("clFlush", cl3::command_queue::flush(queue.0));
        // SAFETY: the barrier's own event, not kept: released once.
        check("clReleaseEvent", unsafe {
            cl3::event::release_event(barrier)
        })?;
        flushed
    }

    fn synchronize_stream(_: Permit<Self>, queue: &RawStream) -> Result<(), DriverError> {
        check("clFinish", cl3::command_queue::finish(queue.0))
    }

    fn stream_handle(queue: &RawStream) -> cl_command_queue {
        queue.0
    }

    /// Never capturing: OpenCL 1.2 to 3.0 have no graph capture. A command
    /// buffer (`cl_khr_command_buffer`) is recorded by explicit
    /// `clCommand*` calls on the buffer, never by capturing a queue, so a
    /// marker on a queue is always a command that runs and is timed.
    fn capture_status(
        _: Permit<Self>,
        _: &RawStream,
    ) -> Result<Option<CaptureStatus>, DriverError> {
        Ok(Some(CaptureStatus::None))
    }

    fn anchor_gate(
        _: Permit<Self>,
        stream: CheckedStream<Self>,
    ) -> Result<Option<Box<dyn Gate>>, DriverError> {
        anchor::gate(stream)
    }

    fn pairing(
        _: Permit<Self>,
        event: &RawEvent,
        held: &Arc<Context>,
    ) -> Result<Option<HostStamp>, DriverError> {
        anchor::host_stamp(event, held)
    }
}
