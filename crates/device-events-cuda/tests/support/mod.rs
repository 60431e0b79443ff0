//! Shared by the CUDA backend's test suites: a bound context, the memset
//! workload, and the conformance harness on whichever driver is under test.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;
use std::time::Duration;

use cudarc::driver::{result, sys};
use device_events_conformance::{Capture, Harness, Suite, Workload};
use device_events_core::{CaptureStatus, DriverError, EventApi};
use device_events_cuda::{Cuda, CudaStream, check};

/// Device `ordinal`'s primary context, retained once per process.
pub fn context(ordinal: i32) -> sys::CUcontext {
    static CONTEXTS: OnceLock<Vec<usize>> = OnceLock::new();
    let contexts = CONTEXTS.get_or_init(|| {
        Cuda::probe().expect("a CUDA driver");
        let count = result::device::get_count().unwrap();
        (0..count)
            .map(|i| {
                let device = result::device::get(i).unwrap();
                // SAFETY: `device` exists; the context lives until exit.
                unsafe { result::primary_ctx::retain(device).unwrap() as usize }
            })
            .collect()
    });
    contexts[usize::try_from(ordinal).unwrap()] as sys::CUcontext
}

/// Make device `ordinal`'s context current on this thread.
pub fn bind(ordinal: i32) -> sys::CUcontext {
    let ctx = context(ordinal);
    // SAFETY: a retained primary context.
    unsafe { result::ctx::set_current(ctx).unwrap() };
    ctx
}

/// Memsets of a device buffer: work of a size the harness chooses.
pub struct Memset {
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl Memset {
    pub fn new(bytes: usize) -> Self {
        // SAFETY: freed in `Drop`, used only for memsets of its own size.
        let ptr = unsafe { result::malloc_sync(bytes).unwrap() };
        Self { ptr, bytes }
    }
}

impl Workload<Cuda> for Memset {
    fn enqueue_bytes(&self, stream: CudaStream, bytes: usize) -> Result<(), DriverError> {
        stream.with_raw(|raw| {
            // SAFETY: `bytes` ≤ the buffer's size (the harness honours
            // `max_bytes`); the stream is held live meanwhile.
            check("cuMemsetD8Async", unsafe {
                result::memset_d8_async(self.ptr, 0, bytes.min(self.bytes), raw)
            })
        })?
    }
    fn max_bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Memset {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once here.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

fn begin_capture(stream: CudaStream) -> Result<(), DriverError> {
    stream.with_raw(|raw| {
        // SAFETY: the stream is held live meanwhile.
        check("cuStreamBeginCapture_v2", unsafe {
            result::stream::begin_capture(
                raw,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            )
        })
    })?
}

fn end_capture(stream: CudaStream) -> Result<(), DriverError> {
    let graph = stream.with_raw(|raw| {
        // SAFETY: the stream is held live meanwhile.
        check("cuStreamEndCapture", unsafe {
            result::stream::end_capture(raw)
        })
    })??;
    // SAFETY: a graph the capture returned, destroyed once here.
    unsafe {
        if !graph.is_null() {
            check("cuGraphDestroy", sys::cuGraphDestroy(graph).result())?;
        }
    }
    Ok(())
}

fn capture_status(stream: CudaStream) -> Result<CaptureStatus, DriverError> {
    Cuda::capture_status(stream)
}

pub fn suite() -> Suite<Cuda> {
    Suite::new(
        || {
            bind(0);
        },
        |live| {
            Harness::new(
                Box::new(Memset::new(64 << 20)),
                Duration::from_nanos(500),
                Some(Capture {
                    begin: begin_capture,
                    end: end_capture,
                    status: capture_status,
                    bind_thread: || {
                        bind(0);
                    },
                }),
                live,
            )
        },
    )
}

/// A stream of the current context.
pub fn stream() -> CudaStream {
    Cuda::stream_create_non_blocking().unwrap()
}
