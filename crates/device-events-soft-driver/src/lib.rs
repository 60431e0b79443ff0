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
//! It is a test instrument, kinder than no real driver: where it and the
//! vendors' documentation disagree, the documentation wins.
//!
//! - Each stream runs its operations in order, in real host time, on a worker
//!   thread of its own; a memset takes its size over a configured bandwidth.
//! - Nothing reaches the device inside the call that queues it: every
//!   operation starts after a launch latency drawn from a configured
//!   distribution, and queries say not-ready until then.
//! - Events are stamped by the device clock when their stream reaches them:
//!   the host's monotonic clock plus an offset, at a configured drift.
//! - Streams synchronize implicitly with the legacy default stream, both
//!   ways, unless non-blocking; `CU_STREAM_PER_THREAD` is each thread's own.
//! - Graph capture (with fork and join), per-thread CUDA contexts, primary
//!   contexts torn down at their last release, and per-thread HIP devices
//!   follow the drivers' documentation.
//! - Any use of a handle that is not live is refused and counted as a
//!   misuse, where a real driver would act on freed state; so is a call in
//!   a fork child, and one in flight or made once the driver's exit handler
//!   began.
//! - A control API ([`control`], `soft_driver_*`, C ABI) injects failures,
//!   counts live handles, misuses and calls, sets the clock, bandwidth and
//!   launch latency, and reports the ground-truth time of each event.
//!
//! Configuration: the `SOFT_DRIVER_*` variables in [`clock`]. What a real
//! driver refuses, and which of it this driver models, with the test that
//! shows each: [`rules`]. How to lay the driver out, load it and drive its
//! control API follows (the crate's `README.md`).
//!
#![doc = include_str!("../README.md")]

mod calls;
pub mod clock;
mod codes;
pub mod control;
mod cuda;
mod engine;
mod hip;
mod image;
mod out;

#[doc = include_str!("rules.md")]
pub mod rules {}

/// The name every device reports, so no output can mistake it for a GPU.
fn device_name(device: usize) -> String {
    format!("device-events software driver, device {device} (CPU, no GPU)")
}
