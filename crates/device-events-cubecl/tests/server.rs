//! CubeCL's own profiling and fence expectations, over a mini server as
//! CubeCL writes one, on each backend device-events-cubecl serves: the
//! conformance crate's harness on the CUDA and HIP software drivers (or the
//! machine's driver, where `DEVICE_EVENTS_REAL_DRIVER` says it is under
//! test), and the software driver's fault injection for the server's
//! failure paths. Here rather than in the conformance suite, so that a
//! backend's tests compile no CubeCL crate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

device_events_conformance::tests_run_on_the_software_driver!();

use std::time::{Duration, Instant};

use cubecl_common::profile::ProfileDuration;
use cubecl_environment::backtrace::BackTrace;
use cubecl_runtime::server::{ProfileError, ProfilingToken, ServerError};
use device_events_conformance::contract::Abi;
use device_events_conformance::soft::SoftDriver;
use device_events_conformance::{Harness, Work};
use device_events_conformance::{cuda as cuda_support, hip as hip_support};
use device_events_core::backend::AnchorApi;
use device_events_core::{Backend, OwnedStream};
use device_events_cubecl::{CubeFence, CubeProfiler, StreamOf};
use device_events_cuda::Cuda;
use device_events_hip::Hip;

/// The server: its streams, by index as CubeCL's `StreamId`s, and its
/// profiler.
struct MiniServer<'h, A: Backend>
where
    A::Stream: PartialEq + StreamOf<A>,
{
    harness: &'h Harness<A>,
    streams: [OwnedStream<A>; 2],
    profiler: CubeProfiler<A>,
}

impl<'h, A: Backend> MiniServer<'h, A>
where
    A::Stream: PartialEq + StreamOf<A>,
{
    fn new(harness: &'h Harness<A>) -> Self {
        Self {
            harness,
            streams: [OwnedStream::new().unwrap(), OwnedStream::new().unwrap()],
            profiler: CubeProfiler::new(),
        }
    }

    fn stream(&self, id: usize) -> A::Stream {
        self.streams[id].get()
    }

    /// A kernel of about `work` on stream `id`.
    fn launch(&mut self, id: usize, work: Duration) -> Work<A> {
        let stream = self.stream(id);
        self.profiler.launching(stream);
        self.harness.enqueue(stream, work)
    }

    /// A kernel the server refuses (its validation failed): CubeCL's
    /// failure path.
    fn launch_refused(&mut self, id: usize) -> ServerError {
        self.profiler.launching(self.stream(id));
        let error = ServerError::Validation {
            message: "a binding is out of bounds".into(),
            backtrace: BackTrace::capture(),
        };
        self.profiler.failure(&error);
        error
    }

    fn start(&mut self, id: usize) -> ProfilingToken {
        self.profiler.start(self.stream(id)).unwrap()
    }

    fn end(&mut self, id: usize, token: ProfilingToken) -> ProfileDuration {
        self.profiler.stop(self.stream(id), token).unwrap()
    }
}

fn read(duration: ProfileDuration) -> Duration {
    pollster::block_on(duration.resolve())
        .expect("the window was measured")
        .duration()
}

/// An empty window measures under a millisecond: each reads what the
/// driver stamped (exactly, where the truth is known), and the quickest of
/// twenty is under a millisecond (a device on a loaded CPU, as PoCL's is,
/// can be descheduled between two stamps; that is its truth, not noise).
pub fn cubecl_an_empty_window_measures_under_a_millisecond<A: Backend>(h: &Harness<A>)
where
    A::Stream: PartialEq + StreamOf<A>,
{
    let mut server = MiniServer::new(h);
    let mut quickest = Duration::MAX;
    for _ in 0..20 {
        let began = Instant::now();
        let token = server.start(0);
        let start = h.last_event();
        let empty = server.end(0, token);
        let end = h.last_event();
        let empty = read(empty);
        h.assert_window(empty, &[], (start, end), began.elapsed());
        quickest = quickest.min(empty);
    }
    assert!(quickest < Duration::from_millis(1), "{quickest:?}");
}

