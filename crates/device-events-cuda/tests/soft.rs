//! The CUDA backend on the software driver alone: what needs its control API
//! (fault injection, call lists) or two devices.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

device_events_conformance::tests_run_on_the_software_driver!();

mod support;

use cudarc::driver::{result, sys};
use device_events_conformance::soft::SoftDriver;
use device_events_core::{ErrorKind, EventApi, EventFence, EventProfiler};
use device_events_cuda::Cuda;
use support::{bind, context, stream};

device_events_conformance::contract_suite!(
    Cuda,
    device_events_conformance::contract::Abi {
        bind: |n| {
            bind(n);
        },
        current: || {
            let mut device = 0;
            // SAFETY: `device` is writable.
            unsafe { cudarc::driver::sys::cuCtxGetDevice(&mut device) }
                .result()
                .ok()
                .map(|()| device)
        },
        create: "cuEventCreate",
        record: "cuEventRecord",
        synchronize: "cuEventSynchronize",
        stream_synchronize: "cuStreamSynchronize",
        stream_wait: "cuStreamWaitEvent",
        stream_destroy: "cuStreamDestroy_v2",
        poisoning: (700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
    }
);

device_events_conformance::lanes_suite!(
    Cuda,
    device_events_conformance::lanes::LaneAbi::<Cuda> {
        bind: |n| {
            bind(n);
        },
        work: |bytes| Box::new(support::Memset::new(bytes)),
        // SAFETY: `CU_STREAM_PER_THREAD` (2) of device 0's primary
        // context, retained for the process; the special stream lives as
        // long as its context.
        per_thread: Some(
            || unsafe { Cuda::stream_from_raw(2 as sys::CUstream, context(0)) }.unwrap()
        ),
    }
);

#[test]
fn elapsed_time_across_contexts_is_refused() {
    let _soft = SoftDriver::exclusive();
    bind(1);
    let (s1, mut e1) = (stream(), Cuda::event_create().unwrap());
    Cuda::event_record(&e1, s1).unwrap();
    bind(0);
    let (s0, mut e0) = (stream(), Cuda::event_create().unwrap());
    Cuda::event_record(&e0, s0).unwrap();
    Cuda::event_wait(&e0).unwrap();
    Cuda::event_wait(&e1).unwrap();
    let err = Cuda::event_elapsed(&e0, &e1).unwrap_err();
    assert!(err.to_string().contains("across contexts"), "{err}");
    Cuda::event_destroy(&mut e0).unwrap();
    Cuda::event_destroy(&mut e1).unwrap();
    Cuda::stream_destroy(s0).unwrap();
    Cuda::stream_destroy(s1).unwrap();
}

/// Each window's stated bound holds against the driver's ground truth:
/// both ends, with the clock offset and drifting 100 ppm, windows of work
/// and empty ones, across the anchor refreshes of a few seconds.
#[test]
fn each_windows_stated_bound_contains_the_truth() {
    use device_events_conformance::Workload;
    use std::time::{Duration, Instant};

    let soft = SoftDriver::exclusive();
    bind(0);
    soft.set_clock(3_700_000_000_123, 100.0);
    let driver_epoch = soft.host_instant(0);
    let truth = |event| driver_epoch + Duration::from_nanos(soft.event_truth_ns(event).unwrap());
    let off_by = |placed: Instant, truth: Instant| {
        placed
            .saturating_duration_since(truth)
            .max(truth.saturating_duration_since(placed))
    };
    let s = stream();
    let work = support::Memset::new(1 << 20);
    let mut profiler = EventProfiler::<Cuda>::new();
    let (mut windows, mut widest) = (0, (Duration::ZERO, Duration::ZERO));
    let session = Instant::now();
    while session.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(2));
        let token = profiler.start(s);
        let start_event = soft.last_recorded_event();
        work.enqueue_bytes(s, (windows % 4) << 18).unwrap();
        let window = profiler.stop(s, token).unwrap();
        let end_event = soft.last_recorded_event();
        let placed = pollster::block_on(window.resolve()).unwrap();

        let start = placed.start;
        let end = placed.end;
        for (at, event) in [(start, start_event), (end, end_event)] {
            let error = off_by(at, truth(event));
            assert!(
                error <= placed.uncertainty,
                "window {windows}: off by {error:?}, stated bound {:?}",
                placed.uncertainty
            );
            if error > widest.0 {
                widest = (error, placed.uncertainty);
            }
        }
        windows += 1;
    }
    soft.set_clock(1_000_000_000_000, 0.0);
    drop(profiler);
    Cuda::stream_destroy(s).unwrap();
    eprintln!(
        "{windows} windows: worst error {:?}, against a bound of {:?}",
        widest.0, widest.1
    );
    assert!(windows > 500);
}

