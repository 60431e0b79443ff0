//! Shared by the software driver's CUDA test files.
#![allow(dead_code, clippy::unwrap_used)]

use cudarc::driver::result;
use cudarc::driver::sys;

/// Initialise, and make device `ordinal`'s primary context current here.
pub fn context(ordinal: i32) -> sys::CUcontext {
    result::init().unwrap();
    let device = result::device::get(ordinal).unwrap();
    // SAFETY: `device` came from the driver; the context is released by the
    // driver's process teardown.
    unsafe {
        let ctx = result::primary_ctx::retain(device).unwrap();
        result::ctx::set_current(ctx).unwrap();
        ctx
    }
}

/// An event with timing, spinning waits.
pub fn event() -> sys::CUevent {
    result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).unwrap()
}
