//! The OpenCL calls: each one the checked layer of `device-events-core`
//! makes on live handles, with the handle's context selected.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cl3::types::{cl_command_queue, cl_event};
use device_events_core::backend::{
    CallNames, CheckedStream, Gate, HostStamp, Permit, RawApi, State,
};
use device_events_core::profile::Duration;
use device_events_core::{DriverError, ErrorKind};

use crate::anchor::{self, end_time};
use crate::context::{self, ClContext};
use crate::status::{check, error};
use crate::{LIVE_EVENTS, OpenCl};

const CL_QUEUE_PROFILING_ENABLE: u64 = 1 << 1;
const CL_EVENT_COMMAND_EXECUTION_STATUS: u32 = 0x11D3;

/// An event: a slot for the marker of its last record.
#[derive(Debug)]
pub struct ClMarker {
    /// Null until recorded. Locked while a call uses the marker, so a
    /// concurrent record cannot release it meanwhile.
    marker: Mutex<cl_event>,
}

/// A command queue this crate created.
#[derive(Debug)]
pub struct ClQueue(cl_command_queue);

// SAFETY: `cl_event` and `cl_command_queue` are opaque handles, never
// dereferenced here, and the OpenCL API is thread-safe (1.1 on); the marker
// is only touched under its mutex.
unsafe impl Send for ClMarker {}
// SAFETY: as for `Send`: every `&ClMarker` access to the marker goes
// through the mutex.
unsafe impl Sync for ClMarker {}
// SAFETY: as for `ClMarker`.
unsafe impl Send for ClQueue {}
// SAFETY: as for `ClMarker`; `&ClQueue` only hands the handle to calls.
unsafe impl Sync for ClQueue {}

impl ClMarker {
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
        create_event: "ClMarker::new",
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
    const POLLS_ANCHORS: bool = false;
    /// The context's number in this process.
    type Context = u64;
    type Held = Arc<ClContext>;
    /// The thread's selection before.
    type Restore = Option<Arc<ClContext>>;
    type Event = ClMarker;
    type Stream = ClQueue;
    type Handle = cl_command_queue;

    fn state() -> &'static State<Self> {
        &STATE
    }

    fn current(_: Permit<Self>) -> Result<Option<u64>, DriverError> {
        Ok(context::selected())
    }

    fn hold_current(_: Permit<Self>, _: &'static str) -> Result<Arc<ClContext>, DriverError> {
        context::current()
    }

    fn context_of(held: &Arc<ClContext>) -> u64 {
        held.id
    }

    fn bind(_: Permit<Self>, held: &Arc<ClContext>) -> Result<Self::Restore, DriverError> {
        Ok(context::swap(Some(Arc::clone(held))))
    }

    fn unbind(_: Permit<Self>, restore: Self::Restore, _: Option<u64>) -> Result<(), DriverError> {
        context::swap(restore);
        Ok(())
    }

    fn create_event(_: Permit<Self>, _: &Arc<ClContext>, _: bool) -> Result<ClMarker, DriverError> {
        LIVE_EVENTS.fetch_add(1, Ordering::Relaxed);
        Ok(ClMarker {
            marker: Mutex::new(std::ptr::null_mut()),
        })
    }

    fn destroy_event(_: Permit<Self>, event: ClMarker) -> Result<(), DriverError> {
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

    fn record_event(_: Permit<Self>, event: &ClMarker, queue: &ClQueue) -> Result<(), DriverError> {
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

    fn synchronize_event(_: Permit<Self>, event: &ClMarker) -> Result<(), DriverError> {
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

    fn query_event(_: Permit<Self>, event: &ClMarker) -> Result<bool, DriverError> {
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

    fn elapsed(_: Permit<Self>, start: &ClMarker, end: &ClMarker) -> Result<Duration, DriverError> {
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

    fn create_stream(_: Permit<Self>, held: &Arc<ClContext>) -> Result<ClQueue, DriverError> {
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
        Ok(ClQueue(queue))
    }

    fn destroy_stream(_: Permit<Self>, queue: ClQueue) -> Result<(), DriverError> {
        // SAFETY: see the impl.
        check("clReleaseCommandQueue", unsafe {
            cl3::command_queue::release_command_queue(queue.0)
        })
    }

    fn wait_event(_: Permit<Self>, queue: &ClQueue, event: &ClMarker) -> Result<(), DriverError> {
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

    fn synchronize_stream(_: Permit<Self>, queue: &ClQueue) -> Result<(), DriverError> {
        check("clFinish", cl3::command_queue::finish(queue.0))
    }

    fn stream_handle(queue: &ClQueue) -> cl_command_queue {
        queue.0
    }

    fn anchor_gate(
        _: Permit<Self>,
        stream: CheckedStream<Self>,
    ) -> Result<Option<Box<dyn Gate>>, DriverError> {
        anchor::gate(stream)
    }

    fn stamp_on_host(
        _: Permit<Self>,
        event: &ClMarker,
        held: &Arc<ClContext>,
    ) -> Result<Option<HostStamp>, DriverError> {
        anchor::host_stamp(event, held)
    }
}
