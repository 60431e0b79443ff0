//! The OpenCL backend of device-events: [`EventApi`] over OpenCL's event
//! model, through `cl3`, with `libOpenCL` (the ICD loader) loaded at run
//! time.
//!
//! ```
//! use device_events_core::{EventFence, EventProfiler, OwnedStream};
//! use device_events_opencl::OpenCl;
//!
//! if let Err(err) = OpenCl::probe() {
//!     println!("no OpenCL device here: {err}");
//!     return Ok(());
//! }
//! let (a, b) = (OwnedStream::<OpenCl>::new()?, OwnedStream::<OpenCl>::new()?);
//! let mut profiler = EventProfiler::<OpenCl>::new();
//! let window = profiler.start(a.get());
//! // ... enqueue work on `a`'s queue ...
//! let fence = EventFence::<OpenCl>::new(a.get());
//! fence.wait_async(b.get())?; // `b` waits on the device; the host runs on
//! let timing = profiler.stop(a.get(), window)?;
//! let ticks = pollster::block_on(timing.resolve()).expect("the window was read");
//! println!("{:?} on the device", ticks.duration());
//! # drop((fence, profiler));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The mapping, call by call
//!
//! Needs OpenCL 1.2 (markers and barriers with wait lists).
//!
//! - A stream is an in-order command queue created with
//!   `CL_QUEUE_PROFILING_ENABLE`, in the thread's context (see [`OpenCl::select`]).
//! - An event is a slot. [`event_record`](EventApi::event_record) fills it
//!   with the `cl_event` of a marker (`clEnqueueMarkerWithWaitList` with an
//!   empty wait list, which on an in-order queue completes after everything
//!   before it), flushes the queue so the marker is submitted without
//!   waiting for anyone, and releases the marker it replaces.
//! - [`event_wait`](EventApi::event_wait) is `clWaitForEvents`.
//! - [`event_elapsed`](EventApi::event_elapsed) is the difference of the two
//!   markers' `CL_PROFILING_COMMAND_END` times, integer nanoseconds, exact to
//!   the device's `CL_DEVICE_PROFILING_TIMER_RESOLUTION` (1 ns on PoCL). A
//!   marker not yet complete has no profiling time
//!   (`CL_PROFILING_INFO_NOT_AVAILABLE`): that is [`ErrorKind::NotReady`].
//! - [`stream_wait_event`](EventApi::stream_wait_event) is
//!   `clEnqueueBarrierWithWaitList` with the marker.
//! - [`stream_synchronize`](EventApi::stream_synchronize) is `clFinish`.
//! - A never-recorded event is an empty slot: waiting on it (from the host or
//!   a queue) completes at once and timing it is an
//!   [`ErrorKind::InvalidHandle`] error, as on CUDA and HIP.
//!
//! Events and queues hold their context, so it is released only after the
//! last of them. No loader, no platform or no device is an
//! [`ErrorKind::NoDevice`] error, never a panic.

mod anchor;
mod context;
mod status;

use std::sync::{Arc, Mutex, PoisonError};

use cl3::types::{cl_command_queue, cl_event};
use device_events_core::handles::{Handle, HandleTable};
use device_events_core::profile::Duration;
use device_events_core::{DriverError, ErrorKind, EventApi, EventQuery};

pub use context::{DEVICE_VAR, DeviceInfo};
pub use status::kind_of;

use context::ClContext;
use status::{check, error};

const CL_QUEUE_PROFILING_ENABLE: u64 = 1 << 1;
const CL_PROFILING_COMMAND_END: u32 = 0x1283;

/// The OpenCL backend.
#[derive(Debug)]
pub struct OpenCl;

impl OpenCl {
    const BACKEND_NAME: &'static str = "opencl";

    /// Whether an OpenCL device can be used here: the loader, a platform
    /// and a device, and a context on the thread's device. Never panics.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NoDevice`] when the loader, a platform or a device is
    /// missing; the driver's own error when a context cannot be made.
    pub fn probe() -> Result<(), DriverError> {
        context::current().map(drop)
    }

    /// Every device of every OpenCL platform here.
    ///
    /// ```
    /// use device_events_opencl::OpenCl;
    ///
    /// for device in OpenCl::devices().unwrap_or_default() {
    ///     println!("{}:{} {} ({})", device.platform, device.device, device.name, device.version);
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NoDevice`] when there is none.
    pub fn devices() -> Result<Vec<DeviceInfo>, DriverError> {
        context::list()
    }

    /// Make device `device` of platform `platform` (indices, as
    /// [`devices`](Self::devices) lists them) the calling thread's: the
    /// fences, pools, profilers and streams it makes from now on use a new
    /// context on it. Without a selection a thread uses the process's
    /// default ([`DEVICE_VAR`], else the first device found).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NoDevice`] for indices that name no device; the driver's
    /// error when the context cannot be made.
    pub fn select(platform: usize, device: usize) -> Result<(), DriverError> {
        context::select(context::create(platform, device)?);
        Ok(())
    }

    /// Events of this crate alive now: a count a test can check for leaks,
    /// since an OpenCL runtime reports none.
    pub fn live_events() -> u64 {
        LIVE_EVENTS.load(std::sync::atomic::Ordering::Relaxed)
    }
}

