//! What the GPU kit checks before anything else, in a line: the driver's
//! version and the library actually loaded, the device's name and compute
//! capability, the NVIDIA kernel module's version, and whether the spin
//! kernel loads, and from what (the kit's cubin, or its PTX through the
//! driver's JIT). Without a device nothing else is worth running.

use cudarc::driver::result;
use cudarc::driver::sys::CUdevice_attribute;
use device_events_cuda::Cuda;
use serde_json::{Value, json};

use crate::spin::Spin;

/// The facts, as JSON, and the line that says them.
///
/// # Errors
///
/// No driver, or no device, in words: the kit stops there.
pub fn preflight() -> Result<(Value, String), String> {
    // Never panics without a driver, unlike cudarc's own first call.
    Cuda::probe().map_err(|e| e.to_string())?;
    let driver = crate::gpu::driver();
    let count = result::device::get_count().map_err(|e| format!("cuDeviceGetCount: {e}"))?;
    if count == 0 {
        return Err(format!(
            "the driver ({}) finds no CUDA device",
            driver["library"]
        ));
    }
    let device = result::device::get(0).map_err(|e| format!("cuDeviceGet: {e}"))?;
    let name = result::device::get_name(device).map_err(|e| format!("cuDeviceGetName: {e}"))?;
    let attribute = |which| {
        // SAFETY: a device of this driver; the attribute is read only.
        unsafe { result::device::get_attribute(device, which) }.ok()
    };
    let capability = (
        attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    );
    let capability = match capability {
        (Some(major), Some(minor)) => Some(format!("{major}.{minor}")),
        _ => None,
    };
    // Present only while the kernel module is loaded.
    let module = std::fs::read_to_string("/proc/driver/nvidia/version")
        .ok()
        .and_then(|text| text.lines().next().map(str::to_owned));
    let spin = cudarc::driver::CudaContext::new(0)
        .and_then(|ctx| ctx.bind_to_thread().map(|()| ctx))
        .map_err(|e| format!("device 0's context: {e}"))
        .and_then(|ctx| {
            let loaded = Spin::load().map_err(|e| format!("the spin kernel: {e}"));
            let origin = loaded.map(|spin| spin.origin().to_owned());
            drop(ctx);
            origin
        });
    let facts = json!({
        "driver_version": driver["version"],
        "library": driver["library"],
        "devices": count,
        "name": name,
        "compute_capability": capability,
        "kernel_module": module,
        "spin_kernel": spin.as_ref().ok(),
        "spin_kernel_error": spin.as_ref().err(),
    });
    let version = driver["version"].as_i64().unwrap_or(0);
    let line = format!(
        "driver {}.{} ({}), {count} device(s), device 0: {name} (compute capability {}); \
         kernel module: {}; spin kernel: {}",
        version / 1000,
        version % 1000 / 10,
        driver["library"].as_str().unwrap_or("library not seen"),
        capability.as_deref().unwrap_or("unknown"),
        module
            .as_deref()
            .unwrap_or("not loaded (no /proc/driver/nvidia/version)"),
        spin.unwrap_or_else(|e| format!("does not load: {e}")),
    );
    Ok((facts, line))
}
