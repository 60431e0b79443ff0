//! The GPU bundle's measures, rehearsed on the software driver: what a
//! lease runs must run here first (the same module, launches and windows).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

device_events_conformance::tests_run_on_the_software_driver!();

use device_events_bench::{gpu, spin};
use device_events_conformance::soft::SoftDriver;
use device_events_core::EventApi;
use device_events_cuda::Cuda;

fn bound() -> std::sync::Arc<cudarc::driver::CudaContext> {
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    ctx.bind_to_thread().unwrap();
    ctx
}

/// A window around the spin kernel spans the kernel: its duration is
/// never shorter than the kernel's own stamps say, and every window reads.
#[test]
fn a_window_around_the_spin_kernel_is_never_shorter_than_the_kernel() {
    let _soft = SoftDriver::exclusive();
    let _ctx = bound();
    let spin = spin::Spin::load().unwrap();
    let (s, raw) = gpu::stream().unwrap();
    for side in gpu::SIDES {
        let w = gpu::spin_windows(&spin, s, raw, side, 200_000, 5).unwrap();
        assert_eq!(w["unread"], 0, "{w}");
        let d = &w["duration_minus_kernel"];
        assert_eq!(d["n"], 5, "{w}");
        // The event timer's resolution is the software driver's 0.5 µs.
        assert!(
            d["min_ns"].as_i64().unwrap() >= -500,
            "a window shorter than its kernel: {w}"
        );
    }
    Cuda::stream_destroy(s).unwrap();
}

/// The gate probe's user kernels run beside the calibrations it asks for,
/// and every gap between them is read from the kernels' stamps.
#[test]
fn the_gate_probe_runs_its_kernels_beside_its_calibrations() {
    let _soft = SoftDriver::exclusive();
    let _ctx = bound();
    let spin = spin::Spin::load().unwrap();
    let g = gpu::gate(&spin, 400, 2).unwrap();
    for phase in ["alone", "beside_calibrations"] {
        assert!(g[phase]["kernels"].as_u64().unwrap() >= 100, "{g}");
        assert!(g[phase]["gap_max_ns"].as_i64().is_some(), "{g}");
    }
    assert_eq!(g["beside_calibrations"]["calibrations"], 2, "{g}");
}
