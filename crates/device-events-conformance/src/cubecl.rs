//! A mini server as CubeCL writes one, over `device-events-cubecl`: two
//! streams, kernels launched through the server (which tells the profiler
//! right before each launch, and fails open windows when a launch fails),
//! a fence hand-off, and autotune-style loops of windows. Each check is one
//! of CubeCL's own profiling expectations.

use std::time::Duration;

use cubecl_common::profile::ProfileDuration;
use cubecl_environment::backtrace::BackTrace;
use cubecl_runtime::server::{ProfileError, ProfilingToken, ServerError};
use device_events_core::{Backend, OwnedStream};
use device_events_cubecl::{CubeFence, CubeProfiler, StreamOf};

use crate::Harness;

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
    fn launch(&mut self, id: usize, work: Duration) {
        let stream = self.stream(id);
        self.profiler.launching(stream);
        self.harness.enqueue(stream, work);
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
        let token = server.start(0);
        let start = h.last_event();
        let empty = server.end(0, token);
        let end = h.last_event();
        let empty = read(empty);
        if h.truth.is_some() {
            h.assert_window(empty, Duration::ZERO, (start, end));
        }
        quickest = quickest.min(empty);
    }
    assert!(quickest < Duration::from_millis(1), "{quickest:?}");
}

/// Autotune's loop: an outer window around inner ones, each around a
/// candidate's launch. The outer window is at least the sum of the inner
/// ones, and under twice it.
pub fn cubecl_an_outer_window_holds_its_inner_windows<A: Backend>(h: &Harness<A>)
where
    A::Stream: PartialEq + StreamOf<A>,
{
    let mut server = MiniServer::new(h);
    for _round in 0..3 {
        let outer = server.start(0);
        let mut inner = Vec::new();
        for k in 0..4u64 {
            let token = server.start(0);
            server.launch(0, Duration::from_millis(1 + k));
            inner.push(server.end(0, token));
        }
        let outer = read(server.end(0, outer));
        let sum: Duration = inner.into_iter().map(read).sum();
        assert!(outer >= sum, "outer {outer:?} < inner sum {sum:?}");
        assert!(
            outer < sum * 2,
            "outer {outer:?} >= twice the inner sum {sum:?}"
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
    let work = Duration::from_millis(1);
    let token = server.start(0);
    let start = h.last_event();
    server.launch(0, work);
    let again = server.end(0, token);
    let end = h.last_event();
    h.assert_window(read(again), work, (start, end));
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
    let work = Duration::from_millis(2);
    let mut server = MiniServer::new(h);
    let plain = server.start(0);
    let at_launch = server.profiler.start_at_launch(server.stream(0)).unwrap();
    std::thread::sleep(PREPARING);
    server.profiler.launching(server.stream(0));
    let start = h.last_event();
    h.enqueue(server.stream(0), work);
    let at_launch = server.end(0, at_launch);
    let end = h.last_event();
    let plain = read(server.end(0, plain));
    let at_launch = read(at_launch);
    h.assert_window(at_launch, work, (start, end));
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
