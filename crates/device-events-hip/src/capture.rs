//! Capture interaction modes (see the core's `CaptureModes`): the exchange
//! call, `hipThreadExchangeStreamCaptureMode`, where the runtime has it
//! (ROCm 5.0 on); a runtime without it is left as it is.

use std::cell::Cell;

use device_events_core::{CaptureModes, EventApi};

use crate::{Hip, check, runtime};

thread_local! {
    static OWN: Cell<bool> = const { Cell::new(false) };
}

pub(crate) static MODES: CaptureModes = CaptureModes::new(Hip::BACKEND, &OWN, |mode| {
    let Ok(rt) = runtime::loaded() else {
        return Ok(false);
    };
    let Some(exchange) = rt.exchange_capture_mode else {
        return Ok(false);
    };
    // SAFETY: `mode` is valid for a read and a write.
    let status = unsafe { exchange(mode) };
    check("hipThreadExchangeStreamCaptureMode", status)?;
    Ok(true)
});
