//! The CUDA driver API's C ABI, as cudarc's `driver` bindings call it.
//!
//! Contexts are per thread, as in CUDA: each thread has a stack of current
//! contexts, and a call that needs one and finds none fails with
//! `CUDA_ERROR_INVALID_CONTEXT`. Each device has one (primary) context.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError};

use crate::engine::{ENGINE, Fault, Outcome, StreamRef, WaitRules};
use crate::{calls, clock, codes, out};

type CUresult = c_int;
type CUdevice = c_int;
type CUcontext = *mut c_void;
type CUevent = *mut c_void;
type CUstream = *mut c_void;
type CUgraph = *mut c_void;
type CUdeviceptr = u64;
type CUmodule = *mut c_void;
type CUfunction = *mut c_void;

const CU_EVENT_BLOCKING_SYNC: c_uint = 0x1;
const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
const CU_EVENT_INTERPROCESS: c_uint = 0x4;
const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 0x2;
const CU_STREAM_NON_BLOCKING: c_uint = 0x1;
const CU_STREAM_LEGACY: usize = 0x1;
const CU_STREAM_PER_THREAD: usize = 0x2;
/// Event timing resolution the CUDA documentation states: about 0.5 µs.
const RESOLUTION_NS: u64 = 500;
const DRIVER_VERSION: c_int = 12080;

static INITIALIZED: AtomicBool = AtomicBool::new(false);
static PRIMARY_REFS: LazyLock<Mutex<Vec<u32>>> =
    LazyLock::new(|| Mutex::new(vec![0; clock::devices()]));

thread_local! {
    static CONTEXTS: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

fn call(name: &'static str, body: impl FnOnce() -> Outcome<()>) -> CUresult {
    calls::call(name, codes::status, body)
}

fn release(name: &'static str, body: impl FnOnce() -> Outcome<()>) -> CUresult {
    calls::release(name, codes::status, body)
}

fn initialized() -> Outcome<()> {
    if INITIALIZED.load(Ordering::Acquire) {
        Ok(())
    } else {
        Err(Fault::NotInitialized)
    }
}

fn device(ordinal: CUdevice) -> Outcome<usize> {
    usize::try_from(ordinal)
        .ok()
        .filter(|d| *d < clock::devices())
        .ok_or(Fault::InvalidDevice)
}

fn context_handle(device: usize) -> CUcontext {
    ((device + 1) << 4) as CUcontext
}

fn context_device(ctx: CUcontext) -> Outcome<usize> {
    let raw = ctx as usize;
    if raw.is_multiple_of(16) && (1..=clock::devices()).contains(&(raw >> 4)) {
        Ok((raw >> 4) - 1)
    } else {
        Err(Fault::InvalidContext)
    }
}

/// Refuse a handle whose primary context was torn down: a real driver would
/// act on freed state. The call is counted as a misuse.
fn context_alive(handle: *mut c_void) -> Outcome<()> {
    ENGINE.context_alive(handle as u64)
}

/// The calling thread's current context's device.
fn current() -> Outcome<usize> {
    initialized()?;
    CONTEXTS
        .with(|stack| stack.borrow().last().copied())
        .ok_or(Fault::InvalidContext)
}

/// `CU_STREAM_LEGACY` and null are the context's legacy default stream;
/// `CU_STREAM_PER_THREAD` is the calling thread's own default stream, which
/// synchronizes with the legacy one as a blocking stream does.
fn stream_ref(stream: CUstream) -> Outcome<StreamRef> {
    match stream as usize {
        0 | CU_STREAM_LEGACY => Ok(StreamRef::Null { device: current()? }),
        CU_STREAM_PER_THREAD => Ok(StreamRef::PerThread { device: current()? }),
        id => Ok(StreamRef::Created(id as u64)),
    }
}

fn handle(id: u64) -> *mut c_void {
    id as usize as *mut c_void
}

pub(crate) fn retained_contexts() -> u64 {
    PRIMARY_REFS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|refs| **refs > 0)
        .count() as u64
}

#[unsafe(no_mangle)]
extern "C" fn cuInit(flags: c_uint) -> CUresult {
    call("cuInit", || {
        if flags != 0 {
            return Err(Fault::InvalidValue);
        }
        if clock::devices() == 0 {
            // CUDA_ERROR_NO_DEVICE
            return Err(Fault::Injected(100));
        }
        INITIALIZED.store(true, Ordering::Release);
        Ok(())
    })
}