static LIVE_EVENTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// An event: a slot for the marker of its last record.
#[derive(Debug)]
pub struct ClEvent {
    /// Null until recorded. Locked while a call uses the marker, so a
    /// concurrent record cannot release it meanwhile.
    marker: Mutex<cl_event>,
    context: Arc<ClContext>,
}

// SAFETY: `cl_event` is an opaque handle, never dereferenced here, and the
// OpenCL API is thread-safe (1.1 on); the marker is only touched under its
// mutex, and the context is `Send + Sync` itself.
unsafe impl Send for ClEvent {}
// SAFETY: as for `Send`: every `&ClEvent` access to the marker goes through
// the mutex.
unsafe impl Sync for ClEvent {}

impl ClEvent {
    fn lock(&self) -> std::sync::MutexGuard<'_, cl_event> {
        self.marker.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Run `f` with the marker of the last record (null: never recorded),
    /// for calls this crate does not wrap, such as reading its profiling
    /// times. It cannot be released meanwhile.
    pub fn with_marker<R>(&self, f: impl FnOnce(cl_event) -> R) -> R {
        f(*self.lock())
    }
}

/// A live queue and the context it was made in.
struct Live {
    queue: cl_command_queue,
    context: Arc<ClContext>,
}

// SAFETY: `cl_command_queue` is an opaque handle, used only through the
// thread-safe OpenCL API while the table holds it live.
unsafe impl Send for Live {}
// SAFETY: as for `Send`; `&Live` gives only copies of the handle.
unsafe impl Sync for Live {}

static QUEUES: HandleTable<Live> = HandleTable::new();

/// An OpenCL command queue: a checked handle into this crate's table of
/// live queues. Once [`EventApi::stream_destroy`] has run on it, every copy
/// is refused with [`ErrorKind::InvalidHandle`] before the runtime sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClStream {
    handle: Handle,
}

impl ClStream {
    /// Run `f` with the raw queue, for calls this crate does not wrap (the
    /// work you time); the queue cannot be released meanwhile.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidHandle`] when the queue was destroyed.
    pub fn with_raw<R>(self, f: impl FnOnce(cl_command_queue) -> R) -> Result<R, DriverError> {
        QUEUES
            .with(self.handle, |live| f(live.queue))
            .ok_or_else(|| dead("ClStream::with_raw"))
    }
}

fn dead(call: &'static str) -> DriverError {
    DriverError::refused(
        OpenCl::BACKEND_NAME,
        call,
        ErrorKind::InvalidHandle,
        "the queue was destroyed; refused before the runtime",
    )
}

fn on_queue<T>(
    stream: ClStream,
    call: &'static str,
    f: impl FnOnce(&Live) -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    QUEUES.with(stream.handle, f).ok_or_else(|| dead(call))?
}

fn same_context(event: &ClEvent, live: &Live, call: &'static str) -> Result<(), DriverError> {
    if event.context.id == live.context.id {
        return Ok(());
    }
    Err(DriverError::refused(
        OpenCl::BACKEND_NAME,
        call,
        ErrorKind::InvalidHandle,
        "the event and the queue belong to different contexts; make the fence, pool or \
         profiler on the thread that selected the queue's device",
    ))
}

fn end_time(marker: cl_event) -> Result<u64, DriverError> {
    const CALL: &str = "clGetEventProfilingInfo";
    // Not complete yet reads `CL_PROFILING_INFO_NOT_AVAILABLE`: not ready.
    cl3::event::get_event_profiling_info(marker, CL_PROFILING_COMMAND_END)
        .map(Into::into)
        .map_err(|code| error(CALL, code))
}

impl EventApi for OpenCl {
    type Event = ClEvent;
    type Stream = ClStream;
    const BACKEND: &'static str = Self::BACKEND_NAME;

    fn event_create() -> Result<ClEvent, DriverError> {
        let context = context::current()?;
        LIVE_EVENTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(ClEvent {
            marker: Mutex::new(std::ptr::null_mut()),
            context,
        })
    }

    fn event_destroy(event: &mut ClEvent) -> Result<(), DriverError> {
        let marker = std::mem::replace(
            event
                .marker
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
            std::ptr::null_mut(),
        );
        LIVE_EVENTS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        if marker.is_null() {
            return Ok(());
        }
        // SAFETY: the marker came from `clEnqueueMarkerWithWaitList` and was
        // swapped out of the slot above, so it is released exactly once.
        check("clReleaseEvent", unsafe {
            cl3::event::release_event(marker)
        })
    }