/// Autotune's loop: an outer window around inner ones, each around a
/// candidate's launch. The outer window is at least the sum of the inner
/// ones, and no longer than the host time around it (the launch gaps
/// between them are the host's, which load can stretch).
pub fn cubecl_an_outer_window_holds_its_inner_windows<A: Backend>(h: &Harness<A>)
where
    A::Stream: PartialEq + StreamOf<A>,
{
    let mut server = MiniServer::new(h);
    for _round in 0..3 {
        let began = Instant::now();
        let outer = server.start(0);
        let mut inner = Vec::new();
        for k in 0..4u64 {
            let token = server.start(0);
            server.launch(0, Duration::from_millis(1 + k));
            inner.push(server.end(0, token));
        }
        let outer = read(server.end(0, outer));
        let sum: Duration = inner.into_iter().map(read).sum();
        let host = began.elapsed();
        assert!(outer >= sum, "outer {outer:?} < inner sum {sum:?}");
        assert!(
            outer <= host + h.resolution + host / 1000,
            "outer {outer:?}, longer than the {host:?} the host saw around it"
        );
    }
}

/// A launch that fails inside a window makes it read as that failure
/// (`ProfileError::Server`, as CubeCL's servers report it), not a zero;
/// windows opened afterwards measure again.
pub fn cubecl_a_failed_launch_reads_as_the_servers_error<A: Backend>(h: &Harness<A>)
where
    A::Stream: PartialEq + StreamOf<A>,
{
    let mut server = MiniServer::new(h);
    let token = server.start(0);
    let at_launch = server.profiler.start_at_launch(server.stream(1)).unwrap();
    server.launch(0, Duration::from_millis(1));
    let refused = server.launch_refused(0);
    for (id, token) in [(0, token), (1, at_launch)] {
        let read = server.profiler.stop(server.stream(id), token);
        match read {
            Err(ProfileError::Server(err)) => assert_eq!(err.to_string(), refused.to_string()),
            other => panic!("{:?}", other.map(|_| "a duration")),
        }
    }
    let began = Instant::now();
    let token = server.start(0);
    let start = h.last_event();
    let work = server.launch(0, Duration::from_millis(1));
    let again = server.end(0, token);
    let end = h.last_event();
    h.assert_window(read(again), &[&work], (start, end), began.elapsed());
}

/// `start_profile_at_launch` leaves out the host's preparation before the
/// launch (an idle device counts it as device time): the window is the
/// launch, exactly as the driver stamped it (its truth, where known),
/// while a window opened where the stream was holds the preparation too.
pub fn cubecl_a_window_at_launch_leaves_out_the_host_before_it<A: Backend>(h: &Harness<A>)
where
    A::Stream: PartialEq + StreamOf<A>,
{
    const PREPARING: Duration = Duration::from_millis(50);
    let began = Instant::now();
    let mut server = MiniServer::new(h);
    let plain = server.start(0);
    let at_launch = server.profiler.start_at_launch(server.stream(0)).unwrap();
    std::thread::sleep(PREPARING);
    server.profiler.launching(server.stream(0));
    let start = h.last_event();
    let work = h.enqueue(server.stream(0), Duration::from_millis(2));
    let at_launch = server.end(0, at_launch);
    let end = h.last_event();
    let plain = read(server.end(0, plain));
    let at_launch = read(at_launch);
    h.assert_window(at_launch, &[&work], (start, end), began.elapsed());
    assert!(
        at_launch < PREPARING,
        "{at_launch:?} holds the host's preparation"
    );
    assert!(plain >= PREPARING, "{plain:?}: the plain window holds it");
}

/// `flush`'s hand-off: stream 1 waits for stream 0's kernel through a
/// fence, so a window on stream 1 around the wait holds all of that
/// kernel, as stream 0's own window measured it; `sync` then returns with
/// both done.
pub fn cubecl_a_fence_hands_one_stream_over_to_the_other<A: Backend>(h: &Harness<A>)
where
    A::Stream: PartialEq + StreamOf<A>,
{
    let mut server = MiniServer::new(h);
    let waiting = server.start(1);
    let kernel = server.start(0);
    server.launch(0, Duration::from_millis(5));
    let kernel = server.end(0, kernel);
    let fence = CubeFence::<A>::new(server.stream(0));
    fence.wait_async(server.stream(1)).unwrap();
    server.launch(1, Duration::from_millis(1));
    let waiting = server.end(1, waiting);
    CubeFence::<A>::new(server.stream(1)).wait_sync().unwrap();
    let (waited, kernel) = (read(waiting), read(kernel));
    assert!(
        waited + h.resolution >= kernel,
        "stream 1 waited {waited:?} for stream 0's kernel of {kernel:?}"
    );
}