/// # Safety
///
/// `version` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    // SAFETY: the caller passes null or a pointer valid for a write.
    call("cuDriverGetVersion", || unsafe {
        out::put(version, DRIVER_VERSION)
    })
}

/// # Safety
///
/// `count` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    call("cuDeviceGetCount", || {
        initialized()?;
        let devices = c_int::try_from(clock::devices()).unwrap_or(c_int::MAX);
        // SAFETY: the caller passes null or a pointer valid for a write.
        unsafe { out::put(count, devices) }
    })
}

/// # Safety
///
/// `dev` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDeviceGet(dev: *mut CUdevice, ordinal: c_int) -> CUresult {
    call("cuDeviceGet", || {
        initialized()?;
        device(ordinal)?;
        // SAFETY: the caller passes null or a pointer valid for a write.
        unsafe { out::put(dev, ordinal) }
    })
}

/// # Safety
///
/// `name` is null or valid for writes of `len` bytes.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    call("cuDeviceGetName", || {
        initialized()?;
        let device = device(dev)?;
        // SAFETY: the caller passes null or a buffer of `len` bytes.
        unsafe { out::put_str(name, len, &crate::device_name(device)) }
    })
}

/// Every attribute reads as 0 but the compute capability, reported as 9.0,
/// and `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS` (92; `_V1` since CUDA
/// 12), 1 unless switched off.
///
/// # Safety
///
/// `value` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    dev: CUdevice,
) -> CUresult {
    const MAJOR: c_int = 75;
    const MINOR: c_int = 76;
    const STREAM_MEM_OPS: c_int = 92;
    call("cuDeviceGetAttribute", || {
        initialized()?;
        device(dev)?;
        let reading = match attribute {
            MAJOR => (crate::image::ARCH / 10) as c_int,
            MINOR => (crate::image::ARCH % 10) as c_int,
            STREAM_MEM_OPS => c_int::from(crate::clock::stream_mem_ops()),
            _ => 0,
        };
        // SAFETY: the caller passes null or a pointer valid for a write.
        unsafe { out::put(value, reading) }
    })
}

