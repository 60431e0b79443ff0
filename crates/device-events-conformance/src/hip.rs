//! The HIP harness, shared by the HIP backend's test suites and
//! device-events-cubecl's server checks: the memset workload and the
//! conformance harness on whichever runtime is under test.

use std::ffi::c_void;
use std::time::Duration;

use crate::{Capture, Harness, Suite, Workload};
use cubecl_hip_sys as sys;
use device_events_core::{CaptureStatus, DriverError, EventApi};
use device_events_hip::{Hip, HipStream, check};

/// Make `device` current on this thread.
pub fn bind(device: i32) {
    Hip::probe().expect("a HIP runtime");
    // SAFETY: the runtime is loaded.
    check("hipSetDevice", unsafe { sys::hipSetDevice(device) }).unwrap();
}

/// Memsets of a device buffer: work of a size the harness chooses.
pub struct Memset {
    ptr: *mut c_void,
    bytes: usize,
}

impl Memset {
    /// A buffer of `bytes` on the current device.
    pub fn new(bytes: usize) -> Self {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is writable; freed in `Drop`.
        check("hipMalloc", unsafe { sys::hipMalloc(&mut ptr, bytes) }).unwrap();
        Self { ptr, bytes }
    }
}

impl Workload<Hip> for Memset {
    fn enqueue_bytes(&self, stream: HipStream, bytes: usize) -> Result<(), DriverError> {
        stream.with_raw(|raw| {
            // SAFETY: `bytes` is clamped to the buffer; the stream is held
            // live meanwhile.
            check("hipMemsetAsync", unsafe {
                sys::hipMemsetAsync(self.ptr, 0, bytes.min(self.bytes), raw.cast())
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
        let _ = unsafe { sys::hipFree(self.ptr) };
    }
}

fn begin_capture(stream: HipStream) -> Result<(), DriverError> {
    stream.with_raw(|raw| {
        // SAFETY: the stream is held live meanwhile.
        check("hipStreamBeginCapture", unsafe {
            sys::hipStreamBeginCapture(
                raw.cast(),
                sys::hipStreamCaptureMode_hipStreamCaptureModeGlobal,
            )
        })
    })?
}

fn end_capture(stream: HipStream) -> Result<(), DriverError> {
    let mut graph = std::ptr::null_mut();
    stream.with_raw(|raw| {
        // SAFETY: the stream is held live meanwhile; `graph` is writable.
        check("hipStreamEndCapture", unsafe {
            sys::hipStreamEndCapture(raw.cast(), &mut graph)
        })
    })??;
    // SAFETY: a graph the capture returned, destroyed once here.
    unsafe {
        if !graph.is_null() {
            check("hipGraphDestroy", sys::hipGraphDestroy(graph))?;
        }
    }
    Ok(())
}

fn capture_status(stream: HipStream) -> Result<CaptureStatus, DriverError> {
    Hip::capture_status(stream)
}

/// The conformance harness: memsets, on the software driver or the
/// machine's runtime.
pub fn suite() -> Suite<Hip> {
    Suite::new(
        || bind(0),
        |live| {
            Harness::new(
                Box::new(Memset::new(64 << 20)),
                Duration::from_micros(1),
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

/// A stream of the current device.
pub fn stream() -> HipStream {
    Hip::stream_create_non_blocking().unwrap()
}
