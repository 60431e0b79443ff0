//! What a thread waiting for a fence costs: the CPU time its wait burns
//! (`getrusage`) and how late it wakes after the device got there.

use std::ffi::c_void;
use std::time::{Duration, Instant};

use cudarc::driver::result;
use device_events_conformance::cpu::thread_cpu;
use device_events_conformance::soft::SoftDriver;
use device_events_core::EventFence;
use device_events_cuda::Cuda;

use crate::CudaPair;

/// One wait's cost.
#[derive(Clone, Copy, Debug)]
pub struct WaitCost {
    /// CPU time the waiting thread used.
    pub cpu: Duration,
    /// How long it waited.
    pub wall: Duration,
    /// How long after the device reached the fence the wait returned.
    pub late: Duration,
}

/// A fence behind 100 ms of work on the software driver, through the CUDA
/// backend, its events made spinning or blocking.
///
/// # Panics
///
/// When the software driver cannot run it.
pub fn soft_cuda(soft: &SoftDriver, pair: &CudaPair, blocking: bool) -> WaitCost {
    const BYTES: usize = 100_000_000;
    Cuda::set_blocking_sync(blocking);
    soft.set_bandwidth(1e9);
    // SAFETY: a buffer only this memset uses, freed below; cudarc's stream
    // of the bound context.
    let ptr = unsafe {
        let ptr = result::malloc_sync(BYTES).unwrap();
        result::memset_d8_async(ptr, 0, BYTES, pair.stream.cu_stream()).unwrap();
        ptr
    };
    let fence = EventFence::<Cuda>::new(pair.ours);
    let event = soft.last_recorded_event();
    let (cpu, started) = (thread_cpu(), Instant::now());
    fence.wait_sync().unwrap();
    let (returned, cpu) = (Instant::now(), thread_cpu() - cpu);
    let truth = soft.host_instant(0) + Duration::from_nanos(soft.event_truth_ns(event).unwrap());
    drop(fence);
    soft.set_bandwidth(10e9);
    Cuda::set_blocking_sync(false);
    // SAFETY: allocated above, its memset done.
    unsafe { result::free_sync(ptr).unwrap() };
    WaitCost {
        cpu,
        wall: returned - started,
        late: returned.saturating_duration_since(truth),
    }
}

/// Raw OpenCL pieces the PoCL row needs: a buffer in the context of a queue.
pub(crate) fn cl_buffer(queue: cl3::types::cl_command_queue, bytes: usize) -> cl3::types::cl_mem {
    const CL_QUEUE_CONTEXT: u32 = 0x1090;
    let context = cl3::command_queue::get_command_queue_info(queue, CL_QUEUE_CONTEXT)
        .unwrap()
        .to_ptr() as cl3::types::cl_context;
    // SAFETY: a live context; no host pointer; released by the caller.
    unsafe { cl3::memory::create_buffer(context, 1, bytes, std::ptr::null_mut()) }.unwrap()
}

/// Queue a fill of `bytes` of `buffer` on `queue`.
pub(crate) fn cl_fill(
    queue: cl3::types::cl_command_queue,
    buffer: cl3::types::cl_mem,
    bytes: usize,
) {
    let pattern = 0u32;
    // SAFETY: a live queue and buffer of one context; the pattern is copied
    // at enqueue; `bytes` is within the buffer.
    let event = unsafe {
        cl3::command_queue::enqueue_fill_buffer(
            queue,
            buffer,
            (&raw const pattern).cast::<c_void>(),
            4,
            0,
            bytes / 4 * 4,
            0,
            std::ptr::null(),
        )
    }
    .unwrap();
    // SAFETY: the fill's own event, not kept.
    let _ = unsafe { cl3::event::release_event(event) };
    let _ = cl3::command_queue::flush(queue);
}
