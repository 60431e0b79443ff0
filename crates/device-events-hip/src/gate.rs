//! The anchor's gate on HIP: the anchor stream waits
//! (`hipStreamWaitValue32`) on a word of signal memory
//! (`hipExtMallocWithFlags(..., hipMallocSignalMemory)`), which the host
//! writes to open it.
//!
//! Optional: a runtime without the functions, or a device whose
//! `hipDeviceAttributeCanUseStreamWaitValue` reads 0, has no gate, and the
//! profiler brackets without one.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::AtomicU32;

use device_events_core::profile::Duration;
use device_events_core::{DriverError, EventApi, HostWord};

use crate::{Hip, HipStream, check, on_device, on_stream};

/// `hipDeviceAttributeCanUseStreamWaitValue`.
const CAN_USE_STREAM_WAIT_VALUE: c_int = 10013;
/// `hipMallocSignalMemory`.
const SIGNAL_MEMORY: c_uint = 2;
/// `hipStreamWaitValueGte`.
const WAIT_GTE: c_uint = 0;

/// A word of signal memory the stream waits on.
pub(crate) struct HipWord {
    stream: HipStream,
    device: c_int,
    word: *mut c_void,
}

// SAFETY: `word` is signal memory this value alone owns, touched only
// through an `AtomicU32`; the handles are opaque and the runtime is
// thread-safe.
unsafe impl Send for HipWord {}

impl HipWord {
    /// A word on `stream`, or `None` where the runtime or device has no
    /// stream memory operations.
    pub(crate) fn new(stream: HipStream) -> Result<Option<Self>, DriverError> {
        let device = on_stream(stream, "hipDeviceGetAttribute", |_, live| Ok(live.device))?;
        on_device(device, |rt| {
            let Some(ops) = &rt.mem_ops else {
                return Ok(None);
            };
            let mut can = 0;
            // SAFETY: `can` is writable; `device` is the stream's.
            check("hipDeviceGetAttribute", unsafe {
                (ops.hipDeviceGetAttribute)(&mut can, CAN_USE_STREAM_WAIT_VALUE, device)
            })?;
            if can == 0 {
                return Ok(None);
            }
            let mut word = std::ptr::null_mut();
            // SAFETY: `word` is writable; the device is bound.
            check("hipExtMallocWithFlags", unsafe {
                (ops.hipExtMallocWithFlags)(&mut word, size_of::<u32>(), SIGNAL_MEMORY)
            })?;
            Ok(Some(Self {
                stream,
                device,
                word,
            }))
        })
    }
}

impl HostWord for HipWord {
    fn word(&self) -> &AtomicU32 {
        // SAFETY: `word` is live, host-visible signal memory of at least
        // four bytes, aligned by the allocator, owned by this value until
        // it is dropped.
        unsafe { AtomicU32::from_ptr(self.word.cast()) }
    }

    fn wait_at_least(&mut self, value: u32) -> Result<(), DriverError> {
        const CALL: &str = "hipStreamWaitValue32";
        let word = self.word;
        on_stream(self.stream, CALL, |rt, live| {
            let ops = rt.mem_ops.as_ref().ok_or_else(|| crate::dead(CALL))?;
            // SAFETY: the stream is live, its device bound; `word` is this
            // value's signal memory, alive until the stream has passed.
            check(CALL, unsafe {
                (ops.hipStreamWaitValue32)(live.raw, word, value, WAIT_GTE, u32::MAX)
            })
        })
    }

    /// A GPU's launch latency is a few microseconds, tens under load.
    fn settle(&self) -> Duration {
        Duration::from_micros(50)
    }
}

impl Drop for HipWord {
    /// Let the stream pass every wait (the gate is open by now), then free
    /// the word: the device must not read it after it is freed.
    fn drop(&mut self) {
        let drained = on_stream(self.stream, "hipStreamSynchronize", |rt, live| {
            // SAFETY: the stream is live, its device bound.
            check("hipStreamSynchronize", unsafe {
                (rt.fns.hipStreamSynchronize)(live.raw)
            })
        });
        if let Err(err) = drained {
            log::warn!(
                "{}: a gate's word is kept, its stream could not be drained: {err}",
                Hip::BACKEND
            );
            return;
        }
        let word = self.word;
        let freed = on_device(self.device, |rt| {
            let ops = rt.mem_ops.as_ref().ok_or_else(|| crate::dead("hipFree"))?;
            // SAFETY: allocated by `hipExtMallocWithFlags` in `new`, freed
            // once, after the stream has passed every wait on it.
            check("hipFree", unsafe { (ops.hipFree)(word) })
        });
        if let Err(err) = freed {
            log::error!("{}: could not free a gate's word: {err}", Hip::BACKEND);
        }
    }
}