/// A mini CubeCL server's view of a sticky fault: the fence's wait meets
/// it, and the server's error says the device is poisoned, as CubeCL's own
/// backends say (its drop queue then frees, where it would keep memory
/// for any other failure).
pub fn cubecl_a_sticky_fault_reads_as_a_poisoned_device<A: Backend>(soft: &SoftDriver, abi: Abi)
where
    A::Stream: StreamOf<A>,
{
    (abi.bind)(0);
    let s = A::stream_create_non_blocking().unwrap();
    let fence = CubeFence::<A>::new(s);
    assert!(soft.fail_call_here(abi.synchronize, 1, abi.poisoning.0));
    let err = fence.wait_sync().unwrap_err();
    assert!(err.is_device_poisoned(), "{err}");
    A::stream_destroy(s).unwrap();
}

/// A CubeCL profiler on `s` whose first anchor is taken, so that the next
/// window's calls are its own.
fn anchored<A: AnchorApi>(s: A::Stream) -> CubeProfiler<A>
where
    A::Stream: PartialEq + StreamOf<A>,
{
    let mut profiler = CubeProfiler::<A>::new();
    let token = profiler.start(s).unwrap();
    profiler.abandon(token);
    assert!(device_events_core::process::wait_for_calibrations(
        std::time::Duration::from_secs(10)
    ));
    profiler
}

/// A start the driver refuses is an `Err` at `start_profile`, before the
/// server queues the work to profile, and no window is left open; the
/// next start measures.
pub fn cubecl_a_refused_start_fails_start_profile<A: Backend>(soft: &SoftDriver, abi: Abi)
where
    A::Stream: PartialEq + StreamOf<A>,
{
    (abi.bind)(0);
    let s = A::stream_create_non_blocking().unwrap();
    // The anchor is taken on the library's thread; the injection is for
    // this thread's record.
    let mut profiler = anchored::<A>(s);
    assert!(soft.fail_call_here(abi.record, 1, 2));
    let err = profiler.start(s).unwrap_err();
    assert!(err.to_string().contains(abi.record), "{err}");
    assert!(!err.is_device_poisoned());
    assert_eq!(profiler.open_windows(), 0);
    let token = profiler.start(s).unwrap();
    let duration = profiler.stop(s, token).unwrap();
    assert!(pollster::block_on(duration.resolve()).is_some());
    drop(profiler);
    A::stream_destroy(s).unwrap();
}

/// A window whose closing record the driver refuses reads as that error,
/// `ProfileError::Server`, and a poisoning fault there stays poisoned.
pub fn cubecl_a_refused_end_reads_as_the_servers_error<A: Backend>(soft: &SoftDriver, abi: Abi)
where
    A::Stream: PartialEq + StreamOf<A>,
{
    (abi.bind)(0);
    let s = A::stream_create_non_blocking().unwrap();
    let mut profiler = anchored::<A>(s);
    for (status, poisoned) in [(2, false), (abi.poisoning.0, true)] {
        let token = profiler.start(s).unwrap();
        assert!(soft.fail_call_here(abi.record, 1, status));
        match profiler.stop(s, token) {
            Err(ProfileError::Server(err)) => {
                assert_eq!(err.is_device_poisoned(), poisoned, "{err}");
            }
            other => panic!("{:?}", other.map(|_| "a duration")),
        }
    }
    drop(profiler);
    A::stream_destroy(s).unwrap();
}

/// A fence whose record the driver refuses (out of memory) synchronizes
/// its stream there and then, as CubeCL's own fence does: its waits then
/// succeed without the driver.
pub fn cubecl_a_fence_whose_record_is_refused_synchronizes_its_stream<A: Backend>(
    soft: &SoftDriver,
    abi: Abi,
) where
    A::Stream: StreamOf<A>,
{
    (abi.bind)(0);
    let (a, b) = (
        A::stream_create_non_blocking().unwrap(),
        A::stream_create_non_blocking().unwrap(),
    );
    let synced = soft.call_count(abi.stream_synchronize);
    assert!(soft.fail_call_here(abi.record, 1, 2));
    let fence = CubeFence::<A>::new(a);
    assert_eq!(soft.call_count(abi.stream_synchronize), synced + 1);
    assert_eq!(fence.is_complete().ok(), Some(true));
    fence.wait_async(b).unwrap();
    assert!(soft.fail_call_here(abi.record, 1, 2));
    CubeFence::<A>::new(a).wait_sync().unwrap();
    A::stream_destroy(a).unwrap();
    A::stream_destroy(b).unwrap();
}

