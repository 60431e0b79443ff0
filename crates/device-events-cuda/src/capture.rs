//! Capture interaction modes (see the core's `CaptureModes`): the exchange
//! call, `cuThreadExchangeStreamCaptureMode`, present since CUDA 10.1.

use std::cell::Cell;

use device_events_core::CaptureModes;

use crate::{BACKEND, api, check};

thread_local! {
    static OWN: Cell<bool> = const { Cell::new(false) };
}

pub(crate) static MODES: CaptureModes = CaptureModes::new(BACKEND, &OWN, |mode| {
    let api = api()?;
    let mut raw = mode.cast_unsigned();
    // SAFETY: `raw` is valid for a read and a write.
    let status = unsafe { (api.cuThreadExchangeStreamCaptureMode)(&mut raw) };
    check("cuThreadExchangeStreamCaptureMode", status)?;
    *mode = raw.cast_signed();
    Ok(true)
});