/// # Safety
///
/// `ctx` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    call("cuDevicePrimaryCtxRetain", || {
        initialized()?;
        let device = device(dev)?;
        // SAFETY: the caller passes null or a pointer valid for a write.
        unsafe { out::put(ctx, context_handle(device))? };
        let mut refs = PRIMARY_REFS.lock().unwrap_or_else(PoisonError::into_inner);
        refs[device] += 1;
        Ok(())
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    release("cuDevicePrimaryCtxRelease_v2", || {
        initialized()?;
        let device = device(dev)?;
        let mut refs = PRIMARY_REFS.lock().unwrap_or_else(PoisonError::into_inner);
        match refs[device] {
            0 => Err(Fault::InvalidContext),
            _ => {
                refs[device] -= 1;
                if refs[device] == 0 {
                    // The last reference: the context is destroyed, with
                    // everything it held.
                    ENGINE.tear_down(device);
                }
                Ok(())
            }
        }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    call("cuCtxSetCurrent", || {
        initialized()?;
        let device = if ctx.is_null() {
            None
        } else {
            Some(context_device(ctx)?)
        };
        CONTEXTS.with(|stack| {
            let mut stack = stack.borrow_mut();
            stack.pop();
            stack.extend(device);
        });
        Ok(())
    })
}

/// # Safety
///
/// `ctx` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut CUcontext) -> CUresult {
    call("cuCtxGetCurrent", || {
        initialized()?;
        let top = CONTEXTS.with(|stack| stack.borrow().last().copied());
        let handle = top.map_or(std::ptr::null_mut(), context_handle);
        // SAFETY: the caller passes null or a pointer valid for a write.
        unsafe { out::put(ctx, handle) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    call("cuCtxPushCurrent_v2", || {
        initialized()?;
        let device = context_device(ctx)?;
        CONTEXTS.with(|stack| stack.borrow_mut().push(device));
        Ok(())
    })
}

/// # Safety
///
/// `ctx` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuCtxPopCurrent_v2(ctx: *mut CUcontext) -> CUresult {
    call("cuCtxPopCurrent_v2", || {
        initialized()?;
        let popped = CONTEXTS
            .with(|stack| stack.borrow_mut().pop())
            .ok_or(Fault::InvalidContext)?;
        if ctx.is_null() {
            return Ok(());
        }
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(ctx, context_handle(popped)) }
    })
}

/// # Safety
///
/// `dev` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuCtxGetDevice(dev: *mut CUdevice) -> CUresult {
    call("cuCtxGetDevice", || {
        let device = current()?;
        let ordinal = CUdevice::try_from(device).map_err(|_| Fault::InvalidDevice)?;
        // SAFETY: the caller passes null or a pointer valid for a write.
        unsafe { out::put(dev, ordinal) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuCtxSynchronize() -> CUresult {
    call("cuCtxSynchronize", || {
        let device = current()?;
        ENGINE.device_synchronize(device, Some(Some(device)))
    })
}

/// # Safety
///
/// `event` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuEventCreate(event: *mut CUevent, flags: c_uint) -> CUresult {
    call("cuEventCreate", || {
        let device = current()?;
        // DEFAULT, BLOCKING_SYNC, DISABLE_TIMING, INTERPROCESS; an
        // interprocess event "must be specified with DISABLE_TIMING".
        let interprocess = flags & CU_EVENT_INTERPROCESS != 0;
        if event.is_null()
            || flags & !0x7 != 0
            || (interprocess && flags & CU_EVENT_DISABLE_TIMING == 0)
        {
            return Err(Fault::InvalidValue);
        }
        let id = ENGINE.event_create(
            device,
            flags & CU_EVENT_DISABLE_TIMING == 0,
            flags & CU_EVENT_BLOCKING_SYNC != 0,
        );
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(event, handle(id)) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuEventRecord(event: CUevent, stream: CUstream) -> CUresult {
    call("cuEventRecord", || {
        initialized()?;
        context_alive(event)?;
        context_alive(stream)?;
        ENGINE.event_record(event as u64, stream_ref(stream)?)
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuEventQuery(event: CUevent) -> CUresult {
    call("cuEventQuery", || {
        initialized()?;
        context_alive(event)?;
        ENGINE.event_query(event as u64, false)
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuEventSynchronize(event: CUevent) -> CUresult {
    call("cuEventSynchronize", || {
        initialized()?;
        context_alive(event)?;
        ENGINE.event_synchronize(event as u64, false)
    })
}

fn elapsed(name: &'static str, ms: *mut f32, start: CUevent, end: CUevent) -> CUresult {
    call(name, || {
        initialized()?;
        if ms.is_null() {
            return Err(Fault::InvalidValue);
        }
        context_alive(start)?;
        context_alive(end)?;
        let reading = ENGINE.event_elapsed(start as u64, end as u64, RESOLUTION_NS)?;
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(ms, reading) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult {
    elapsed("cuEventElapsedTime", ms, start, end)
}

#[unsafe(no_mangle)]
extern "C" fn cuEventElapsedTime_v2(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult {
    elapsed("cuEventElapsedTime_v2", ms, start, end)
}

#[unsafe(no_mangle)]
extern "C" fn cuEventDestroy_v2(event: CUevent) -> CUresult {
    release("cuEventDestroy_v2", || {
        initialized()?;
        context_alive(event)?;
        ENGINE.event_destroy(event as u64, false)
    })
}

/// # Safety
///
/// `stream` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuStreamCreate(stream: *mut CUstream, flags: c_uint) -> CUresult {
    call("cuStreamCreate", || {
        let device = current()?;
        if stream.is_null() || flags & !CU_STREAM_NON_BLOCKING != 0 {
            return Err(Fault::InvalidValue);
        }
        let id = ENGINE.stream_create(device, flags & CU_STREAM_NON_BLOCKING == 0);
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(stream, handle(id)) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuStreamWaitEvent(stream: CUstream, event: CUevent, flags: c_uint) -> CUresult {
    call("cuStreamWaitEvent", || {
        initialized()?;
        if flags != 0 && flags != 1 {
            return Err(Fault::InvalidValue);
        }
        context_alive(stream)?;
        context_alive(event)?;
        ENGINE.stream_wait_event(
            stream_ref(stream)?,
            event as u64,
            WaitRules::Cuda {
                external: flags == 1,
            },
        )
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuStreamSynchronize(stream: CUstream) -> CUresult {
    call("cuStreamSynchronize", || {
        initialized()?;
        context_alive(stream)?;
        ENGINE.stream_synchronize(stream_ref(stream)?)
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuStreamDestroy_v2(stream: CUstream) -> CUresult {
    release("cuStreamDestroy_v2", || {
        initialized()?;
        context_alive(stream)?;
        ENGINE.stream_destroy(stream as u64, false)
    })
}

/// # Safety
///
/// `status` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuStreamIsCapturing(stream: CUstream, status: *mut c_uint) -> CUresult {
    call("cuStreamIsCapturing", || {
        initialized()?;
        context_alive(stream)?;
        let capture = ENGINE.stream_capture_status(stream_ref(stream)?)?;
        // SAFETY: the caller passes null or a pointer valid for a write.
        unsafe { out::put(status, capture) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuStreamBeginCapture_v2(stream: CUstream, mode: c_uint) -> CUresult {
    call("cuStreamBeginCapture_v2", || {
        initialized()?;
        if mode > 2 || (stream as usize) <= CU_STREAM_PER_THREAD {
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
unsafe extern "C" fn cuThreadExchangeStreamCaptureMode(mode: *mut c_uint) -> CUresult {
    call("cuThreadExchangeStreamCaptureMode", || {
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
unsafe extern "C" fn cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph) -> CUresult {
    call("cuStreamEndCapture", || {
        initialized()?;
        if graph.is_null() {
            return Err(Fault::InvalidValue);
        }
        let made = ENGINE.stream_end_capture(stream as u64, false);
        let value = made.map_or(std::ptr::null_mut(), handle);
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(graph, value)? };
        made.map(drop)
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuGraphDestroy(graph: CUgraph) -> CUresult {
    release("cuGraphDestroy", || {
        initialized()?;
        ENGINE.graph_destroy(graph as u64)
    })
}

/// # Safety
///
/// `dptr` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize) -> CUresult {
    call("cuMemAlloc_v2", || {
        let device = current()?;
        if dptr.is_null() {
            return Err(Fault::InvalidValue);
        }
        let base = ENGINE.mem_alloc(device, bytes)?;
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(dptr, base) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    release("cuMemFree_v2", || {
        initialized()?;
        ENGINE.mem_free(dptr)
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuMemsetD8Async(
    dst: CUdeviceptr,
    _value: u8,
    count: usize,
    stream: CUstream,
) -> CUresult {
    call("cuMemsetD8Async", || {
        initialized()?;
        ENGINE.memset_async(dst, count, stream_ref(stream)?)
    })
}

/// # Safety
///
/// `pp` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemHostAlloc(pp: *mut *mut c_void, bytes: usize, flags: c_uint) -> CUresult {
    call("cuMemHostAlloc", || {
        current()?;
        // PORTABLE, DEVICEMAP, WRITECOMBINED.
        if pp.is_null() || flags & !0x7 != 0 {
            return Err(Fault::InvalidValue);
        }
        let address = ENGINE.host_alloc(bytes, true, flags & CU_MEMHOSTALLOC_DEVICEMAP != 0)?;
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(pp, address as usize as *mut c_void) }
    })
}

/// # Safety
///
/// `dptr` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    dptr: *mut CUdeviceptr,
    p: *mut c_void,
    flags: c_uint,
) -> CUresult {
    call("cuMemHostGetDevicePointer_v2", || {
        current()?;
        if dptr.is_null() || flags != 0 {
            return Err(Fault::InvalidValue);
        }
        let address = ENGINE.host_device_pointer(p as u64)?;
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(dptr, address) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    release("cuMemFreeHost", || {
        initialized()?;
        ENGINE.host_free(p as u64)
    })
}

/// The one kernel this driver runs, by its entry name: `spin_stamp(u64
/// ns, u64 out)` spins `ns` nanoseconds and writes its start and end
/// `%globaltimer` to `out`. The bench carries its PTX, and the GPU kit a
/// cubin of it for `sm_90`.
const SPIN_KERNEL: &str = "spin_stamp";

/// # Safety
///
/// `module` is null or valid for a write; `image` is null, a
/// NUL-terminated PTX text or a whole ELF image.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CUresult {
    call("cuModuleLoadData", || {
        let device = current()?;
        if module.is_null() || image.is_null() {
            return Err(Fault::InvalidValue);
        }
        // SAFETY: non-null, and the caller passes a NUL-terminated text or
        // a whole ELF image.
        unsafe { crate::image::classify(image) }?;
        let id = ENGINE.module_load(device)?;
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(module, handle(id)) }
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuModuleUnload(module: CUmodule) -> CUresult {
    release("cuModuleUnload", || {
        initialized()?;
        ENGINE.module_unload(module as u64)
    })
}

/// # Safety
///
/// `function` is null or valid for a write; `name` is null or a
/// NUL-terminated string.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuModuleGetFunction(
    function: *mut CUfunction,
    module: CUmodule,
    name: *const c_char,
) -> CUresult {
    call("cuModuleGetFunction", || {
        initialized()?;
        if function.is_null() || name.is_null() {
            return Err(Fault::InvalidValue);
        }
        // SAFETY: non-null, and the caller passes a NUL-terminated string.
        let name = unsafe { std::ffi::CStr::from_ptr(name) };
        let id = ENGINE.module_function(module as u64)?;
        if name.to_bytes() != SPIN_KERNEL.as_bytes() {
            ENGINE.function_forget(id);
            return Err(Fault::NotFound);
        }
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(function, handle(id)) }
    })
}

/// # Safety
///
/// `params` is null or points to the kernel's two parameters, each a
/// pointer to a `u64`.
#[allow(clippy::too_many_arguments)] // the ABI's
#[unsafe(no_mangle)]
unsafe extern "C" fn cuLaunchKernel(
    function: CUfunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    _shared_bytes: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    call("cuLaunchKernel", || {
        let device = current()?;
        context_alive(stream)?;
        let dims = [grid_x, grid_y, grid_z, block_x, block_y, block_z];
        // Both argument forms at once, or none for a kernel that takes
        // parameters: refused. This driver reads `params` only.
        if dims.contains(&0) || params.is_null() || !extra.is_null() {
            return Err(Fault::InvalidValue);
        }
        // SAFETY: the caller passes the kernel's two parameters, each a
        // pointer to a `u64`.
        let (ns, at) = unsafe {
            (
                (*params).cast::<u64>().read_unaligned(),
                (*params.add(1)).cast::<u64>().read_unaligned(),
            )
        };
        ENGINE.launch_spin(function as u64, device, stream_ref(stream)?, ns, at)
    })
}

fn wait_value(
    name: &'static str,
    stream: CUstream,
    addr: CUdeviceptr,
    value: u32,
    flags: c_uint,
) -> CUresult {
    call(name, || {
        initialized()?;
        // CU_STREAM_WAIT_VALUE_GEQ, _EQ, _AND, _NOR, optionally with
        // CU_STREAM_WAIT_VALUE_FLUSH (1 << 30).
        let kind = flags & !(1 << 30);
        if kind > 3 {
            return Err(Fault::InvalidValue);
        }
        context_alive(stream)?;
        let test = crate::engine::ValueTest {
            kind: if kind == 0 {
                crate::engine::CYCLIC_GEQ
            } else {
                kind
            },
            value,
            mask: u32::MAX,
        };
        ENGINE.stream_wait_value(stream_ref(stream)?, addr, test)
    })
}

#[unsafe(no_mangle)]
extern "C" fn cuStreamWaitValue32(
    stream: CUstream,
    addr: CUdeviceptr,
    value: u32,
    flags: c_uint,
) -> CUresult {
    wait_value("cuStreamWaitValue32", stream, addr, value, flags)
}

#[unsafe(no_mangle)]
extern "C" fn cuStreamWaitValue32_v2(
    stream: CUstream,
    addr: CUdeviceptr,
    value: u32,
    flags: c_uint,
) -> CUresult {
    wait_value("cuStreamWaitValue32_v2", stream, addr, value, flags)
}

fn error_text(
    name: &'static str,
    error: CUresult,
    text: *mut *const c_char,
    describe: bool,
) -> CUresult {
    call(name, || {
        if text.is_null() {
            return Err(Fault::InvalidValue);
        }
        let found = codes::c_name(codes::Abi::Cuda, error, describe);
        // SAFETY: non-null, and the caller passes a pointer valid for a write.
        unsafe { out::put(text, found.unwrap_or(std::ptr::null())) }?;
        found.map(drop).ok_or(Fault::InvalidValue)
    })
}

/// # Safety
///
/// `name` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuGetErrorName(error: CUresult, name: *mut *const c_char) -> CUresult {
    error_text("cuGetErrorName", error, name, false)
}

/// # Safety
///
/// `text` is null or valid for a write.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuGetErrorString(error: CUresult, text: *mut *const c_char) -> CUresult {
    error_text("cuGetErrorString", error, text, true)
}