/// A stream wait the driver refuses (out of memory) becomes a host wait
/// for the fence, as CubeCL's own fence does: the work is ordered just the
/// same.
pub fn cubecl_a_refused_stream_wait_waits_on_the_host<A: Backend>(soft: &SoftDriver, abi: Abi)
where
    A::Stream: StreamOf<A>,
{
    (abi.bind)(0);
    let (a, b) = (
        A::stream_create_non_blocking().unwrap(),
        A::stream_create_non_blocking().unwrap(),
    );
    let fence = CubeFence::<A>::new(a);
    let waited = soft.call_count(abi.synchronize);
    assert!(soft.fail_call_here(abi.stream_wait, 1, 2));
    fence.wait_async(b).unwrap();
    assert_eq!(soft.call_count(abi.synchronize), waited + 1);
    A::stream_destroy(a).unwrap();
    A::stream_destroy(b).unwrap();
}

/// No fallback where it would not be sound: a record refused with a
/// poisoning fault is returned as it is, poisoned, and the stream is not
/// synchronized.
pub fn cubecl_a_fence_on_a_poisoned_device_falls_back_to_nothing<A: Backend>(
    soft: &SoftDriver,
    abi: Abi,
) where
    A::Stream: StreamOf<A>,
{
    (abi.bind)(0);
    let s = A::stream_create_non_blocking().unwrap();
    let synced = soft.call_count(abi.stream_synchronize);
    assert!(soft.fail_call_here(abi.record, 1, abi.poisoning.0));
    let fence = CubeFence::<A>::new(s);
    assert_eq!(soft.call_count(abi.stream_synchronize), synced);
    assert!(fence.wait_sync().unwrap_err().is_device_poisoned());
    A::stream_destroy(s).unwrap();
}

/// Makes each check a named `#[test]` of a module per backend: the server
/// checks on the harness, the failure paths on the software driver.
macro_rules! server_suite {
    ($module:ident, $backend:ty, $harness:expr, $abi:expr) => {
        mod $module {
            use super::*;
            server_suite!(@harness $backend, $harness,
                cubecl_an_empty_window_measures_under_a_millisecond,
                cubecl_an_outer_window_holds_its_inner_windows,
                cubecl_a_failed_launch_reads_as_the_servers_error,
                cubecl_a_window_at_launch_leaves_out_the_host_before_it,
                cubecl_a_fence_hands_one_stream_over_to_the_other
            );
            server_suite!(@soft $backend, $abi,
                cubecl_a_sticky_fault_reads_as_a_poisoned_device,
                cubecl_a_refused_start_fails_start_profile,
                cubecl_a_refused_end_reads_as_the_servers_error,
                cubecl_a_fence_whose_record_is_refused_synchronizes_its_stream,
                cubecl_a_refused_stream_wait_waits_on_the_host,
                cubecl_a_fence_on_a_poisoned_device_falls_back_to_nothing
            );
        }
    };
    (@harness $backend:ty, $harness:expr, $($check:ident),+) => {
        $(
            #[test]
            fn $check() {
                let harness = $harness;
                super::$check::<$backend>(&harness);
            }
        )+
    };
    (@soft $backend:ty, $abi:expr, $($check:ident),+) => {
        $(
            #[test]
            fn $check() {
                if std::env::var_os(device_events_conformance::soft::REAL_VAR).is_some() {
                    return; // fault injection needs the software driver
                }
                let soft = SoftDriver::exclusive();
                super::$check::<$backend>(&soft, $abi);
            }
        )+
    };
}

server_suite!(
    cuda,
    Cuda,
    cuda_support::suite(),
    Abi {
        bind: |n| {
            cuda_support::bind(n);
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

server_suite!(
    hip,
    Hip,
    hip_support::suite(),
    Abi {
        bind: hip_support::bind,
        current: || {
            let mut device = 0;
            // SAFETY: `device` is writable.
            (unsafe { cubecl_hip_sys::hipGetDevice(&mut device) } == 0).then_some(device)
        },
        create: "hipEventCreateWithFlags",
        record: "hipEventRecord",
        synchronize: "hipEventSynchronize",
        stream_synchronize: "hipStreamSynchronize",
        stream_wait: "hipStreamWaitEvent",
        stream_destroy: "hipStreamDestroy",
        poisoning: (719, "hipErrorLaunchFailure"),
    }
);
