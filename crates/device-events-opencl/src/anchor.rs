//! Anchoring on OpenCL: a user event as the gate, and PoCL's stamps read
//! on the host clock they are taken on.

use std::sync::Arc;

use cl3::types::cl_event;
use device_events_core::DriverError;
use device_events_core::backend::RawApi;
use device_events_core::backend::{Gate, HostStamp};
use std::time::Duration;

use crate::context::Context;
use crate::status::{check, error};
use crate::{OpenCl, OpenClStream};

const CL_PROFILING_COMMAND_END: u32 = 0x1283;

/// `CL_COMPLETE`.
const COMPLETE: i32 = 0;

/// A queue held behind user events: each `close` enqueues a barrier on a
/// new user event, each `open` completes them all.
struct UserEventGate {
    queue: OpenClStream,
    context: Arc<Context>,
    /// User events the queue waits on, not yet completed.
    closed: Vec<cl_event>,
}

// SAFETY: `cl_event` is an opaque handle, used only through the thread-safe
// OpenCL API; the gate is used by one thread at a time (`&mut self`).
unsafe impl Send for UserEventGate {}

impl Gate for UserEventGate {
    fn close(&mut self) -> Result<(), DriverError> {
        const CALL: &str = "clEnqueueBarrierWithWaitList";
        let user = cl3::event::create_user_event(self.context.raw)
            .map_err(|code| error("clCreateUserEvent", code))?;
        // Held before anything can fail, so that `open` completes it.
        self.closed.push(user);
        self.queue.with_live(CALL, |queue, _| {
            let queue = <OpenCl as RawApi>::stream_handle(queue);
            // SAFETY: the queue is live while the table holds it; the wait
            // list is the one user event made above, of the queue's
            // context.
            let barrier = unsafe {
                cl3::command_queue::enqueue_barrier_with_wait_list(queue, 1, &raw const user)
            }
            .map_err(|code| error(CALL, code))?;
            // SAFETY: the barrier's own event, not kept: released once.
            check("clReleaseEvent", unsafe {
                cl3::event::release_event(barrier)
            })?;
            check("clFlush", cl3::command_queue::flush(queue))
        })?
    }

    fn open(&mut self) -> Result<(), DriverError> {
        let mut first = Ok(());
        for user in self.closed.drain(..) {
            let set = cl3::event::set_user_event_status(user, COMPLETE)
                .map_err(|code| error("clSetUserEventStatus", code));
            // SAFETY: made by `clCreateUserEvent` and drained from the list
            // above: released exactly once, after its status is set.
            let released = check("clReleaseEvent", unsafe { cl3::event::release_event(user) });
            first = first.and(set).and(released);
        }
        first
    }

    /// The barrier and the marker behind it are queued and flushed; the
    /// runtime's worker waits on the user event itself, and a host wait
    /// here would only let it fall asleep.
    fn settle(&self) -> Duration {
        Duration::ZERO
    }
}

impl Drop for UserEventGate {
    fn drop(&mut self) {
        if let Err(err) = self.open() {
            log::error!(
                "{}: a gate could not be opened: {err}",
                OpenCl::BACKEND_NAME
            );
        }
    }
}

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is writable, and both clocks this is called with exist
    // on every Linux.
    unsafe { libc::clock_gettime(clock, &raw mut t) };
    i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec)
}

/// A gate on `queue`: user events the queue waits behind.
pub(crate) fn gate(queue: OpenClStream) -> Result<Option<Box<dyn Gate>>, DriverError> {
    let context = queue.with_live("clCreateUserEvent", |_, held| Arc::clone(held))?;
    Ok(Some(Box::new(UserEventGate {
        queue,
        context,
        closed: Vec::new(),
    })))
}

/// Where the device finished `event`'s marker, on the host clock, where the
/// context's device stamps with `CLOCK_MONOTONIC_RAW` (PoCL's CPU device).
pub(crate) fn host_stamp(
    event: &<OpenCl as RawApi>::Event,
    context: &Context,
) -> Result<Option<HostStamp>, DriverError> {
    if !context.raw_clock {
        return Ok(None);
    }
    let Some(stamp) = event.with_marker(|marker| (!marker.is_null()).then(|| end_time(marker)))
    else {
        return Ok(None);
    };
    Ok(HostStamp::on_clock(i128::from(stamp?), || {
        clock_ns(libc::CLOCK_MONOTONIC_RAW)
    }))
}

/// Where the device finished `marker`, in its profiling clock's ns.
pub(crate) fn end_time(marker: cl_event) -> Result<u64, DriverError> {
    cl3::event::get_event_profiling_info(marker, CL_PROFILING_COMMAND_END)
        .map(Into::into)
        .map_err(|code| error("clGetEventProfilingInfo", code))
}
