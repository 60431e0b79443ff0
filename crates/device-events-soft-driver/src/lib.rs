//! A software driver: the subset of the CUDA driver API and of the HIP
//! runtime API that device-events calls, with the drivers' documented
//! semantics, running on the CPU.
//!
//! Built as a `cdylib` and laid out by `cargo xtask` under the names the
//! bindings search for (`libcuda.so`, `libcuda.so.1`, `libamdhip64.so`,
//! `libhiprtc.so`), it lets the CUDA and HIP backends be tested through their
//! real, dynamically loaded bindings on a machine with no GPU, as lavapipe
//! does for graphics stacks. Never put it on the loader path of a machine
//! with a real driver: it would shadow it.
//!
//! - Each stream runs its operations in order, in real host time, on a worker
//!   thread of its own; a memset takes its size over a configured bandwidth.
//! - Events are stamped by the device clock when their stream reaches them:
//!   the host's monotonic clock plus an offset, at a configured drift.
//! - Graph capture, per-thread CUDA contexts and per-thread HIP devices follow
//!   the drivers' documentation.
//! - A control API (`soft_driver_*`) injects failures, counts live handles
//!   and calls, and reports the ground-truth time of each event.
//!
//! Configuration: the `SOFT_DRIVER_*` variables in [`clock`].

pub mod clock;
mod codes;
pub mod control;
mod cuda;
mod engine;
mod hip;
mod out;

/// The name every device reports, so no output can mistake it for a GPU.
fn device_name(device: usize) -> String {
    format!("device-events software driver, device {device} (CPU, no GPU)")
}