    fn event_record(event: &ClEvent, stream: ClStream) -> Result<(), DriverError> {
        const CALL: &str = "clEnqueueMarkerWithWaitList";
        on_queue(stream, CALL, |live| {
            same_context(event, live, CALL)?;
            // SAFETY: the queue is live while the table holds it; an empty
            // wait list.
            let marker = unsafe {
                cl3::command_queue::enqueue_marker_with_wait_list(live.queue, 0, std::ptr::null())
            }
            .map_err(|code| error(CALL, code))?;
            let old = std::mem::replace(&mut *event.lock(), marker);
            let flushed = check("clFlush", cl3::command_queue::flush(live.queue));
            if !old.is_null() {
                // SAFETY: the marker this slot held, swapped out above, so
                // released exactly once.
                check("clReleaseEvent", unsafe { cl3::event::release_event(old) })?;
            }
            flushed
        })
    }

    fn event_wait(event: &ClEvent) -> Result<(), DriverError> {
        // The marker is retained and the slot's lock released before the
        // wait: held across it, every other use of the event (a query that
        // promises never to wait, a stream wait) would wait too.
        let marker = {
            let marker = event.lock();
            if marker.is_null() {
                return Ok(());
            }
            // SAFETY: a live marker, held by the lock meanwhile; retained
            // here, released below.
            check("clRetainEvent", unsafe {
                cl3::event::retain_event(*marker)
            })?;
            *marker
        };
        let waited = check("clWaitForEvents", cl3::event::wait_for_events(&[marker]));
        // SAFETY: retained above, released once.
        let released = check("clReleaseEvent", unsafe {
            cl3::event::release_event(marker)
        });
        waited.and(released)
    }

    fn event_elapsed(start: &ClEvent, end: &ClEvent) -> Result<Duration, DriverError> {
        const CALL: &str = "clGetEventProfilingInfo";
        if start.context.id != end.context.id {
            return Err(DriverError::refused(
                Self::BACKEND,
                CALL,
                ErrorKind::Other,
                "elapsed time across contexts is undefined",
            ));
        }
        // Both slots first: a never-recorded end is refused even while the
        // start is not yet reached, as CUDA and HIP refuse it. One lock at a
        // time, so that two threads reading a pair in opposite orders (or
        // one event against itself) cannot deadlock.
        if start.with_marker(<*mut _>::is_null) || end.with_marker(<*mut _>::is_null) {
            return Err(DriverError::refused(
                Self::BACKEND,
                CALL,
                ErrorKind::InvalidHandle,
                "the event was never recorded",
            ));
        }
        let (from, to) = (start.with_marker(end_time)?, end.with_marker(end_time)?);
        // A negative span reads as zero, as the trait promises.
        Ok(Duration::from_nanos(to.saturating_sub(from)))
    }

    fn stream_wait_event(stream: ClStream, event: &ClEvent) -> Result<(), DriverError> {
        const CALL: &str = "clEnqueueBarrierWithWaitList";
        on_queue(stream, CALL, |live| {
            same_context(event, live, CALL)?;
            let marker = event.lock();
            if marker.is_null() {
                return Ok(());
            }
            // SAFETY: the queue is live; the wait list is one live marker,
            // held by the lock meanwhile.
            let barrier = unsafe {
                cl3::command_queue::enqueue_barrier_with_wait_list(live.queue, 1, &*marker)
            }
            .map_err(|code| error(CALL, code))?;
            drop(marker);
            let flushed = check("clFlush", cl3::command_queue::flush(live.queue));
            // SAFETY: the barrier's own event, not kept: released once.
            check("clReleaseEvent", unsafe {
                cl3::event::release_event(barrier)
            })?;
            flushed
        })
    }

    fn stream_synchronize(stream: ClStream) -> Result<(), DriverError> {
        on_queue(stream, "clFinish", |live| {
            check("clFinish", cl3::command_queue::finish(live.queue))
        })
    }

    fn stream_create_non_blocking() -> Result<ClStream, DriverError> {
        let context = context::current()?;
        #[allow(deprecated)] // clCreateCommandQueue: OpenCL 1.2's, which 2.0+ keep.
        // SAFETY: a live context and its device; profiling on, in order.
        let queue = unsafe {
            cl3::command_queue::create_command_queue(
                context.raw,
                context.device,
                CL_QUEUE_PROFILING_ENABLE,
            )
        }
        .map_err(|code| error("clCreateCommandQueue", code))?;
        Ok(ClStream {
            handle: QUEUES.insert(Live { queue, context }),
        })
    }

    fn stream_destroy(stream: ClStream) -> Result<(), DriverError> {
        const CALL: &str = "clReleaseCommandQueue";
        // Out of the table first, once calls in flight on it have returned:
        // no copy of the handle can reach the runtime after this.
        let live = QUEUES.remove(stream.handle).ok_or_else(|| dead(CALL))?;
        // SAFETY: made by `stream_create_non_blocking`, removed from the
        // table above, so released exactly once. Queued work still runs.
        check(CALL, unsafe {
            cl3::command_queue::release_command_queue(live.queue)
        })
    }
}

/// `CL_EVENT_COMMAND_EXECUTION_STATUS`; `CL_COMPLETE` is 0, and a negative
/// status is the command's error.
const CL_EVENT_COMMAND_EXECUTION_STATUS: u32 = 0x11D3;

impl EventQuery for OpenCl {
    fn event_query(event: &ClEvent) -> Result<bool, DriverError> {
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
}
