//! The HIP runtime API's C ABI, as `cubecl-hip-sys` calls it.
//!
//! As in HIP, each thread has a current device (0 until `hipSetDevice`), the
//! runtime initializes itself on first use, and the null stream synchronizes
//! with blocking streams only, as HIP documents for `hipStreamNonBlocking`.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::engine::{ENGINE, Fault, Outcome, StreamRef, WaitRules};
use crate::{calls, clock, codes, out};

type HipError = c_uint;
type HipEvent = *mut c_void;
type HipStream = *mut c_void;
type HipGraph = *mut c_void;

const HIP_EVENT_BLOCKING_SYNC: c_uint = 0x1;
const HIP_EVENT_DISABLE_TIMING: c_uint = 0x2;
const HIP_EVENT_INTERPROCESS: c_uint = 0x4;
/// `hipEventDisableSystemFence`, `hipEventReleaseToDevice`,
/// `hipEventReleaseToSystem`.
const HIP_EVENT_RELEASE_FLAGS: c_uint = 0xE000_0000;
const HIP_STREAM_NON_BLOCKING: c_uint = 0x1;
const HIP_STREAM_PER_THREAD: usize = 0x2;
/// Event timing resolution HIP documents: about 1 µs.
const RESOLUTION_NS: u64 = 1000;

thread_local! {
    static DEVICE: Cell<usize> = const { Cell::new(0) };
}

fn call(name: &'static str, body: impl FnOnce() -> Outcome<()>) -> HipError {
    as_hip(calls::call(name, codes::status, body))
}

fn release(name: &'static str, body: impl FnOnce() -> Outcome<()>) -> HipError {
    as_hip(calls::release(name, codes::status, body))
}

/// `hipError_t` is unsigned; every status in its table fits.
fn as_hip(status: i32) -> HipError {
    HipError::try_from(status).unwrap_or(999)
}

fn current() -> Outcome<usize> {
    if clock::devices() == 0 {
        // hipErrorNoDevice
        return Err(Fault::Injected(100));
    }
    Ok(DEVICE.with(Cell::get))
}

/// Null is the device's null stream, which, as HIP documents, synchronizes
/// with blocking streams only: one created with `hipStreamNonBlocking` does
/// not wait for it, nor it for them. `hipStreamPerThread` is the calling
/// thread's own default stream.
fn stream_ref(stream: HipStream) -> Outcome<StreamRef> {
    match stream as usize {
        0 => Ok(StreamRef::Null { device: current()? }),
        HIP_STREAM_PER_THREAD => Ok(StreamRef::PerThread { device: current()? }),
        id => Ok(StreamRef::Created(id as u64)),
    }
}

fn handle(id: u64) -> *mut c_void {
    id as usize as *mut c_void
}

#[unsafe(no_mangle)]
extern "C" fn hipInit(flags: c_uint) -> HipError {
    call("hipInit", || {
        if flags != 0 {
            return Err(Fault::InvalidValue);
        }
        current().map(drop)
    })
}

/// # Safety
///
/// `version` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn hipDriverGetVersion(version: *mut c_int) -> HipError {
    // SAFETY: the caller passes null or a pointer valid for a write.
    call("hipDriverGetVersion", || unsafe {
        out::put(version, clock::hip_version())
    })
}

/// # Safety
///
/// `version` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn hipRuntimeGetVersion(version: *mut c_int) -> HipError {
    // SAFETY: the caller passes null or a pointer valid for a write.
    call("hipRuntimeGetVersion", || unsafe {
        out::put(version, clock::hip_version())
    })
}

