//! Primary contexts, retained for as long as an event or stream of theirs
//! lives: the driver tears a primary context down when its last retain is
//! released, and a handle used after that acts on freed driver state.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use cudarc::driver::sys::{CUcontext, CUdevice};
use device_events_core::{DriverError, ErrorKind};

use crate::{BACKEND, api, check_status};

/// One retain of a device's primary context, released when dropped.
#[derive(Debug)]
pub struct Context {
    pub(crate) raw: CUcontext,
    pub(crate) device: CUdevice,
}

// SAFETY: `raw` is an opaque driver handle, never dereferenced here, and
// the driver API takes it from any thread; the retain it stands for is
// process-wide, not per thread.
unsafe impl Send for Context {}
// SAFETY: as for `Send`; nothing is mutated through `&Context`.
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        let Ok(api) = api() else { return };
        // SAFETY: this value holds one retain of `device`'s primary context,
        // taken in `retain_current`, and releases it once.
        let status = unsafe { (api.cuDevicePrimaryCtxRelease_v2)(self.device) };
        if let Err(err) = check_status("cuDevicePrimaryCtxRelease_v2", status) {
            log::error!("{BACKEND}: could not release a primary context: {err}");
        }
    }
}

/// Contexts retained by live handles; an entry whose handles are all gone
/// is dead, and its address may since belong to another context.
static RETAINED: Mutex<Vec<Weak<Context>>> = Mutex::new(Vec::new());

/// The calling thread's current context.
#[inline]
pub(crate) fn current() -> Result<Option<CUcontext>, DriverError> {
    let mut ctx = std::ptr::null_mut();
    // SAFETY: `ctx` is writable.
    check_status("cuCtxGetCurrent", unsafe {
        (api()?.cuCtxGetCurrent)(&mut ctx)
    })?;
    Ok((!ctx.is_null()).then_some(ctx))
}

/// Make `ctx` current, above the caller's.
pub(crate) fn push(ctx: CUcontext) -> Result<(), DriverError> {
    // SAFETY: `ctx` is retained by the handle the call is for (or live by
    // `Cuda::stream_from_raw`'s contract).
    check_status("cuCtxPushCurrent_v2", unsafe {
        (api()?.cuCtxPushCurrent_v2)(ctx)
    })
}

/// Give the caller its context back, after a `push`.
pub(crate) fn pop() -> Result<(), DriverError> {
    let mut popped = std::ptr::null_mut();
    // SAFETY: pops the context pushed before; `popped` is writable.
    check_status("cuCtxPopCurrent_v2", unsafe {
        (api()?.cuCtxPopCurrent_v2)(&mut popped)
    })
}

/// The calling thread's current context, retained.
///
/// # Errors
///
/// When no context is current, or the current one is not a device's
/// primary context (one made by `cuCtxCreate` cannot be kept alive from
/// here), or the driver refuses.
pub(crate) fn retain_current(call: &'static str) -> Result<Arc<Context>, DriverError> {
    let api = api()?;
    let Some(ctx) = current()? else {
        return Err(DriverError::refused(
            BACKEND,
            call,
            ErrorKind::InvalidHandle,
            "no CUDA context is current on this thread; bind one first \
             (with cudarc: `CudaContext::new(ordinal)?.bind_to_thread()?`)",
        ));
    };
    let mut retained = RETAINED.lock().unwrap_or_else(PoisonError::into_inner);
    // A live entry for `ctx` is this very context: its retain keeps it from
    // being torn down, so its address cannot have been reused.
    if let Some(found) = retained
        .iter()
        .filter_map(Weak::upgrade)
        .find(|c| c.raw == ctx)
    {
        return Ok(found);
    }
    let mut device = 0;
    // SAFETY: `device` is writable; `ctx` is current.
    check_status("cuCtxGetDevice", unsafe {
        (api.cuCtxGetDevice)(&mut device)
    })?;
    let mut primary = std::ptr::null_mut();
    // SAFETY: `primary` is writable; `device` is the current context's.
    check_status("cuDevicePrimaryCtxRetain", unsafe {
        (api.cuDevicePrimaryCtxRetain)(&mut primary, device)
    })?;
    let context = Arc::new(Context {
        raw: primary,
        device,
    });
    if primary != ctx {
        drop(context);
        return Err(DriverError::refused(
            BACKEND,
            call,
            ErrorKind::InvalidHandle,
            format!(
                "the current context is not device {device}'s primary context; \
                 device-events can keep only primary contexts alive (cudarc's \
                 `CudaContext` uses them)"
            ),
        ));
    }
    retained.retain(|c| c.strong_count() > 0);
    retained.push(Arc::downgrade(&context));
    Ok(context)
}
