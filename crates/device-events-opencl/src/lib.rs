//! The OpenCL backend of device-events: [`EventApi`](device_events_core::EventApi) over OpenCL's event
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
//! println!("{:?} on the device", ticks.duration);
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
//! - An event is a slot. [`event_record`](device_events_core::EventApi::event_record) fills it
//!   with the `cl_event` of a marker (`clEnqueueMarkerWithWaitList` with an
//!   empty wait list, which on an in-order queue completes after everything
//!   before it), flushes the queue so the marker is submitted without
//!   waiting for anyone, and releases the marker it replaces.
//! - [`event_wait`](device_events_core::EventApi::event_wait) is `clWaitForEvents`.
//!   The library's own threads never wait so: a calibration asks its
//!   anchor's `CL_EVENT_COMMAND_EXECUTION_STATUS` (`clGetEventInfo`), and
//!   sleeps between asks, as on CUDA and HIP.
//! - [`event_elapsed`](device_events_core::EventApi::event_elapsed) is the difference of the two
//!   markers' `CL_PROFILING_COMMAND_END` times, integer nanoseconds, exact to
//!   the device's `CL_DEVICE_PROFILING_TIMER_RESOLUTION` (1 ns on PoCL). A
//!   marker not yet complete has no profiling time
//!   (`CL_PROFILING_INFO_NOT_AVAILABLE`): that is [`ErrorKind::NotReady`](device_events_core::ErrorKind::NotReady).
//! - [`stream_wait_event`](device_events_core::EventApi::stream_wait_event) is
//!   `clEnqueueBarrierWithWaitList` with the marker.
//! - [`stream_synchronize`](device_events_core::EventApi::stream_synchronize) is `clFinish`.
//! - A never-recorded event is an empty slot: waiting on it (from the host or
//!   a queue) completes at once and timing it is an
//!   [`ErrorKind::InvalidHandle`](device_events_core::ErrorKind::InvalidHandle) error, as on CUDA and HIP.
//!
//! - A queue made elsewhere is admitted with [`OpenCl::stream_from_raw`]:
//!   of the thread's context, in order, with profiling; retained while the
//!   handle lives.
//! - There is no graph capture: [`OpenCl::capture_status`] answers
//!   [`CaptureStatus::None`] for every live queue. Waits are the runtime's
//!   own (PoCL sleeps), so [`OpenCl::set_blocking_sync`] changes nothing.
//!
//! Events and queues hold their context, so it is released only after the
//! last of them. No loader, no platform or no device is an
//! [`ErrorKind::NoDevice`](device_events_core::ErrorKind::NoDevice) error, never a panic.
//!
//! Once the runtime has made its first context, the crate registers the
//! core's exit handler (`process::stop_driver_calls`, so that no library
//! thread is in the runtime as its own exit handlers tear it down) and its
//! `pthread_atfork` handlers, as the CUDA and HIP backends do.

mod anchor;
mod context;
mod process;
pub mod raw;
mod status;

use cl3::types::cl_command_queue;
use device_events_core::backend::{CheckedEvent, CheckedStream};
use device_events_core::{CaptureStatus, DriverError};

