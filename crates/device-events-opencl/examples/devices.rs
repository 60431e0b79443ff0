//! One line listing the OpenCL devices here. Exits 0 with a device, 1
//! without. `cargo xtask test-opencl` asks it first:
//! `cargo run -p device-events-opencl --example devices`.

use std::process::ExitCode;

use device_events_opencl::OpenCl;

fn main() -> ExitCode {
    match OpenCl::devices() {
        Ok(devices) => {
            let names: Vec<String> = devices
                .iter()
                .map(|d| {
                    format!(
                        "{}:{} {} ({}, {})",
                        d.platform, d.device, d.name, d.platform_name, d.version
                    )
                })
                .collect();
            println!("OpenCL: {}", names.join("; "));
            ExitCode::SUCCESS
        }
        Err(err) => {
            println!("no OpenCL platform with a device found: {err}");
            ExitCode::from(1)
        }
    }
}
