//! The fault sweep and the stress run of the HIP backend, on the software
//! driver. Prints one line for each and fails unless the sweep finds no
//! panic, no leak and no lost error and the stress run completes in time.

mod support;

use device_events_conformance::soft::SoftDriver;
use device_events_conformance::sweep::{Tally, scenarios, stress, sweep};
use device_events_hip::Hip;

/// The statuses each driver function the scenarios call can return.
fn statuses(function: &str) -> &'static [i32] {
    match function {
        "hipEventElapsedTime" => &[600, 400, 907, 700],
        "hipEventSynchronize" | "hipStreamSynchronize" => &[700, 907, 400],
        "hipEventRecord" => &[400, 700, 900],
        "hipEventCreateWithFlags" | "hipStreamCreateWithFlags" => &[2, 101, 700],
        "hipStreamWaitEvent" => &[400, 700, 905],
        "hipGetDevice" => &[101, 100],
        "hipSetDevice" => &[101, 700],
        "hipEventDestroy" | "hipStreamDestroy" => &[400, 700],
        // Returns a string: it cannot fail.
        "hipGetErrorName" => &[],
        _ => &[999],
    }
}

fn main() {
    let driver = SoftDriver::exclusive();
    support::bind(0);
    let mut total = Tally::default();
    for (name, scenario) in scenarios::<Hip>() {
        let tally = sweep(&driver, scenario, statuses);
        eprintln!("hip fault sweep, {name}: {tally}");
        total += tally;
    }
    println!("hip fault sweep: {total}");
    let stressed = stress::<Hip>(
        8,
        10_000,
        || support::bind(0),
        || SoftDriver::get().map_or(0, |d| d.counts().events),
    );
    match &stressed {
        Ok(took) => println!(
            "hip stress: 8 threads x 10000 fences and windows, read on other threads, in {:.1} s",
            took.as_secs_f64()
        ),
        Err(why) => println!("hip stress failed: {why}"),
    }
    let clean = total.points > 0 && total.panics + total.leaks + total.lost == 0;
    if !clean || stressed.is_err() {
        std::process::exit(1);
    }
}
