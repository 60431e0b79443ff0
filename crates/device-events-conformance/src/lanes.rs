//! Each lane (a profiler's windows ending on one stream) is answered on its
//! own, whatever its first window's start waits for: checks written once
//! for the software driver's two ABIs, each holding a long memset on
//! another stream and bounding how late the lane's other windows are
//! answered.
//!
//! The long work lasts [`LONG`]; each of the lane's windows holds
//! [`SHORT`] of work of its own, so that it is pending when first read and
//! goes to the resolver thread. A lane held behind the long work answers
//! its windows after about [`LONG`]; one answered on its own, within the
//! resolver's longest interval (`resolver::LAST` in the core's
//! `src/tunables.rs`) of each end. The bound, [`BOUND`]
//! for all of them together, sits far from both.

use std::time::{Duration, Instant};

use device_events_core::{Backend, EventProfiler};

use crate::Workload;
use crate::soft::SoftDriver;

/// The work the lane's first window waits for, on another stream.
pub const LONG: Duration = Duration::from_secs(2);
/// Each of the lane's later windows' own work.
pub const SHORT: Duration = Duration::from_millis(10);
/// How late the lane's later windows may be answered, all together.
pub const BOUND: Duration = Duration::from_millis(600);
/// How many later windows the lane holds.
const LATER: usize = 5;
/// The memset speed the checks set: slow, so that small buffers make long
/// work.
const BYTES_PER_SECOND: f64 = 1e6;

/// What a check needs of the backend's ABI.
pub struct LaneAbi<A: Backend> {
    /// Make device `n`'s context current on this thread.
    pub bind: fn(i32),
    /// A memset workload of at least `bytes` bytes, made on this thread.
    pub work: fn(bytes: usize) -> Box<dyn Workload<A>>,
    /// The per-thread stream handle (`CU_STREAM_PER_THREAD`), admitted,
    /// of device 0; `None` where the backend refuses one (HIP: `hipStreamPerThread`
    /// names a stream the runtime destroys with its thread).
    pub per_thread: Option<fn() -> A::Stream>,
}

fn bytes_for(d: Duration) -> usize {
    // Whole bytes of a slow memset: exact enough for its purpose.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let bytes = (d.as_secs_f64() * BYTES_PER_SECOND) as usize;
    bytes
}

/// A profiler whose first anchor is taken: later windows wait for
/// nothing of the calibrator's.
fn anchored<A: Backend>(s: A::Stream) -> EventProfiler<A> {
    let mut profiler = EventProfiler::<A>::new();
    let token = profiler.start(s);
    profiler.abandon(token).unwrap();
    assert!(device_events_core::process::wait_for_calibrations(
        Duration::from_secs(30)
    ));
    profiler
}

/// `LATER` windows on `lane`, each around `SHORT` of work, each pending
/// when first read: how long they took to be answered, all of them, from
/// the first one's stop.
fn later_windows<A: Backend>(
    profiler: &mut EventProfiler<A>,
    lane: A::Stream,
    work: &dyn Workload<A>,
) -> Duration {
    let mut windows = Vec::new();
    let begun = Instant::now();
    for _ in 0..LATER {
        let token = profiler.start(lane);
        work.enqueue_bytes(lane, bytes_for(SHORT)).unwrap();
        let mut window = profiler.stop(lane, token).unwrap();
        assert!(window.try_resolve().is_none(), "{SHORT:?} of work ahead");
        windows.push(window);
    }
    for window in windows {
        let placed = pollster::block_on(window.resolve());
        assert!(placed.is_some(), "a window of the lane read nothing");
    }
    begun.elapsed()
}

/// A window that starts on stream A behind [`LONG`] of work and ends on
/// stream B after a little work there: B's later windows are answered as
/// their ends come, not when A gets to the first one's start.
pub fn a_window_started_on_a_busy_stream_holds_back_no_other_window_of_its_lane<A: Backend>(
    soft: &SoftDriver,
    abi: &LaneAbi<A>,
) {
    (abi.bind)(0);
    let (a, b) = (
        A::stream_create_non_blocking().unwrap(),
        A::stream_create_non_blocking().unwrap(),
    );
    let work = (abi.work)(bytes_for(LONG));
    let mut profiler = anchored::<A>(b);
    soft.set_bandwidth(BYTES_PER_SECOND);
    work.enqueue_bytes(a, bytes_for(LONG)).unwrap();
    let across = profiler.start(a);
    work.enqueue_bytes(b, bytes_for(SHORT)).unwrap();
    let mut across = profiler.stop(b, across).unwrap();
    assert!(
        across.try_resolve().is_none(),
        "handed to the resolver first"
    );
    let took = later_windows(&mut profiler, b, &*work);
    soft.set_bandwidth(10e9);
    drop(across);
    drop(profiler);
    A::stream_synchronize(a).unwrap();
    A::stream_destroy(a).unwrap();
    A::stream_destroy(b).unwrap();
    assert!(
        took < BOUND,
        "the lane's later windows were answered after {took:?}, behind a window \
         whose start waited for {LONG:?} of work on another stream"
    );
}