/// # Safety
///
/// `count` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn hipGetDeviceCount(count: *mut c_int) -> HipError {
    call("hipGetDeviceCount", || {
        current()?;
        let devices = c_int::try_from(clock::devices()).unwrap_or(c_int::MAX);
        // SAFETY: the caller passes null or a pointer valid for a write.
        unsafe { out::put(count, devices) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn hipSetDevice(device: c_int) -> HipError {
    call("hipSetDevice", || {
        current()?;
        let device = usize::try_from(device)
            .ok()
            .filter(|d| *d < clock::devices())
            .ok_or(Fault::InvalidDevice)?;
        DEVICE.with(|current| current.set(device));
        Ok(())
    })
}

/// # Safety
///
/// `device` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn hipGetDevice(device: *mut c_int) -> HipError {
    call("hipGetDevice", || {
        let current = c_int::try_from(current()?).unwrap_or(c_int::MAX);
        // SAFETY: the caller passes null or a pointer valid for a write.
        unsafe { out::put(device, current) }
    })
}

/// # Safety
///
/// `name` is null or valid for writes of `len` bytes.
#[unsafe(no_mangle)]
unsafe extern "C" fn hipDeviceGetName(name: *mut c_char, len: c_int, device: c_int) -> HipError {
    call("hipDeviceGetName", || {
        current()?;
        let device = usize::try_from(device)
            .ok()
            .filter(|d| *d < clock::devices())
            .ok_or(Fault::InvalidDevice)?;
        // SAFETY: the caller passes null or a buffer of `len` bytes.
        unsafe { out::put_str(name, len, &crate::device_name(device)) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn hipDeviceSynchronize() -> HipError {
    // clr's CHECK_SUPPORTED_DURING_CAPTURE: any capture, any device.
    call("hipDeviceSynchronize", || {
        ENGINE.device_synchronize(current()?, Some(None))
    })
}

/// # Safety
///
/// `event` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn hipEventCreateWithFlags(event: *mut HipEvent, flags: c_uint) -> HipError {
    call("hipEventCreateWithFlags", || {
        let device = current()?;
        // clr `ihipEventCreateWithFlags`: Default, BlockingSync,
        // DisableTiming, Interprocess (only with DisableTiming), and at
        // most one of the three release flags.
        let known = 0x7 | HIP_EVENT_RELEASE_FLAGS;
        let interprocess = flags & HIP_EVENT_INTERPROCESS != 0;
        if event.is_null()
            || flags & !known != 0
            || (flags & HIP_EVENT_RELEASE_FLAGS).count_ones() > 1
            || (interprocess && flags & HIP_EVENT_DISABLE_TIMING == 0)
        {
            return Err(Fault::InvalidValue);
        }
        let id = ENGINE.event_create(
            device,
            flags & HIP_EVENT_DISABLE_TIMING == 0,
            flags & HIP_EVENT_BLOCKING_SYNC != 0,
        );
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(event, handle(id)) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn hipEventRecord(event: HipEvent, stream: HipStream) -> HipError {
    call("hipEventRecord", || {
        ENGINE.event_record(event as u64, stream_ref(stream)?)
    })
}

#[unsafe(no_mangle)]
extern "C" fn hipEventQuery(event: HipEvent) -> HipError {
    call("hipEventQuery", || ENGINE.event_query(event as u64, true))
}

#[unsafe(no_mangle)]
extern "C" fn hipEventSynchronize(event: HipEvent) -> HipError {
    call("hipEventSynchronize", || {
        ENGINE.event_synchronize(event as u64, true)
    })
}

/// # Safety
///
/// `ms` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn hipEventElapsedTime(ms: *mut f32, start: HipEvent, end: HipEvent) -> HipError {
    call("hipEventElapsedTime", || {
        if ms.is_null() {
            return Err(Fault::InvalidValue);
        }
        let reading = ENGINE.event_elapsed(start as u64, end as u64, RESOLUTION_NS)?;
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(ms, reading) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn hipEventDestroy(event: HipEvent) -> HipError {
    release("hipEventDestroy", || {
        ENGINE.event_destroy(event as u64, true)
    })
}

/// # Safety
///
/// `stream` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn hipStreamCreateWithFlags(stream: *mut HipStream, flags: c_uint) -> HipError {
    call("hipStreamCreateWithFlags", || {
        let device = current()?;
        if stream.is_null() || flags & !HIP_STREAM_NON_BLOCKING != 0 {
            return Err(Fault::InvalidValue);
        }
        let id = ENGINE.stream_create(device, flags & HIP_STREAM_NON_BLOCKING == 0);
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(stream, handle(id)) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn hipStreamWaitEvent(stream: HipStream, event: HipEvent, flags: c_uint) -> HipError {
    call("hipStreamWaitEvent", || {
        if flags > 1 {
            return Err(Fault::InvalidValue);
        }
        ENGINE.stream_wait_event(stream_ref(stream)?, event as u64, WaitRules::Clr)
    })
}

#[unsafe(no_mangle)]
extern "C" fn hipStreamSynchronize(stream: HipStream) -> HipError {
    call("hipStreamSynchronize", || {
        ENGINE.stream_synchronize(stream_ref(stream)?)
    })
}

#[unsafe(no_mangle)]
extern "C" fn hipStreamDestroy(stream: HipStream) -> HipError {
    release("hipStreamDestroy", || {
        ENGINE.stream_destroy(stream as u64, true)
    })
}

/// # Safety
///
/// `status` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn hipStreamIsCapturing(stream: HipStream, status: *mut c_uint) -> HipError {
    call("hipStreamIsCapturing", || {
        let capture = ENGINE.stream_capture_status(stream_ref(stream)?)?;
        // SAFETY: the caller passes null or a pointer valid for a write.
        unsafe { out::put(status, capture) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn hipStreamBeginCapture(stream: HipStream, mode: c_uint) -> HipError {
    call("hipStreamBeginCapture", || {
        if mode > 2 || stream.is_null() {
            return Err(Fault::InvalidValue);
        }
        ENGINE.stream_begin_capture(stream as u64, mode)
    })
}

/// Swap the calling thread's capture interaction mode with `*mode`.
///
/// # Safety
///
/// `mode` is null or valid for a read and a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn hipThreadExchangeStreamCaptureMode(mode: *mut c_uint) -> HipError {
    call("hipThreadExchangeStreamCaptureMode", || {
        if mode.is_null() {
            return Err(Fault::InvalidValue);
        }
        // SAFETY: non-null, and valid for a read by the caller's promise.
        let mut swapped = unsafe { mode.read() };
        crate::engine::Engine::exchange_capture_mode(&mut swapped)?;
        // SAFETY: as above, for the write.
        unsafe { out::put(mode, swapped) }
    })
}

/// # Safety
///
/// `graph` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn hipStreamEndCapture(stream: HipStream, graph: *mut HipGraph) -> HipError {
    call("hipStreamEndCapture", || {
        if graph.is_null() {
            return Err(Fault::InvalidValue);
        }
        let made = ENGINE.stream_end_capture(stream as u64, true);
        let value = made.map_or(std::ptr::null_mut(), handle);
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(graph, value)? };
        made.map(drop)
    })
}

#[unsafe(no_mangle)]
extern "C" fn hipGraphDestroy(graph: HipGraph) -> HipError {
    release("hipGraphDestroy", || ENGINE.graph_destroy(graph as u64))
}

/// # Safety
///
/// `ptr` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> HipError {
    call("hipMalloc", || {
        let device = current()?;
        if ptr.is_null() {
            return Err(Fault::InvalidValue);
        }
        let base = ENGINE.mem_alloc(device, size)?;
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(ptr, handle(base)) }
    })
}

/// `hipDeviceAttributeCanUseStreamWaitValue` (10013) reads 1 unless
/// switched off; every other attribute reads 0.
///
/// # Safety
///
/// `value` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn hipDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    device: c_int,
) -> HipError {
    const CAN_USE_STREAM_WAIT_VALUE: c_int = 10013;
    call("hipDeviceGetAttribute", || {
        current()?;
        usize::try_from(device)
            .ok()
            .filter(|d| *d < clock::devices())
            .ok_or(Fault::InvalidDevice)?;
        let reading = match attribute {
            CAN_USE_STREAM_WAIT_VALUE => c_int::from(clock::stream_mem_ops()),
            _ => 0,
        };
        // SAFETY: the caller passes null or a pointer valid for a write.
        unsafe { out::put(value, reading) }
    })
}

/// Only `hipMallocSignalMemory` (2): host memory mapped for the device,
/// which streams can wait on and `hipFree` releases.
///
/// # Safety
///
/// `ptr` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn hipExtMallocWithFlags(
    ptr: *mut *mut c_void,
    size: usize,
    flags: c_uint,
) -> HipError {
    const SIGNAL_MEMORY: c_uint = 2;
    call("hipExtMallocWithFlags", || {
        current()?;
        // clr's hip_memory.cpp: signal memory is one 8-byte slot, any
        // other size is hipErrorInvalidValue.
        if ptr.is_null() || flags != SIGNAL_MEMORY || size != 8 {
            return Err(Fault::InvalidValue);
        }
        let address = ENGINE.host_alloc(size, false, true)?;
        // An HSA signal's value, which clr creates at 1
        // (`kInitSignalValueOne`), not 0.
        ENGINE.host_store(address, 1)?;
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(ptr, address as usize as *mut c_void) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn hipStreamWaitValue32(
    stream: HipStream,
    ptr: *mut c_void,
    value: u32,
    flags: c_uint,
    mask: u32,
) -> HipError {
    call("hipStreamWaitValue32", || {
        // hipStreamWaitValueGte, _Eq, _And, _Nor.
        if flags > 3 {
            return Err(Fault::InvalidValue);
        }
        let test = crate::engine::ValueTest {
            kind: flags,
            value,
            mask,
        };
        ENGINE.stream_wait_value(stream_ref(stream)?, ptr as u64, test)
    })
}

#[unsafe(no_mangle)]
extern "C" fn hipFree(ptr: *mut c_void) -> HipError {
    release("hipFree", || {
        if ptr.is_null() {
            return Ok(());
        }
        // clr's hipFree waits for the device's work first (ROCm/hip#1018).
        ENGINE.device_synchronize(current()?, None)?;
        ENGINE.mem_free(ptr as u64)
    })
}

#[unsafe(no_mangle)]
extern "C" fn hipMemsetAsync(
    dst: *mut c_void,
    _value: c_int,
    size: usize,
    stream: HipStream,
) -> HipError {
    call("hipMemsetAsync", || {
        ENGINE.memset_async(dst as u64, size, stream_ref(stream)?)
    })
}

fn text(name: &'static str, error: HipError, describe: bool) -> *const c_char {
    // The text calls cannot fail, so a failure injected here is only counted.
    let _ = calls::enter(name);
    let code = i32::try_from(error).unwrap_or(999);
    codes::c_name(codes::Abi::Hip, code, describe)
        .or_else(|| codes::c_name(codes::Abi::Hip, 999, describe))
        .unwrap_or(std::ptr::null())
}

#[unsafe(no_mangle)]
extern "C" fn hipGetErrorName(error: HipError) -> *const c_char {
    text("hipGetErrorName", error, false)
}

#[unsafe(no_mangle)]
extern "C" fn hipGetErrorString(error: HipError) -> *const c_char {
    text("hipGetErrorString", error, true)
}
