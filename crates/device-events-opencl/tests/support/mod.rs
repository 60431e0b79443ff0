//! Shared by the OpenCL backend's test suites: buffer fills as the work to
//! time, and the conformance harness on whatever platform is here.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::ffi::c_void;
use std::time::Duration;

use cl3::types::cl_mem;
use std::cell::Cell;

use device_events_conformance::noting::{Note, Noting};
use device_events_conformance::{Harness, Truth, Workload};
use device_events_core::{DriverError, EventApi};
use device_events_opencl::{OpenCl, OpenClEvent, OpenClStream};

const CL_MEM_READ_WRITE: u64 = 1;

/// A device buffer, filled with zeros as the work a window times.
pub struct Fill {
    buffer: cl_mem,
    bytes: usize,
}

// SAFETY: an opaque handle, used only through the thread-safe OpenCL API.
unsafe impl Send for Fill {}
// SAFETY: as for `Send`.
unsafe impl Sync for Fill {}

impl Fill {
    /// A buffer of `bytes` in the context of a queue of this thread's device.
    pub fn new(bytes: usize) -> Self {
        let s = OpenCl::stream_create_non_blocking().expect("a queue");
        let context = s
            .with_raw(|queue| {
                cl3::command_queue::get_command_queue_info(queue, 0x1090) // CL_QUEUE_CONTEXT
                    .map(|info| info.to_ptr() as cl3::types::cl_context)
            })
            .unwrap()
            .expect("the queue's context");
        // SAFETY: a live context; no host pointer; released in `Drop`.
        let buffer = unsafe {
            cl3::memory::create_buffer(context, CL_MEM_READ_WRITE, bytes, std::ptr::null_mut())
        }
        .expect("a buffer");
        OpenCl::stream_destroy(s).unwrap();
        Self { buffer, bytes }
    }
}

impl<A: device_events_core::Backend<Stream = OpenClStream>> Workload<A> for Fill {
    fn enqueue_bytes(&self, stream: OpenClStream, bytes: usize) -> Result<(), DriverError> {
        let pattern = 0u32;
        let size = bytes.min(self.bytes) / 4 * 4;
        stream.with_raw(|queue| {
            // SAFETY: a live queue and buffer of one context; the pattern is
            // copied at enqueue; `size` is a multiple of it within the buffer.
            let event = unsafe {
                cl3::command_queue::enqueue_fill_buffer(
                    queue,
                    self.buffer,
                    (&raw const pattern).cast::<c_void>(),
                    4,
                    0,
                    size.max(4),
                    0,
                    std::ptr::null(),
                )
            };
            let event = device_events_opencl::check("clEnqueueFillBuffer", event)?;
            // SAFETY: the fill's own event, not kept.
            let _ = unsafe { cl3::event::release_event(event) };
            let _ = cl3::command_queue::flush(queue);
            Ok(())
        })?
    }

    fn max_bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Fill {
    fn drop(&mut self) {
        // SAFETY: made in `new`, released once here.
        let _ = unsafe { cl3::memory::release_mem_object(self.buffer) };
    }
}

/// Notes the marker of each record: how the suite reads the runtime's own
/// timestamps of a profiler's events, the truth its durations are checked
/// against.
pub struct LastMarker;

/// The OpenCL backend, noting the marker of each record.
pub type Observed = Noting<OpenCl, LastMarker>;

thread_local! {
    /// Per thread: the library's own threads record anchors meanwhile.
    static LAST_MARKER: Cell<usize> = const { Cell::new(0) };
}
const CL_PROFILING_COMMAND_END: u32 = 0x1283;

fn last_marker() -> usize {
    LAST_MARKER.get()
}

/// The marker's `CL_PROFILING_COMMAND_END`, read straight from the runtime.
/// The suite reads it only while the profiler that recorded it still holds
/// the marker.
fn marker_end_ns(marker: usize) -> Option<u64> {
    cl3::event::get_event_profiling_info(marker as cl3::types::cl_event, CL_PROFILING_COMMAND_END)
        .ok()
        .map(Into::into)
}

impl Note<OpenCl> for LastMarker {
    fn recorded(event: &OpenClEvent) {
        if let Some(slot) = event.raw() {
            slot.with_marker(|marker| LAST_MARKER.set(marker as usize));
        }
    }
}

/// The conformance harness on this machine's OpenCL device: no graph
/// capture in OpenCL and no driver-side handle counts; durations checked
/// against the runtime's own marker timestamps, since a CPU device's work
/// runs at no steady speed.
pub fn harness() -> Harness<Observed> {
    plain_harness().with_truth(Truth {
        last_event: last_marker,
        event_ns: marker_end_ns,
    })
}

/// The harness on the OpenCL backend itself (or `Observed`, which is it),
/// for checks of what only it offers (its `EventQuery`).
pub fn plain_harness<A: device_events_core::Backend<Stream = OpenClStream>>() -> Harness<A> {
    OpenCl::probe().expect("an OpenCL platform with a device: cargo xtask test installs PoCL");
    Harness::new(
        Box::new(Fill::new(64 << 20)),
        Duration::from_nanos(1),
        None,
        None,
    )
}