/// A window whose end (on idle stream B) comes before its start (on
/// stream A, behind [`LONG`] of work): B's later windows are answered as
/// their ends come, and the window itself reads `None`, never a zero, once
/// A gets to its start.
pub fn a_reversed_window_holds_back_no_other_window_of_its_lane_and_reads_none<A: Backend>(
    soft: &SoftDriver,
    abi: &LaneAbi<A>,
) {
    (abi.bind)(0);
    let (a, b) = (
        A::stream_create_non_blocking().unwrap(),
        A::stream_create_non_blocking().unwrap(),
    );
    let work = (abi.work)(bytes_for(LONG));
    let mut profiler = anchored::<A>(b);
    soft.set_bandwidth(BYTES_PER_SECOND);
    work.enqueue_bytes(a, bytes_for(LONG)).unwrap();
    let reversed = profiler.start(a);
    let mut reversed = profiler.stop(b, reversed).unwrap();
    assert!(reversed.try_resolve().is_none(), "its start is ahead");
    let took = later_windows(&mut profiler, b, &*work);
    soft.set_bandwidth(10e9);
    let read = pollster::block_on(reversed.resolve());
    drop(profiler);
    A::stream_destroy(a).unwrap();
    A::stream_destroy(b).unwrap();
    assert!(
        took < BOUND,
        "the lane's later windows were answered after {took:?}, behind a window \
         whose end came {LONG:?} before its start"
    );
    assert!(read.is_none(), "a reversed window read {read:?}");
}

/// The per-thread stream handle names each thread's own stream: one
/// thread's window behind [`LONG`] of work on its per-thread stream holds
/// back no window another thread ends on its own, through the same handle
/// and the same profiler.
pub fn windows_of_threads_sharing_a_per_thread_handle_are_answered_each_on_its_own<A: Backend>(
    soft: &SoftDriver,
    abi: &LaneAbi<A>,
) where
    EventProfiler<A>: Send,
{
    (abi.bind)(0);
    let shared = (abi
        .per_thread
        .expect("a backend with a per-thread stream handle"))();
    let mut profiler = anchored::<A>(shared);
    soft.set_bandwidth(BYTES_PER_SECOND);
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let took = std::thread::scope(|scope| {
        let first = scope.spawn(move || {
            (abi.bind)(0);
            let work = (abi.work)(bytes_for(LONG));
            work.enqueue_bytes(shared, bytes_for(LONG)).unwrap();
            let token = profiler.start(shared);
            let mut held = profiler.stop(shared, token).unwrap();
            assert!(held.try_resolve().is_none(), "{LONG:?} of work ahead");
            held_tx.send(profiler).unwrap();
            // This thread, and so its per-thread stream, stays until the
            // other thread is done.
            let _ = done_rx.recv();
            drop(held);
            drop(work);
        });
        let mut profiler = held_rx.recv().unwrap();
        let second = scope.spawn(move || {
            (abi.bind)(0);
            let work = (abi.work)(bytes_for(LONG));
            let took = later_windows(&mut profiler, shared, &*work);
            drop(profiler);
            took
        });
        let took = second.join();
        soft.set_bandwidth(10e9);
        drop(done_tx);
        first.join().unwrap();
        took.unwrap()
    });
    A::stream_destroy(shared).unwrap();
    assert!(
        took < BOUND,
        "a thread's windows on its per-thread stream were answered after {took:?}, \
         behind another thread's window behind {LONG:?} of work on its own"
    );
}

/// Makes each lane check a named `#[test]` of a backend's suite on the
/// software driver, given its [`LaneAbi`].
#[macro_export]
macro_rules! lanes_suite {
    ($backend:ty, $abi:expr) => {
        $crate::lanes_suite!(@tests $backend, $abi,
            a_window_started_on_a_busy_stream_holds_back_no_other_window_of_its_lane,
            a_reversed_window_holds_back_no_other_window_of_its_lane_and_reads_none,
            windows_of_threads_sharing_a_per_thread_handle_are_answered_each_on_its_own
        );
    };
    // A backend that admits no per-thread stream handle.
    ($backend:ty, $abi:expr, no_per_thread) => {
        $crate::lanes_suite!(@tests $backend, $abi,
            a_window_started_on_a_busy_stream_holds_back_no_other_window_of_its_lane,
            a_reversed_window_holds_back_no_other_window_of_its_lane_and_reads_none
        );
    };
    (@tests $backend:ty, $abi:expr, $($check:ident),+) => {
        $(
            #[test]
            fn $check() {
                let soft = $crate::soft::SoftDriver::exclusive();
                $crate::lanes::$check::<$backend>(&soft, &$abi);
            }
        )+
    };
}
