//! The CUDA harness, shared by the CUDA backend's test suites and
//! device-events-cubecl's server checks: a bound context, the memset
//! workload, the spin kernel's timed work, and the conformance harness on
//! whichever driver is under test.

/// The spin kernel, as the GPU kit's probe loads it: its PTX, or the
/// kit's `sm_90` cubin where `DEVICE_EVENTS_SPIN_CUBIN` names one.
#[path = "../../device-events-bench/src/spin.rs"]
pub mod spin;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::{Capture, Harness, Suite, TimedWork, Workload};
use cudarc::driver::{result, sys};
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
    /// A buffer of `bytes` in the current context.
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

/// The spin kernel as the harness's work: a kernel that spins on the
/// device's nanosecond timer for the length asked and stamps its own start
/// and end, so that windows are checked against the device's own account
/// at any device speed.
pub struct SpinWork {
    spin: spin::Spin,
    stamps: spin::Stamps,
    next: AtomicUsize,
}

/// Stamps kept: far more launches than any check holds unread at once.
const STAMPS: usize = 1024;

impl SpinWork {
    /// The kernel loaded into the current context, or why not.
    pub fn load() -> Result<Self, String> {
        let spin = spin::Spin::load().map_err(|e| format!("the spin kernel: {e}"))?;
        let stamps = spin::Stamps::new(STAMPS).map_err(|e| format!("its stamps: {e}"))?;
        Ok(Self {
            spin,
            stamps,
            next: AtomicUsize::new(0),
        })
    }
}

impl TimedWork<Cuda> for SpinWork {
    fn enqueue_for(&self, stream: CudaStream, length: Duration) -> Result<usize, DriverError> {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(length.as_nanos()).unwrap_or(u64::MAX);
        check(
            "cuLaunchKernel",
            self.spin.launch(stream, ns, &self.stamps, ticket % STAMPS),
        )?;
        Ok(ticket)
    }

    fn span(&self, ticket: usize) -> Option<Duration> {
        // A ticket whose room a later launch took reads as unknown.
        if self.next.load(Ordering::Relaxed) - ticket > STAMPS {
            return None;
        }
        let (start, end) = self.stamps.read(ticket % STAMPS)?;
        Some(Duration::from_nanos(end - start))
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

fn capture() -> Capture<Cuda> {
    Capture {
        begin: begin_capture,
        end: end_capture,
        status: capture_status,
        bind_thread: || {
            bind(0);
        },
    }
}

/// Event timing resolution the CUDA documentation states.
pub const RESOLUTION: Duration = Duration::from_nanos(500);

/// The conformance harness: on the software driver, memsets at the rate it
/// sets, checked against its stamps; on a real driver, the spin kernel,
/// whose own stamps are the truth at any device speed, or calibrated
/// memsets where the kernel cannot load (said on stderr).
pub fn suite() -> Suite<Cuda> {
    Suite::new(
        || {
            bind(0);
        },
        |live| {
            if live.is_none() {
                match SpinWork::load() {
                    Ok(work) => {
                        return Harness::timed(Box::new(work), RESOLUTION, Some(capture()), live);
                    }
                    Err(why) => eprintln!("calibrated memsets instead: {why}"),
                }
            }
            Harness::new(
                Box::new(Memset::new(64 << 20)),
                RESOLUTION,
                Some(capture()),
                live,
            )
        },
    )
}

/// A stream of the current context.
pub fn stream() -> CudaStream {
    Cuda::stream_create_non_blocking().unwrap()
}
