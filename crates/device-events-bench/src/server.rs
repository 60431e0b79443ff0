//! Never in the server's way, on the software driver: how long `start()`
//! takes while a long kernel holds the anchor's hardware queue, what the
//! anchor's closed gate costs a user's kernels on that queue, and graph
//! captures in GLOBAL mode on one thread while other threads profile.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cudarc::driver::{result, sys};

use crate::work;
use device_events_conformance::soft::{Held, SoftDriver};
use device_events_core::{
    AnchorConfig, Backend, DriverError, EventApi, EventProfiler, FencePool, OwnedStream,
    ProfilerConfig, backend::ThreadApi,
};
use device_events_cuda::Cuda;
use device_events_hip::{Hip, HipStream};

/// `start()`'s own duration, for windows opened every 100 µs for 800 ms
/// while a 1 s kernel occupies the device's one hardware queue, which the
/// anchor's stream shares; and, interleaved with them for like for like, a
/// bare record of an event on the same stream: both sorted.
///
/// # Panics
///
/// When the software driver cannot run it.
pub fn start_behind_a_kernel(soft: &SoftDriver) -> (Vec<Duration>, Vec<Duration>) {
    soft.set_bandwidth(1e9);
    soft.set_hw_queues(1);
    let s = OwnedStream::<Cuda>::new().unwrap();
    let mut profiler = EventProfiler::<Cuda>::new();
    let mut bare = Cuda::event_create().unwrap();
    work(s.get(), 1_000_000_000);
    let until = Instant::now() + Duration::from_millis(800);
    let (mut took, mut recorded) = (Vec::new(), Vec::new());
    while Instant::now() < until {
        let begun = Instant::now();
        let token = profiler.start(s.get());
        took.push(begun.elapsed());
        // Dropped unread, as a server that did not want this one: its
        // events go back to the pool, so later starts create none.
        drop(profiler.stop(s.get(), token).unwrap());
        let begun = Instant::now();
        Cuda::event_record(&bare, s.get()).unwrap();
        recorded.push(begun.elapsed());
        std::thread::sleep(Duration::from_micros(100));
    }
    drop(profiler);
    Cuda::stream_synchronize(s.get()).unwrap();
    Cuda::event_destroy(&mut bare).unwrap();
    drop(s);
    assert!(device_events_core::process::wait_for_calibrations(
        Duration::from_secs(10)
    ));
    soft.set_hw_queues(0);
    soft.set_bandwidth(10e9);
    took.sort_unstable();
    recorded.sort_unstable();
    (took, recorded)
}

/// How a backend captures, for [`captures_beside_the_library`].
pub struct Capturing<A: Backend> {
    /// Begin a capture in GLOBAL mode (the software driver, where it is
    /// the driver).
    pub begin: fn(Option<&SoftDriver>, A::Stream),
    /// End it; whether it ended as it began.
    pub end: fn(Option<&SoftDriver>, A::Stream) -> bool,
    /// Make the calling thread's current context the stream's.
    pub bind: fn(),
}

/// What [`captures_beside_the_library`] saw.
#[derive(Debug)]
pub struct Captures {
    /// Captures that ended as they began.
    pub ended: usize,
    /// Captures whose end failed.
    pub failed: usize,
    /// Calls the software driver refused for a capture's sake meanwhile
    /// (where it is the driver).
    pub violations: Option<u64>,
    /// Windows the other threads read meanwhile.
    pub windows: usize,
}

