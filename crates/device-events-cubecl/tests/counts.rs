//! What the submitting thread pays per window and per fence on the
//! software driver's CUDA ABI, counted: its driver calls (the driver's
//! count of the calling thread's) and its heap allocations (this binary's
//! allocator; the driver's own are not ours). CubeCL's own profiler
//! (`cubecl-server`) makes two driver calls per window, its two records.
#![allow(clippy::unwrap_used, clippy::expect_used)]

device_events_conformance::tests_run_on_the_software_driver!();

use cubecl_common::profile::ProfileDuration;
use cudarc::driver::result;
use device_events_conformance::soft::SoftDriver;
use device_events_core::{
    AnchorConfig, EventApi, EventFence, EventProfiler, PlacedWindow, ProfilerConfig,
};
use device_events_cubecl::{CubeFence, CubeProfiler};
use device_events_cuda::{Cuda, CudaStream};

device_events_conformance::count_allocations!();

/// Windows warmed up before counting, and counted.
const WINDOWS: usize = 200;

/// What `op` cost this thread per run, over `WINDOWS` runs after as many
/// to warm up: driver calls and allocations. `done` completes what the
/// runs left (windows read), outside the count.
fn per_op<T>(soft: &SoftDriver, mut op: impl FnMut() -> T, done: impl Fn(Vec<T>)) -> (f64, f64) {
    let mut kept = Vec::with_capacity(WINDOWS);
    for _ in 0..WINDOWS {
        kept.push(op());
    }
    done(std::mem::take(&mut kept));
    kept.reserve(WINDOWS);
    let (calls, allocated) = (soft.thread_calls(), allocations());
    for _ in 0..WINDOWS {
        kept.push(op());
    }
    let counted = (
        (soft.thread_calls() - calls) as f64 / WINDOWS as f64,
        (allocations() - allocated) as f64 / WINDOWS as f64,
    );
    done(kept);
    counted
}

fn read(windows: Vec<ProfileDuration>) {
    for window in windows {
        assert!(pollster::block_on(window.resolve()).is_some());
    }
}

fn read_ours(windows: Vec<PlacedWindow<Cuda>>) {
    for window in windows {
        assert!(pollster::block_on(window).is_some());
    }
}

/// A stream of device 0's primary context, which is current on this
/// thread, as on a CubeCL server's.
fn stream() -> CudaStream {
    Cuda::probe().unwrap();
    let device = result::device::get(0).unwrap();
    // SAFETY: device 0 exists; the context is retained for the process.
    let ctx = unsafe { result::primary_ctx::retain(device).unwrap() };
    // SAFETY: a retained primary context.
    unsafe { result::ctx::set_current(ctx).unwrap() };
    Cuda::stream_create_non_blocking().unwrap()
}

/// Anchors refreshed once a second only, as in a session's steady state.
fn steady() -> ProfilerConfig {
    ProfilerConfig {
        anchor: AnchorConfig {
            drift_correction: false,
            ..AnchorConfig::default()
        },
        ..ProfilerConfig::default()
    }
}

#[test]
fn a_cubecl_window_makes_two_driver_calls_its_records_and_one_allocation() {
    let soft = SoftDriver::exclusive();
    let s = stream();
    let mut profiler = CubeProfiler::<Cuda>::with_config(steady());
    let (calls, allocations) = per_op(
        &soft,
        || {
            let token = profiler.start(s).unwrap();
            profiler.stop(s, token).unwrap()
        },
        read,
    );
    assert_eq!(calls, 2.0, "no more than CubeCL's own: its two records");
    // The `ProfileDuration` cubecl-common boxes.
    assert_eq!(allocations, 1.0);
    drop(profiler);
    Cuda::stream_destroy(s).unwrap();
    assert_eq!(soft.counts().misuses, 0);
}

/// Without the caller's word, each record first asks which context is
/// current: four calls a window, from any thread. The window is the
/// core's own future, not boxed.
#[test]
fn a_plain_window_makes_four_driver_calls_and_no_allocation() {
    let soft = SoftDriver::exclusive();
    let s = stream();
    let mut profiler = EventProfiler::<Cuda>::with_config(steady());
    let (calls, allocations) = per_op(
        &soft,
        || {
            let token = profiler.start(s);
            profiler.stop(s, token).unwrap()
        },
        read_ours,
    );
    assert_eq!(calls, 4.0);
    assert_eq!(allocations, 0.0);
    drop(profiler);
    Cuda::stream_destroy(s).unwrap();
}

/// A plain window on the caller's word costs its two records.
#[test]
fn a_window_on_the_callers_word_makes_two_driver_calls() {
    let soft = SoftDriver::exclusive();
    let s = stream();
    let mut profiler = EventProfiler::<Cuda>::with_config(ProfilerConfig {
        context_current: true,
        ..steady()
    });
    let (calls, _) = per_op(
        &soft,
        || {
            let token = profiler.start(s);
            profiler.stop(s, token).unwrap()
        },
        read_ours,
    );
    assert_eq!(calls, 2.0);
    drop(profiler);
    Cuda::stream_destroy(s).unwrap();
}

/// A fence, made and dropped: the check of the current context and the
/// record, and no allocation; CubeCL's own makes three calls (create,
/// record, destroy).
#[test]
fn a_fence_makes_two_driver_calls_and_no_allocation() {
    let soft = SoftDriver::exclusive();
    let s = stream();
    let (calls, allocations) = per_op(&soft, || drop(EventFence::<Cuda>::new(s)), drop);
    assert_eq!((calls, allocations), (2.0, 0.0));
    device_events_core::process::release_idle_events();
    Cuda::stream_destroy(s).unwrap();
}

/// CubeCL's fence, on CubeCL's contract (the context current): its one
/// record, and no allocation.
#[test]
fn a_cubecl_fence_makes_one_driver_call_its_record_and_no_allocation() {
    let soft = SoftDriver::exclusive();
    let s = stream();
    let (calls, allocations) = per_op(&soft, || drop(CubeFence::<Cuda>::new(s)), drop);
    assert_eq!((calls, allocations), (1.0, 0.0));
    device_events_core::process::release_idle_events();
    Cuda::stream_destroy(s).unwrap();
}