#[test]
fn only_the_documented_functions_are_called() {
    let soft = SoftDriver::exclusive();
    bind(0);
    device_events_conformance::only_documented_functions_are_called::<Cuda>(
        &soft,
        &[
            "cuInit",
            "cuGetErrorName",
            "cuCtxGetCurrent",
            "cuCtxGetDevice",
            "cuCtxPushCurrent_v2",
            "cuCtxPopCurrent_v2",
            "cuDevicePrimaryCtxRetain",
            "cuDevicePrimaryCtxRelease_v2",
            "cuEventCreate",
            "cuEventRecord",
            "cuEventSynchronize",
            "cuEventQuery",
            "cuEventElapsedTime",
            "cuEventDestroy_v2",
            "cuStreamCreate",
            "cuStreamWaitEvent",
            "cuStreamSynchronize",
            "cuThreadExchangeStreamCaptureMode",
            "cuStreamDestroy_v2",
            "cuStreamIsCapturing",
            "cuDeviceGetAttribute",
            "cuMemHostAlloc",
            "cuMemHostGetDevicePointer_v2",
            "cuMemFreeHost",
            "cuStreamWaitValue32_v2",
        ],
        Cuda::capture_status,
    );
}

device_events_conformance::anchoring_suite!(
    Cuda,
    device_events_conformance::anchoring::GateCalls {
        wait_value: "cuStreamWaitValue32_v2",
        record: "cuEventRecord",
    },
    bind(0)
);

#[test]
fn fences_and_profilers_leak_nothing() {
    let soft = SoftDriver::exclusive();
    bind(0);
    device_events_conformance::fences_and_profilers_leak_nothing::<Cuda>(&soft);
}

#[test]
fn a_status_newer_than_the_bindings_keeps_its_number_from_every_call() {
    let soft = SoftDriver::exclusive();
    bind(0);
    let s = stream();
    let fence = EventFence::<Cuda>::new(s);
    fence.wait_sync().unwrap();
    let (start, end) = (Cuda::event_create().unwrap(), Cuda::event_create().unwrap());
    Cuda::event_record(&start, s).unwrap();
    Cuda::event_record(&end, s).unwrap();
    Cuda::event_wait(&end).unwrap();
    type Call<'a> = Box<dyn Fn() -> Result<(), device_events_core::DriverError> + 'a>;
    let calls: Vec<(&str, Call<'_>)> = vec![
        ("cuEventCreate", Box::new(|| Cuda::event_create().map(drop))),
        ("cuEventRecord", Box::new(|| Cuda::event_record(&start, s))),
        ("cuEventSynchronize", Box::new(|| Cuda::event_wait(&end))),
        (
            "cuEventElapsedTime",
            Box::new(|| Cuda::event_elapsed(&start, &end).map(drop)),
        ),
        ("cuStreamWaitEvent", Box::new(|| fence.wait_async(s))),
        (
            "cuStreamSynchronize",
            Box::new(|| Cuda::stream_synchronize(s)),
        ),
        (
            "cuStreamIsCapturing",
            Box::new(|| Cuda::capture_status(s).map(drop)),
        ),
        (
            "cuCtxGetCurrent",
            Box::new(|| Cuda::event_create().map(drop)),
        ),
        (
            "cuStreamCreate",
            Box::new(|| Cuda::stream_create_non_blocking().map(drop)),
        ),
        (
            "cuEventDestroy_v2",
            Box::new(|| {
                let mut event = Cuda::event_create()?;
                Cuda::event_destroy(&mut event)
            }),
        ),
        (
            "cuStreamDestroy_v2",
            Box::new(|| Cuda::stream_destroy(Cuda::stream_create_non_blocking()?)),
        ),
    ];
    for (name, call) in &calls {
        assert!(soft.fail_call_any(name, 1, 919), "{name}");
        let err = call().unwrap_err();
        assert_eq!(
            (err.status(), err.kind(), err.call()),
            (Some(919), ErrorKind::Other, *name),
            "{err}"
        );
        assert!(err.to_string().contains("919"), "{err}");
    }
    drop(calls);
    let (mut start, mut end) = (start, end);
    Cuda::event_destroy(&mut start).unwrap();
    Cuda::event_destroy(&mut end).unwrap();
    drop(fence);
    Cuda::stream_destroy(s).unwrap();
}