pub use context::{DEVICE_VAR, DeviceInfo};
pub use status::check;

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
    /// [`ErrorKind::NoDevice`](device_events_core::ErrorKind::NoDevice) when the loader, a platform or a device is
    /// missing; the driver's own error when a context cannot be made.
    pub fn probe() -> Result<(), DriverError> {
        context::current().map(drop)
    }

    /// Kept for the shape every backend has; OpenCL waits as its runtime
    /// waits, whatever `blocking` says. OpenCL has no flag that picks how
    /// `clWaitForEvents` and `clFinish` wait, as CUDA's
    /// `CU_EVENT_BLOCKING_SYNC` and HIP's `hipEventBlockingSync` do: PoCL
    /// sleeps on a condition variable until the command completes, which
    /// is what blocking asks for elsewhere. Spinning instead would mean
    /// polling `clGetEventInfo` on a core for the whole wait, which this
    /// library never does.
    ///
    /// ```
    /// device_events_opencl::OpenCl::set_blocking_sync(true); // no effect
    /// ```
    pub fn set_blocking_sync(blocking: bool) {
        let _ = blocking;
    }

    /// Whether `stream` is capturing a graph: always
    /// [`CaptureStatus::None`] for a live queue, since OpenCL 1.2 to 3.0
    /// have no stream capture (a `cl_khr_command_buffer` is recorded by
    /// explicit calls on the buffer, never by capturing a queue). Kept so
    /// that code screening streams before profiling reads the same on
    /// every backend.
    ///
    /// ```
    /// use device_events_core::{CaptureStatus, OwnedStream};
    /// use device_events_opencl::OpenCl;
    ///
    /// # if OpenCl::probe().is_err() { return Ok(()); }
    /// let stream = OwnedStream::<OpenCl>::new()?;
    /// assert_eq!(OpenCl::capture_status(stream.get())?, CaptureStatus::None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidHandle`](device_events_core::ErrorKind::InvalidHandle)
    /// when the stream was destroyed.
    pub fn capture_status(stream: OpenClStream) -> Result<CaptureStatus, DriverError> {
        stream.capture_status()
    }

    /// Admit a command queue made elsewhere, of the calling thread's
    /// context (its [`select`](Self::select)ion, else the default), in
    /// order and with `CL_QUEUE_PROFILING_ENABLE`. The queue is retained
    /// (`clRetainCommandQueue`), so it lives for as long as the handle,
    /// whatever its owner releases; `stream_destroy` on the result
    /// releases that reference and leaves the owner's.
    ///
    /// ```
    /// use device_events_core::{EventApi, EventFence};
    /// use device_events_opencl::OpenCl;
    ///
    /// # if OpenCl::probe().is_err() { return Ok(()); }
    /// # let ours = OpenCl::stream_create_non_blocking()?;
    /// # let raw = ours.with_raw(|queue| queue)?;
    /// // `raw`: a `cl_command_queue` of the thread's context, yours.
    /// // SAFETY: `raw` is a live command queue.
    /// let stream = unsafe { OpenCl::stream_from_raw(raw) }?;
    /// EventFence::<OpenCl>::new(stream).wait_sync()?;
    /// OpenCl::stream_destroy(stream)?; // your queue stays yours
    /// # OpenCl::stream_destroy(ours)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Safety
    ///
    /// `raw` is a live command queue (an OpenCL runtime need not check a
    /// handle it is given). Once admitted, the handle holds its own
    /// reference, so the owner may release theirs at any time.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidHandle`](device_events_core::ErrorKind::InvalidHandle)
    /// when the queue is of another context or device than the thread's,
    /// runs out of order, or has no profiling; the runtime's error when it
    /// cannot be asked or retained; as [`probe`](Self::probe) without a
    /// device.
    pub unsafe fn stream_from_raw(raw: cl_command_queue) -> Result<OpenClStream, DriverError> {
        let held = context::current()?;
        // SAFETY: `raw` is live, as the caller promises.
        let queue = unsafe { raw::RawStream::retain(raw, &held) }?;
        Ok(OpenClStream::admit_foreign(queue, held))
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
    /// [`ErrorKind::NoDevice`](device_events_core::ErrorKind::NoDevice) when there is none.
    pub fn devices() -> Result<Vec<DeviceInfo>, DriverError> {
        context::list()
    }

    /// The device the calling thread's fences, pools, profilers and
    /// streams use: its [`select`](Self::select)ion, else the process's
    /// default ([`DEVICE_VAR`], else the first device found).
    ///
    /// ```
    /// use device_events_opencl::OpenCl;
    ///
    /// if let Ok(device) = OpenCl::current_device() {
    ///     println!("profiling on {} ({})", device.name, device.platform_name);
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`probe`](Self::probe).
    pub fn current_device() -> Result<DeviceInfo, DriverError> {
        context::current_device()
    }

    /// Make device `device` of platform `platform` (indices, as
    /// [`devices`](Self::devices) lists them) the calling thread's: the
    /// fences, pools, profilers and streams it makes from now on use a new
    /// context on it. Without a selection a thread uses the process's
    /// default ([`DEVICE_VAR`], else the first device found).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NoDevice`](device_events_core::ErrorKind::NoDevice) for indices that name no device; the driver's
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

pub(crate) static LIVE_EVENTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// An OpenCL event: a checked slot (see [`CheckedEvent`]) for the marker of
/// its last record.
pub type OpenClEvent = CheckedEvent<OpenCl>;

/// An OpenCL command queue: a checked handle (see [`CheckedStream`]). Once
/// `stream_destroy` has run on it, every copy is refused before the runtime
/// sees it.
pub type OpenClStream = CheckedStream<OpenCl>;