/// `captures` graph captures in GLOBAL mode on this thread, each open for
/// 200 µs, while `threads` threads each open and read windows (anchors
/// refreshing every millisecond) and ask pooled fences whether complete.
///
/// # Panics
///
/// When the software driver cannot run it.
pub fn captures_beside_the_library<A: Backend>(
    soft: Option<&SoftDriver>,
    how: &Capturing<A>,
    captures: usize,
    threads: usize,
) -> Captures {
    let violations = soft.map(SoftDriver::capture_violations);
    let stop = AtomicBool::new(false);
    let windows = AtomicUsize::new(0);
    let (mut ended, mut failed) = (0, 0);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                (how.bind)();
                let s = OwnedStream::<A>::new().unwrap();
                let mut profiler = EventProfiler::<A>::with_config(ProfilerConfig {
                    anchor: AnchorConfig {
                        anchor_max_age: Duration::from_millis(1),
                        ..AnchorConfig::default()
                    },
                    ..ProfilerConfig::default()
                });
                let pool = FencePool::<A>::new();
                while !stop.load(Ordering::Relaxed) {
                    let token = profiler.start(s.get());
                    let window = profiler.stop(s.get(), token).unwrap();
                    let fence = pool.fence(s.get());
                    while !fence.is_complete().unwrap_or(true) {
                        std::thread::yield_now();
                    }
                    if pollster::block_on(window.resolve()).is_some() {
                        windows.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        let c = OwnedStream::<A>::new().unwrap();
        for _ in 0..captures {
            (how.begin)(soft, c.get());
            std::thread::sleep(Duration::from_micros(200));
            if (how.end)(soft, c.get()) {
                ended += 1;
            } else {
                failed += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(device_events_core::process::wait_for_calibrations(
        Duration::from_secs(10)
    ));
    Captures {
        ended,
        failed,
        violations: soft
            .zip(violations)
            .map(|(soft, before)| soft.capture_violations() - before),
        windows: windows.load(Ordering::Relaxed),
    }
}

/// CUDA's capture calls, through cudarc.
pub fn cuda_capturing() -> Capturing<Cuda> {
    Capturing {
        begin: |_, s| {
            s.with_raw(|raw| {
                // SAFETY: the stream is held live meanwhile.
                unsafe {
                    result::stream::begin_capture(
                        raw,
                        sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
                    )
                }
                .unwrap();
            })
            .unwrap();
        },
        end: |_, s| {
            s.with_raw(|raw| {
                // SAFETY: the stream is held live meanwhile; the graph, if
                // any, is destroyed once.
                unsafe {
                    match result::stream::end_capture(raw) {
                        Ok(graph) => {
                            if !graph.is_null() {
                                sys::cuGraphDestroy(graph);
                            }
                            true
                        }
                        Err(_) => false,
                    }
                }
            })
            .unwrap()
        },
        bind: || {
            let ctx = retained_primary_context();
            // SAFETY: a retained primary context.
            unsafe { result::ctx::set_current(ctx).unwrap() };
        },
    }
}

/// Device 0's primary context, retained for the process.
fn retained_primary_context() -> sys::CUcontext {
    primary_context(0)
}

/// Device `ordinal`'s primary context, retained for the process.
fn primary_context(ordinal: c_int) -> sys::CUcontext {
    result::init().unwrap();
    let device = result::device::get(ordinal).unwrap();
    // SAFETY: `device` came from the driver; the retain lasts the process.
    unsafe { result::primary_ctx::retain(device).unwrap() }
}

type BeginCapture = unsafe extern "C" fn(*mut c_void, c_uint) -> c_int;
type EndCapture = unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> c_int;
type GraphDestroy = unsafe extern "C" fn(*mut c_void) -> c_int;

/// HIP's capture calls, straight from the software driver's HIP ABI.
pub fn hip_capturing() -> Capturing<Hip> {
    Capturing {
        begin: |soft, s: HipStream| {
            let soft = soft.expect("HIP captures on the software driver");
            // SAFETY: HIP's C signature of `hipStreamBeginCapture`.
            let begin: BeginCapture = unsafe { soft.function(b"hipStreamBeginCapture\0") }.unwrap();
            // SAFETY: the stream is held live meanwhile; 0 is GLOBAL.
            let status = s.with_raw(|raw| unsafe { begin(raw, 0) }).unwrap();
            assert_eq!(status, 0, "hipStreamBeginCapture");
        },
        end: |soft, s: HipStream| {
            let soft = soft.expect("HIP captures on the software driver");
            // SAFETY: HIP's C signatures of these functions.
            let (end, destroy): (EndCapture, GraphDestroy) = unsafe {
                (
                    soft.function(b"hipStreamEndCapture\0").unwrap(),
                    soft.function(b"hipGraphDestroy\0").unwrap(),
                )
            };
            s.with_raw(|raw| {
                let mut graph = std::ptr::null_mut();
                // SAFETY: the stream is held live meanwhile; `graph` is
                // writable, and a graph made is destroyed once.
                unsafe {
                    let ok = end(raw, &mut graph) == 0;
                    if !graph.is_null() {
                        destroy(graph);
                    }
                    ok
                }
            })
            .unwrap()
        },
        bind: || {
            // Device 0 is every thread's current device to start with.
            let _: Result<(), DriverError> = Hip::probe();
        },
    }
}

/// What `calibrations` anchor calibrations (five samples each, the gate's
/// default bound) cost a user's stream on the one hardware queue the
/// anchor's stream shares: a 20 µs kernel queued every 20 µs throughout.
/// The software driver's counts: how long each gate held its stream, and
/// how long the user's kernels waited behind it.
///
/// # Panics
///
/// When the software driver cannot run it.
pub fn gate_on_a_shared_queue(soft: &SoftDriver, calibrations: usize) -> Held {
    const KERNEL: usize = 20_000; // 20 µs at 1 GB/s
    soft.set_bandwidth(1e9);
    soft.set_hw_queues(1);
    let s = OwnedStream::<Cuda>::new().unwrap();
    let done = AtomicBool::new(false);
    let before = soft.value_waits_held();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            // SAFETY: a device allocation only these memsets use, freed
            // once they are done; the stream's context is current.
            Cuda::in_context_of(s.get(), || unsafe {
                let ptr = result::malloc_sync(KERNEL).unwrap();
                while !done.load(Ordering::Acquire) {
                    s.get()
                        .with_raw(|raw| result::memset_d8_async(ptr, 0, KERNEL, raw).unwrap())
                        .unwrap();
                    std::thread::sleep(Duration::from_micros(20));
                }
                Cuda::stream_synchronize(s.get()).unwrap();
                result::free_sync(ptr).unwrap();
            })
            .unwrap();
        });
        for _ in 0..calibrations {
            // A new profiler's first window calibrates.
            let mut profiler = EventProfiler::<Cuda>::new();
            let token = profiler.start(s.get());
            profiler.abandon(token).unwrap();
            assert!(device_events_core::process::wait_for_calibrations(
                Duration::from_secs(30)
            ));
        }
        done.store(true, Ordering::Release);
    });
    let after = soft.value_waits_held();
    drop(s);
    soft.set_hw_queues(0);
    soft.set_bandwidth(10e9);
    Held {
        waits: after.waits - before.waits,
        held_ns: after.held_ns - before.held_ns,
        delayed: after.delayed - before.delayed,
        delayed_ns: after.delayed_ns - before.delayed_ns,
        driver_late_ns: after.driver_late_ns - before.driver_late_ns,
        ..after
    }
}

