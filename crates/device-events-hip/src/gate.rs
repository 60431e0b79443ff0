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

use device_events_core::DriverError;
use device_events_core::backend::{HostWord, Permit, RawApi};
use std::time::Duration;

use crate::runtime::MemOps;
use crate::{Hip, check, runtime_initialised};

/// `hipDeviceAttributeCanUseStreamWaitValue`.
const CAN_USE_STREAM_WAIT_VALUE: c_int = 10013;
/// `hipMallocSignalMemory`.
const SIGNAL_MEMORY: c_uint = 2;
/// `hipStreamWaitValueGte`.
const WAIT_GTE: c_uint = 0;
/// Signal memory is one 8-byte slot: ROCm's runtime (`clr`,
/// `hipExtMallocWithFlags`) refuses any other size. The gate's word is its
/// first four bytes, which `hipStreamWaitValue32` reads.
const SIGNAL_BYTES: usize = 8;

/// A word of signal memory a stream waits on.
struct HipWord {
    ops: &'static MemOps,
    word: *mut c_void,
}

// SAFETY: `word` is signal memory this value alone owns, touched only
// through an `AtomicU32`; the runtime is thread-safe.
unsafe impl Send for HipWord {}

/// A word for `device`'s streams, made with the device bound, or `None`
/// where the runtime or device has no stream memory operations.
pub(crate) fn word(device: c_int) -> Result<Option<Box<dyn HostWord<Hip>>>, DriverError> {
    let Some(ops) = &runtime_initialised()?.mem_ops else {
        return Ok(None);
    };
    let mut can = 0;
    // SAFETY: `can` is writable; `device` exists (a stream's).
    check("hipDeviceGetAttribute", unsafe {
        (ops.hipDeviceGetAttribute)(&mut can, CAN_USE_STREAM_WAIT_VALUE, device)
    })?;
    if can == 0 {
        return Ok(None);
    }
    let mut word = std::ptr::null_mut();
    // SAFETY: `word` is writable; the device is bound.
    check("hipExtMallocWithFlags", unsafe {
        (ops.hipExtMallocWithFlags)(&mut word, SIGNAL_BYTES, SIGNAL_MEMORY)
    })?;
    Ok(Some(Box::new(HipWord { ops, word })))
}

impl HostWord<Hip> for HipWord {
    fn word(&self) -> &AtomicU32 {
        // SAFETY: `word` is live, host-visible signal memory of eight
        // bytes, aligned by the allocator, owned by this value until
        // it is freed.
        unsafe { AtomicU32::from_ptr(self.word.cast()) }
    }

    fn wait_at_least(
        &self,
        _: Permit<Hip>,
        stream: &<Hip as RawApi>::Stream,
        value: u32,
    ) -> Result<(), DriverError> {
        // SAFETY: the stream is live and its device bound (the permit);
        // `word` is this value's signal memory, freed only once the stream
        // has passed every wait.
        check("hipStreamWaitValue32", unsafe {
            (self.ops.hipStreamWaitValue32)(stream.0, self.word, value, WAIT_GTE, u32::MAX)
        })
    }

    fn free(self: Box<Self>, _: Permit<Hip>) -> Result<(), DriverError> {
        // SAFETY: allocated by `hipExtMallocWithFlags` in `word`, freed
        // once (by value), after the stream has passed every wait on it.
        check("hipFree", unsafe { (self.ops.hipFree)(self.word) })
    }

    /// A GPU's launch latency is a few microseconds, tens under load.
    fn settle(&self) -> Duration {
        Duration::from_micros(50)
    }
}
