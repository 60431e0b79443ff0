//! The fault sweep and the stress run of the CUDA backend, on the software
//! driver. Prints one line for each and fails unless the sweep finds no
//! panic, no leak and no lost error and the stress run completes in time.

mod support;

use device_events_conformance::soft::SoftDriver;
use device_events_conformance::sweep::{Tally, scenarios, stress, sweep};
use device_events_cuda::Cuda;

/// The statuses each driver function the scenarios call can return.
fn statuses(function: &str) -> &'static [i32] {
    match function {
        "cuEventElapsedTime" => &[600, 400, 907, 700],
        "cuEventSynchronize" | "cuStreamSynchronize" => &[700, 907, 400],
        "cuEventRecord" => &[400, 700, 900],
        "cuEventCreate" | "cuStreamCreate" => &[2, 201, 700],
        "cuStreamWaitEvent" => &[400, 700, 905],
        "cuCtxGetCurrent" => &[3, 201],
        "cuCtxPushCurrent_v2" | "cuCtxPopCurrent_v2" => &[201, 700],
        "cuEventDestroy_v2" | "cuStreamDestroy_v2" => &[400, 700],
        _ => &[999],
    }
}

fn main() {
    let driver = SoftDriver::exclusive();
    support::bind(0);
    let mut total = Tally::default();
    for (name, scenario) in scenarios::<Cuda>() {
        let tally = sweep(&driver, scenario, statuses);
        eprintln!("cuda fault sweep, {name}: {tally}");
        total += tally;
    }
    println!("cuda fault sweep: {total}");
    let stressed = stress::<Cuda>(
        8,
        10_000,
        || {
            support::bind(0);
        },
        || SoftDriver::get().map_or(0, |d| d.counts().events),
    );
    match &stressed {
        Ok(took) => println!(
            "cuda stress: 8 threads x 10000 fences and windows, read on other threads, in {:.1} s",
            took.as_secs_f64()
        ),
        Err(why) => println!("cuda stress failed: {why}"),
    }
    let clean = total.points > 0 && total.panics + total.leaks + total.lost == 0;
    if !clean || stressed.is_err() {
        std::process::exit(1);
    }
}