/// Device B's windows while device A hangs: device 0's anchor stream waits
/// behind a 2 s kernel on the one hardware queue it shares, with a
/// calibration pending there, while this thread reads `windows` empty
/// windows on device 1, each right after its `stop`. Returns how long
/// each took to read, sorted, and whether device 0's calibration completed
/// once its kernel was done.
///
/// # Panics
///
/// When the software driver cannot run it.
pub fn beside_a_hung_device(soft: &SoftDriver, windows: usize) -> (Vec<Duration>, bool) {
    let bind = |ordinal| {
        // SAFETY: a retained primary context.
        unsafe { result::ctx::set_current(primary_context(ordinal)).unwrap() };
    };
    soft.set_hw_queues(1);
    bind(0);
    let a = OwnedStream::<Cuda>::new().unwrap();
    soft.set_bandwidth(1e9);
    work(a.get(), 2_000_000_000);
    soft.set_bandwidth(10e9);
    let mut hung = EventProfiler::<Cuda>::new();
    let token = hung.start(a.get());
    hung.abandon(token).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    bind(1);
    let b = OwnedStream::<Cuda>::new().unwrap();
    let mut profiler = EventProfiler::<Cuda>::new();
    let mut took = Vec::with_capacity(windows);
    for _ in 0..windows {
        let token = profiler.start(b.get());
        let window = profiler.stop(b.get(), token).unwrap();
        let stopped = Instant::now();
        assert!(pollster::block_on(window.resolve()).is_some());
        took.push(stopped.elapsed());
    }
    drop(profiler);
    drop(b);
    bind(0);
    Cuda::stream_synchronize(a.get()).unwrap();
    drop(hung);
    let calibrated = device_events_core::process::wait_for_calibrations(Duration::from_secs(10));
    drop(a);
    soft.set_hw_queues(0);
    took.sort_unstable();
    (took, calibrated)
}
