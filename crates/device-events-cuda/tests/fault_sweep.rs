//! The fault sweep and the stress run of the CUDA backend, on the software
//! driver. Prints one line for each and fails unless the sweep finds no
//! panic, no leak and no lost error and the stress run completes in time.

device_events_conformance::tests_run_on_the_software_driver!();

mod support;

use device_events_cuda::Cuda;

/// The statuses each driver function the scenarios call can return.
fn statuses(function: &str) -> &'static [i32] {
    match function {
        "cuEventElapsedTime" => &[600, 400, 907, 700],
        "cuEventSynchronize" | "cuStreamSynchronize" => &[700, 907, 400],
        "cuEventRecord" => &[400, 700, 900],
        "cuEventCreate" | "cuStreamCreate" => &[2, 201, 700],
        // The gate's host word: memory exhausted (2), or refused.
        "cuMemHostAlloc" | "cuMemHostGetDevicePointer_v2" => &[2, 999],
        "cuStreamWaitEvent" => &[400, 700, 905],
        "cuCtxGetCurrent" => &[3, 201],
        "cuCtxPushCurrent_v2" | "cuCtxPopCurrent_v2" => &[201, 700],
        // An earlier asynchronous error, reported by the release that still
        // frees the handle. Invalid-handle is left out: a driver says it
        // only of a handle that is not live, which the misuse count shows
        // the backend never passes, and then frees nothing.
        "cuEventDestroy_v2" | "cuStreamDestroy_v2" => &[700, 999],
        // Only names a status; a failure leaves the number, by design.
        "cuGetErrorName" => &[],
        _ => &[999],
    }
}

fn main() {
    device_events_conformance::sweep::main::<Cuda>(statuses, || {
        support::bind(0);
    });
}