#[test]
fn the_legacy_stream_of_another_context_is_used_with_that_context_bound() {
    let _soft = SoftDriver::exclusive();
    bind(1);
    let event = Cuda::event_create().unwrap();
    bind(0);
    // SAFETY: device 1's primary context is retained for the process; the
    // legacy stream is always live.
    let legacy = unsafe {
        device_events_cuda::Cuda::stream_from_raw(
            0x1 as cudarc::driver::sys::CUstream, // CU_STREAM_LEGACY
            context(1),
        )
    }
    .unwrap();
    Cuda::event_record(&event, legacy).unwrap();
    Cuda::stream_synchronize(legacy).unwrap();
    Cuda::event_wait(&event).unwrap();
    let mut event = event;
    Cuda::event_destroy(&mut event).unwrap();
    Cuda::stream_destroy(legacy).unwrap();
    assert_eq!(result::ctx::get_current().unwrap(), Some(context(0)));
}

/// A profiler belongs to the context of its first window's stream: a
/// stream of another context is refused at every window, whichever event
/// the pool hands out; its own streams' windows read whatever context is
/// current on the thread.
#[test]
fn a_profiler_keeps_to_its_first_streams_context_whatever_is_current() {
    let _soft = SoftDriver::exclusive();
    bind(0);
    let (s0, s1) = (stream(), {
        bind(1);
        let s = stream();
        bind(0);
        s
    });
    let mut profiler = EventProfiler::<Cuda>::new();
    let first = profiler.start(s0);
    pollster::block_on(profiler.stop(s0, first).unwrap().resolve()).unwrap();
    for _ in 0..3 {
        let token = profiler.start(s1);
        let err = profiler.stop(s1, token).err().unwrap();
        assert!(err.to_string().contains("different contexts"), "{err}");
    }
    // The other context current, and more windows open than the pool has
    // idle events: the pool makes new ones, in the profiler's context.
    bind(1);
    let tokens: Vec<_> = (0..8).map(|_| profiler.start(s0)).collect();
    for token in tokens {
        let window = profiler.stop(s0, token).unwrap();
        assert!(pollster::block_on(window.resolve()).is_some());
    }
    assert_eq!(result::ctx::get_current().unwrap(), Some(context(1)));
    bind(0);
    drop(profiler);
    Cuda::stream_destroy(s0).unwrap();
    Cuda::stream_destroy(s1).unwrap();
}

/// A server thread driving two devices, one profiler each, with whichever
/// context it last bound current: every window of both reads.
#[test]
fn one_thread_drives_two_devices_with_a_profiler_each() {
    let _soft = SoftDriver::exclusive();
    let streams = [0, 1].map(|n| {
        bind(n);
        stream()
    });
    let mut profilers = [(); 2].map(|()| EventProfiler::<Cuda>::new());
    for round in 0..40 {
        // The context current is the other device's half the time.
        bind(round % 2);
        for (profiler, &s) in profilers.iter_mut().zip(&streams) {
            let token = profiler.start(s);
            let window = profiler.stop(s, token);
            let read = window.map(|w| pollster::block_on(w.resolve()));
            assert!(
                read.as_ref().is_ok_and(Option::is_some),
                "round {round}: {read:?}"
            );
        }
    }
    drop(profilers);
    for s in streams {
        Cuda::stream_destroy(s).unwrap();
    }
}

