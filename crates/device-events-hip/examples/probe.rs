//! One line on the HIP runtime here: which one, and whether it has a device.
//! Exits 0 with a device, 2 with a runtime and no device, 1 with no runtime.
//! `cargo xtask test-hip` and `cargo xtask demo` ask it before anything else.

use std::process::ExitCode;

use device_events_core::ErrorKind;
use device_events_hip::Hip;

fn main() -> ExitCode {
    let found = match Hip::runtime() {
        Ok(found) => found,
        Err(err) => {
            println!("{err}");
            return ExitCode::from(1);
        }
    };
    match Hip::probe() {
        Ok(()) => {
            println!("{found} with a device");
            ExitCode::SUCCESS
        }
        Err(err) if err.kind() == ErrorKind::NoDevice => {
            println!("{found} found, but no AMD GPU: {err}");
            ExitCode::from(2)
        }
        Err(err) => {
            println!("{found} found, but it cannot be used: {err}");
            ExitCode::from(2)
        }
    }
}