/// An anchor refresh made while another context is current creates its
/// event there, and the record on the profiler's anchor stream is refused.
/// That event is released, never pooled: pooled, the next window back on
/// the profiler's own context would be handed it unchecked, and be refused.
#[test]
fn an_anchor_event_refused_as_another_contexts_is_never_handed_to_a_window() {
    let _soft = SoftDriver::exclusive();
    bind(0);
    let s0 = stream();
    let mut profiler = EventProfiler::<Cuda>::with_config(device_events_core::ProfilerConfig {
        anchor: device_events_core::AnchorConfig {
            anchor_max_age: std::time::Duration::from_millis(1),
            ..device_events_core::AnchorConfig::default()
        },
        ..device_events_core::ProfilerConfig::default()
    });
    let first = profiler.start(s0);
    pollster::block_on(profiler.stop(s0, first).unwrap().resolve()).unwrap();
    // Windows left open hold every idle event, so the refresh makes its own.
    let open: Vec<_> = (0..8).map(|_| profiler.start(s0)).collect();
    // With device 1 current, the refresh's event is device 1's.
    bind(1);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let token = profiler.start(s0);
    let _ = profiler.stop(s0, token);
    // Back on the profiler's context, past the back-off: windows read.
    bind(0);
    for _ in 0..4 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        let token = profiler.start(s0);
        let window = profiler.stop(s0, token);
        assert!(
            window.is_ok_and(|w| pollster::block_on(w.resolve()).is_some()),
            "a window on the profiler's own context and stream reads"
        );
    }
    for token in open {
        profiler.abandon(token).unwrap();
    }
    drop(profiler);
    Cuda::stream_destroy(s0).unwrap();
}

/// Windows pending behind device work cost the process almost no CPU while
/// they wait, with default events (whose driver waits spin): the resolver
/// asks without waiting and sleeps in between.
#[test]
fn pending_windows_spin_no_core() {
    use device_events_conformance::Workload as _;
    let soft = SoftDriver::exclusive();
    bind(0);
    let s = stream();
    let mut profiler = EventProfiler::<Cuda>::new();
    // Half a second of work, then fifty windows behind it, each handed to
    // the resolver.
    soft.set_bandwidth(1e9);
    let work = support::Memset::new(500_000_000);
    work.enqueue_bytes(s, 500_000_000).unwrap();
    soft.set_bandwidth(10e9);
    let mut windows: Vec<_> = (0..50)
        .map(|_| {
            let token = profiler.start(s);
            profiler.stop(s, token).unwrap()
        })
        .collect();
    for window in &mut windows {
        assert!(window.try_resolve().is_none(), "handed to the resolver");
    }
    let (cpu, wall) = (
        device_events_conformance::cpu::process_cpu(),
        std::time::Instant::now(),
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (cpu, wall) = (
        device_events_conformance::cpu::process_cpu() - cpu,
        wall.elapsed(),
    );
    // A spinning wait would take the whole 300 ms; a fifth is room for a
    // busy machine's accounting.
    assert!(
        cpu < wall / 5,
        "{cpu:?} of CPU in {wall:?} while windows pended"
    );
    for window in windows {
        assert!(pollster::block_on(window.resolve()).is_some());
    }
    drop(work);
    drop(profiler);
    Cuda::stream_destroy(s).unwrap();
}

/// Run by `a_driver_laid_out_as_libcuda_so_1_only_is_found`, with the
/// loader's path holding only that name.
#[test]
#[ignore = "run by a_driver_laid_out_as_libcuda_so_1_only_is_found, in a child process"]
fn child_with_libcuda_so_1_only() {
    Cuda::probe().unwrap();
    context(0);
    let name = result::device::get_name(result::device::get(0).unwrap()).unwrap();
    assert!(name.contains("software driver"), "{name}");
}

/// The driver package of a real install has `libcuda.so.1` and no
/// `libcuda.so` (that link comes with the toolkit): cudarc tries it last.
#[test]
fn a_driver_laid_out_as_libcuda_so_1_only_is_found() {
    let dir = device_events_conformance::soft::laid_out_as(&["libcuda.so.1"]);
    device_events_conformance::run_without_driver(
        "child_with_libcuda_so_1_only",
        &[],
        &[("LD_LIBRARY_PATH", dir.to_str().unwrap())],
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The CUDA backend with one deliberate bug: it never releases an event.
struct SkipsReleases;

impl device_events_core::backend::AnchorApi for SkipsReleases {}
impl device_events_core::backend::ThreadApi for SkipsReleases {}
impl device_events_core::backend::FenceApi for SkipsReleases {}
impl device_events_core::backend::EventQuery for SkipsReleases {
    fn event_query(event: &Self::Event) -> Result<bool, device_events_core::DriverError> {
        Cuda::event_query(event)
    }
}

impl EventApi for SkipsReleases {
    /// Never dropped: an event released itself on drop.
    type Event = std::mem::ManuallyDrop<<Cuda as EventApi>::Event>;
    type Stream = <Cuda as EventApi>::Stream;
    const BACKEND: &'static str = "cuda";

    fn event_create() -> Result<Self::Event, device_events_core::DriverError> {
        Cuda::event_create().map(std::mem::ManuallyDrop::new)
    }
    fn event_destroy(_: &mut Self::Event) -> Result<(), device_events_core::DriverError> {
        Ok(())
    }
    fn event_record(
        event: &Self::Event,
        stream: Self::Stream,
    ) -> Result<(), device_events_core::DriverError> {
        Cuda::event_record(event, stream)
    }
    fn event_wait(event: &Self::Event) -> Result<(), device_events_core::DriverError> {
        Cuda::event_wait(event)
    }
    fn event_elapsed(
        start: &Self::Event,
        end: &Self::Event,
    ) -> Result<std::time::Duration, device_events_core::DriverError> {
        Cuda::event_elapsed(start, end)
    }
    fn stream_wait_event(
        stream: Self::Stream,
        event: &Self::Event,
    ) -> Result<(), device_events_core::DriverError> {
        Cuda::stream_wait_event(stream, event)
    }
    fn stream_synchronize(stream: Self::Stream) -> Result<(), device_events_core::DriverError> {
        Cuda::stream_synchronize(stream)
    }
    fn stream_create_non_blocking() -> Result<Self::Stream, device_events_core::DriverError> {
        Cuda::stream_create_non_blocking()
    }
    fn stream_destroy(stream: Self::Stream) -> Result<(), device_events_core::DriverError> {
        Cuda::stream_destroy(stream)
    }
}

/// The sweep's leak count can fail: on a backend that skips a release,
/// every injection point of the fence scenario is a leak.
#[test]
fn the_sweep_counts_the_leaks_of_a_backend_that_skips_releases() {
    let soft = SoftDriver::exclusive();
    bind(0);
    let tally = device_events_conformance::sweep::sweep(
        &soft,
        device_events_conformance::sweep::fence_lifecycle::<SkipsReleases>,
        |_| &[999],
    );
    assert!(tally.points > 0);
    assert_eq!(tally.leaks, tally.points, "{tally}");
}

/// Windows whose futures are dropped before they resolve, some handed to
/// the resolver thread already, release every event: the software driver's
/// count is back where it started.
#[test]
fn windows_dropped_unresolved_leak_nothing() {
    let soft = SoftDriver::exclusive();
    bind(0);
    let before = soft.counts().events;
    let s = stream();
    let work = support::Memset::new(1 << 20);
    {
        let mut profiler = EventProfiler::<Cuda>::new();
        let mut windows = Vec::new();
        for _ in 0..50 {
            let token = profiler.start(s);
            device_events_conformance::Workload::enqueue_bytes(&work, s, 1 << 20).unwrap();
            windows.push(profiler.stop(s, token).unwrap());
        }
        // Half polled once (handed to the resolver), half never polled.
        for window in windows.iter_mut().step_by(2) {
            let _ = window.try_resolve();
        }
        drop(windows);
    }
    Cuda::stream_synchronize(s).unwrap();
    // The window the resolver was waiting on goes back as it finishes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while soft.counts().events != before && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    drop(work);
    Cuda::stream_destroy(s).unwrap();
    assert_eq!(soft.counts().events, before, "every event released");
}

/// Calibrations of one device never wait on another's: with device 0's
/// anchor stuck behind a 2 s kernel on the one hardware queue it shares
/// with the user's stream, device 1's first window reads at once.
#[test]
fn a_device_stuck_behind_a_long_kernel_delays_no_other_devices_windows() {
    use device_events_conformance::Workload as _;
    let soft = SoftDriver::exclusive();
    soft.set_hw_queues(1);
    bind(0);
    let s0 = stream();
    let mut stuck = EventProfiler::<Cuda>::new();
    soft.set_bandwidth(1e9);
    let work = support::Memset::new(2_000_000_000);
    work.enqueue_bytes(s0, 2_000_000_000).unwrap();
    soft.set_bandwidth(10e9);
    // Its first calibration waits behind the kernel.
    let token = stuck.start(s0);
    stuck.abandon(token).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    bind(1);
    let s1 = stream();
    let mut profiler = EventProfiler::<Cuda>::new();
    let asked = std::time::Instant::now();
    let token = profiler.start(s1);
    let window = profiler.stop(s1, token).unwrap();
    let read = pollster::block_on(window.resolve());
    let took = asked.elapsed();
    assert!(read.is_some(), "device 1's window read");
    assert!(
        took < std::time::Duration::from_secs(1),
        "device 1's window waited {took:?} for device 0's calibration"
    );
    drop(profiler);
    bind(0);
    Cuda::stream_synchronize(s0).unwrap();
    drop(stuck);
    assert!(device_events_core::process::wait_for_calibrations(
        std::time::Duration::from_secs(10)
    ));
    Cuda::stream_destroy(s0).unwrap();
    Cuda::stream_destroy(s1).unwrap();
    soft.set_hw_queues(0);
}

/// A call whose context cannot be bound is refused before the driver,
/// never made with whatever context the thread has current (here another
/// device's): the driver would take that context for the handle's.
#[test]
fn a_call_whose_context_cannot_be_bound_never_reaches_the_driver() {
    let soft = SoftDriver::exclusive();
    bind(0);
    let s = stream();
    let mut e = Cuda::event_create().unwrap();
    bind(1);
    let recorded = soft.call_count("cuEventRecord");
    assert!(soft.fail_call_here("cuCtxPushCurrent_v2", 1, 201));
    let outcome = Cuda::event_record(&e, s);
    assert_eq!(
        soft.call_count("cuEventRecord"),
        recorded,
        "recorded with another context current: {outcome:?}"
    );
    assert!(outcome.is_err());
    Cuda::event_destroy(&mut e).unwrap();
    Cuda::stream_destroy(s).unwrap();
    bind(0);
}

/// In a process of its own: a profiler whose first calibration waits
/// behind 10 s of work on the one hardware queue it shares with the
/// user's stream is dropped, and the process exits at once.
#[test]
#[ignore = "run in a process of its own by the test below"]
fn child_exits_with_a_calibration_in_flight() {
    use device_events_conformance::Workload as _;
    let soft = SoftDriver::get().unwrap();
    soft.set_hw_queues(1);
    bind(0);
    let s = stream();
    soft.set_bandwidth(1e9);
    let work = support::Memset::new(10_000_000_000);
    work.enqueue_bytes(s, 10_000_000_000).unwrap();
    soft.set_bandwidth(10e9);
    let mut profiler = EventProfiler::<Cuda>::new();
    let token = profiler.start(s);
    profiler.abandon(token).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(
        !device_events_core::process::wait_for_calibrations(std::time::Duration::ZERO),
        "the calibration waits behind the work"
    );
    drop(profiler);
    std::process::exit(0);
}

/// NVIDIA: using the driver during the host program's termination is
/// undefined. A process that exits with a calibration stuck behind long
/// work leaves no library thread in the driver as the driver's exit
/// handler tears it down, and none calls it after.
#[test]
fn exiting_with_a_calibration_in_flight_leaves_the_driver_before_its_teardown() {
    let report =
        device_events_conformance::soft::exit_report("child_exits_with_a_calibration_in_flight");
    assert_eq!(
        report,
        device_events_conformance::soft::ExitReport::default(),
        "calls in flight as the driver's exit handler began, or made after"
    );
}

/// A fence's event is made with `CU_EVENT_DISABLE_TIMING`, the kind NVIDIA
/// documents as fast to record, query and wait on: the driver refuses its
/// elapsed time, which a window's event gives.
#[test]
fn a_fences_event_has_no_timing_and_a_windows_has() {
    let soft = SoftDriver::exclusive();
    bind(0);
    let s = stream();
    let elapsed_of_itself = |event: usize| {
        let mut ms = 0.0f32;
        // SAFETY: a live event, recorded and reached; `ms` is writable.
        unsafe { sys::cuEventElapsedTime(&mut ms, event as sys::CUevent, event as sys::CUevent) }
    };
    let fence = EventFence::<Cuda>::new(s);
    let fenced = soft.last_recorded_event();
    fence.wait_sync().unwrap();
    assert_eq!(
        elapsed_of_itself(fenced),
        sys::cudaError_enum::CUDA_ERROR_INVALID_HANDLE,
        "a fence's event has timing"
    );
    let mut profiler = EventProfiler::<Cuda>::new();
    let token = profiler.start(s);
    let started = soft.last_recorded_event();
    let window = profiler.stop(s, token).unwrap();
    assert!(pollster::block_on(window.resolve()).is_some());
    assert_eq!(
        elapsed_of_itself(started),
        sys::cudaError_enum::CUDA_SUCCESS
    );
    drop((fence, profiler));
    Cuda::stream_destroy(s).unwrap();
}

/// The memset calibration a real driver's suite falls back on sizes work
/// at any device speed: at an H200's copy rate (4300 GB/s, past the 2^36
/// bytes the calibration once stopped at) and at 3000 GB/s, each window
/// around calibrated memsets holds the work its raw event pairs timed and
/// lies inside the host time around it.
#[test]
fn calibrated_memsets_hold_their_windows_at_an_h200s_copy_rate() {
    let soft = SoftDriver::exclusive();
    bind(0);
    for gbps in [4300.0, 3000.0] {
        soft.set_bandwidth(gbps * 1e9);
        // No live-event count: the harness as on a real driver, calibrating.
        let harness = device_events_conformance::Harness::<Cuda>::new(
            Box::new(support::Memset::new(64 << 20)),
            support::RESOLUTION,
            None,
            None,
        );
        device_events_conformance::window_measures_the_work_inside_it(&harness);
        device_events_conformance::nested_windows_lie_inside_their_outer_window(&harness);
    }
}

/// The real driver's harness: the spin kernel's own stamps are the truth
/// its windows are checked against, with nothing calibrated.
#[test]
fn windows_hold_the_spin_kernels_own_stamps() {
    let _soft = SoftDriver::exclusive();
    bind(0);
    let harness = device_events_conformance::Harness::<Cuda>::timed(
        Box::new(support::SpinWork::load().unwrap()),
        support::RESOLUTION,
        None,
        None,
    );
    assert!(harness.is_timed());
    device_events_conformance::window_measures_the_work_inside_it(&harness);
    device_events_conformance::overlapping_windows_are_consistent(&harness);
    device_events_conformance::a_chain_of_windows_adds_up_to_its_span(&harness);
}
