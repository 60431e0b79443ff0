//! Resolving a window never blocks the thread that polls it: a window whose
//! device work is not done is waited for on the resolver thread, and the
//! executor's other tasks keep running meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use device_events_core::PlacedWindow;
use device_events_core::process::resolver_running;
use device_events_core::sim::{Sim, SimHold};
use device_events_core::{EventApi, EventProfiler};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt as _;
use support::setup;

/// Returns `Pending` once, waking itself: lets the executor run the others.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

type Resolve = fn(PlacedWindow<Sim>) -> Pin<Box<dyn Future<Output = bool>>>;

/// The turns the other task takes while every window waits on the device.
const TURNS: usize = 100;

/// 1,000 windows behind device work held until the task beside them has
/// had [`TURNS`] turns (or, failing that, until `limit` has passed, when
/// another thread lets it go), resolved on one thread next to that task:
/// how many turns it got before the first window resolved, and how many
/// windows were read. The host stalls between making the windows and
/// polling them, as a loaded machine's does: the hold, not a duration of
/// device work, keeps the windows pending meanwhile.
fn turns_while_resolving(resolve: Resolve, limit: Duration) -> (usize, usize) {
    let s = Sim::stream_create_non_blocking().unwrap();
    let mut profiler = EventProfiler::<Sim>::new();
    let hold = Arc::new(Mutex::new(Some(Sim::hold(s))));
    let windows: Vec<PlacedWindow<Sim>> = (0..1000)
        .map(|_| {
            let token = profiler.start(s);
            profiler.stop(s, token).unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));

    let release = |hold: &Mutex<Option<SimHold>>| {
        if let Some(hold) = hold.lock().unwrap().take() {
            hold.release();
        }
    };
    let (done, finished) = mpsc::channel::<()>();
    let timeout = {
        let hold = Arc::clone(&hold);
        std::thread::spawn(move || {
            if finished.recv_timeout(limit) == Err(RecvTimeoutError::Timeout) {
                release(&hold);
            }
        })
    };
    let mut pool = LocalPool::new();
    let spawner = pool.spawner();
    let (turns, resolved, read) = (
        Rc::new(Cell::new(0)),
        Rc::new(Cell::new(0)),
        Rc::new(Cell::new(0)),
    );
    {
        let (turns, resolved, hold) = (Rc::clone(&turns), Rc::clone(&resolved), Arc::clone(&hold));
        spawner
            .spawn_local(async move {
                while resolved.get() == 0 {
                    turns.set(turns.get() + 1);
                    if turns.get() == TURNS {
                        release(&hold);
                    }
                    YieldOnce(false).await;
                }
            })
            .unwrap();
    }
    for window in windows {
        let (resolved, read) = (Rc::clone(&resolved), Rc::clone(&read));
        spawner
            .spawn_local(async move {
                let was_read = resolve(window).await;
                resolved.set(resolved.get() + 1);
                read.set(read.get() + usize::from(was_read));
            })
            .unwrap();
    }
    pool.run();
    drop(done);
    timeout.join().unwrap();
    drop(profiler);
    Sim::stream_destroy(s).unwrap();
    (turns.get(), read.get())
}

fn without_blocking(window: PlacedWindow<Sim>) -> Pin<Box<dyn Future<Output = bool>>> {
    Box::pin(async move { window.resolve().await.is_some() })
}

/// A resolver that blocks the polling thread, as `resolve` did before.
fn blocking(window: PlacedWindow<Sim>) -> Pin<Box<dyn Future<Output = bool>>> {
    Box::pin(async move { pollster::block_on(window.resolve()).is_some() })
}

#[test]
fn a_thousand_windows_resolve_on_one_thread_while_its_other_task_runs() {
    let _sim = setup();
    // The limit only ends a resolver that blocks: the task lets the work
    // go after its turns, however slow the machine.
    let (turns, read) = turns_while_resolving(without_blocking, Duration::from_secs(60));
    assert_eq!(read, 1000);
    assert!(
        turns >= TURNS,
        "{turns} turns before the first window resolved"
    );
}

/// The check above can fail: with a resolver that blocks, the other task
/// gets no turn until the first window is read.
#[test]
fn the_progress_check_catches_a_resolver_that_blocks() {
    let _sim = setup();
    let (turns, read) = turns_while_resolving(blocking, Duration::from_millis(20));
    assert_eq!(read, 1000);
    assert!(turns <= 1, "{turns} turns before the first window resolved");
}

#[test]
fn windows_dropped_unresolved_release_their_events() {
    let _sim = setup();
    let s = Sim::stream_create_non_blocking().unwrap();
    let mut profiler = EventProfiler::<Sim>::new();
    Sim::enqueue_work(s, Duration::from_millis(30));
    let mut windows: Vec<_> = (0..100)
        .map(|_| {
            let token = profiler.start(s);
            profiler.stop(s, token).unwrap()
        })
        .collect();
    // Each polled once: handed to the resolver, then dropped unresolved.
    let waker = std::task::Waker::noop();
    for window in &mut windows {
        assert!(
            Pin::new(window)
                .poll(&mut Context::from_waker(waker))
                .is_pending()
        );
    }
    drop(windows);
    drop(profiler);
    Sim::stream_synchronize(s).unwrap();
    // The one the resolver was waiting on goes back as it finishes.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while Sim::counts().live_events > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    Sim::stream_destroy(s).unwrap();
    assert_eq!(Sim::counts().live_events, 0, "every event released");
}

#[test]
fn the_resolver_stops_once_no_profiler_is_left() {
    let _sim = setup();
    let s = Sim::stream_create_non_blocking().unwrap();
    let mut profiler = EventProfiler::<Sim>::new();
    Sim::enqueue_work(s, Duration::from_millis(5));
    let token = profiler.start(s);
    let window = profiler.stop(s, token).unwrap();
    assert!(pollster::block_on(window.resolve()).is_some());
    assert!(resolver_running(), "up while a profiler lives");
    drop(profiler);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while resolver_running() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    Sim::stream_destroy(s).unwrap();
    assert!(!resolver_running(), "stopped with the last profiler");
}

/// The simulated backend, but a reading on the resolver thread panics while
/// `PANIC_IN_WAIT` is set: a driver binding with a bug in it.
struct Panicky;

static PANIC_IN_WAIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl EventApi for Panicky {
    type Event = <Sim as EventApi>::Event;
    type Stream = <Sim as EventApi>::Stream;
    const BACKEND: &'static str = "panicky";
    fn event_create() -> Result<Self::Event, device_events_core::DriverError> {
        Sim::event_create()
    }
    fn event_destroy(event: &mut Self::Event) -> Result<(), device_events_core::DriverError> {
        Sim::event_destroy(event)
    }
    fn event_record(
        event: &Self::Event,
        stream: Self::Stream,
    ) -> Result<(), device_events_core::DriverError> {
        Sim::event_record(event, stream)
    }
    fn event_wait(event: &Self::Event) -> Result<(), device_events_core::DriverError> {
        Sim::event_wait(event)
    }
    fn event_elapsed(
        start: &Self::Event,
        end: &Self::Event,
    ) -> Result<std::time::Duration, device_events_core::DriverError> {
        let resolver = std::thread::current().name() == Some("device-events-resolver");
        assert!(
            !(resolver && PANIC_IN_WAIT.load(std::sync::atomic::Ordering::Relaxed)),
            "a reading that panics"
        );
        Sim::event_elapsed(start, end)
    }
    fn stream_wait_event(
        stream: Self::Stream,
        event: &Self::Event,
    ) -> Result<(), device_events_core::DriverError> {
        Sim::stream_wait_event(stream, event)
    }
    fn stream_synchronize(stream: Self::Stream) -> Result<(), device_events_core::DriverError> {
        Sim::stream_synchronize(stream)
    }
    fn stream_create_non_blocking() -> Result<Self::Stream, device_events_core::DriverError> {
        Sim::stream_create_non_blocking()
    }
    fn stream_destroy(stream: Self::Stream) -> Result<(), device_events_core::DriverError> {
        Sim::stream_destroy(stream)
    }
}

impl device_events_core::backend::AnchorApi for Panicky {}
impl device_events_core::backend::ThreadApi for Panicky {}
impl device_events_core::backend::FenceApi for Panicky {}

/// A window whose resolution panics on the resolver thread reads as `None`
/// (logged), and promptly: its future is answered, not left pending.
#[test]
fn a_resolution_that_panics_answers_none() {
    let _sim = setup();
    let s = Sim::stream_create_non_blocking().unwrap();
    let mut profiler = EventProfiler::<Panicky>::new();
    let token = profiler.start(s);
    Sim::enqueue_work(s, Duration::from_millis(20));
    let window = profiler.stop(s, token).unwrap();
    PANIC_IN_WAIT.store(true, std::sync::atomic::Ordering::Relaxed);
    let (sent, answer) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sent.send(pollster::block_on(window.resolve()));
    });
    let read = answer.recv_timeout(Duration::from_secs(5));
    PANIC_IN_WAIT.store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(
        matches!(read, Ok(None)),
        "answered None, not left pending: {read:?}"
    );
    assert!(support::logged(&["panicked", "reads as None"]));
    drop(profiler);
    Sim::stream_destroy(s).unwrap();
}

/// Each window is answered on its own: one on stream B whose device work is
/// done in 10 ms is answered then, not after a window handed over before it
/// on stream A, whose work takes a second.
#[test]
fn a_window_is_not_answered_behind_another_that_pends() {
    let _sim = setup();
    let (a, b) = (
        Sim::stream_create_non_blocking().unwrap(),
        Sim::stream_create_non_blocking().unwrap(),
    );
    let mut profiler = EventProfiler::<Sim>::new();
    let long = profiler.start(a);
    Sim::enqueue_work(a, Duration::from_secs(1));
    let mut long = profiler.stop(a, long).unwrap();
    assert!(long.try_resolve().is_none(), "handed to the resolver first");
    let short = profiler.start(b);
    Sim::enqueue_work(b, Duration::from_millis(10));
    let short = profiler.stop(b, short).unwrap();
    let started = std::time::Instant::now();
    assert!(pollster::block_on(short.resolve()).is_some());
    let took = started.elapsed();
    // The resolver asks a pending window again within 50 ms at most; a
    // queue in arrival order would answer after the second.
    assert!(took < Duration::from_millis(500), "answered after {took:?}");
    drop(long);
    drop(profiler);
    Sim::stream_destroy(a).unwrap();
    Sim::stream_destroy(b).unwrap();
}

/// Windows one profiler ends on one stream end in that order: while a
/// thousand pend there, the resolver asks only the first, so what it
/// costs follows the streams with pending work, not the windows.
#[test]
fn a_thousand_windows_pending_on_one_stream_are_asked_one_at_a_time() {
    let _guard = setup();
    let s = Sim::stream_create_non_blocking().unwrap();
    let mut profiler = EventProfiler::<Sim>::new();
    let first = profiler.start(s);
    pollster::block_on(profiler.stop(s, first).unwrap().resolve()).unwrap();
    assert!(device_events_core::process::wait_for_calibrations(
        Duration::from_secs(10)
    ));
    // Far past the 100 ms counted, so a stalled machine still counts
    // pending windows.
    Sim::enqueue_work(s, Duration::from_secs(1));
    let mut windows: Vec<_> = (0..1000)
        .map(|_| {
            let token = profiler.start(s);
            profiler.stop(s, token).unwrap()
        })
        .collect();
    // Each read once here, and handed to the resolver.
    for window in &mut windows {
        assert!(window.try_resolve().is_none(), "a second of work ahead");
    }
    let before = Sim::calls_of("simEventElapsedTime");
    std::thread::sleep(Duration::from_millis(100));
    let asked = Sim::calls_of("simEventElapsedTime") - before;
    // Asked one at a time, a lane is read about fifteen times in 100 ms,
    // a few calls each; a thousand asked each on its own, thousands.
    assert!(
        asked < 200,
        "{asked} readings in 100 ms for a thousand windows pending on one stream"
    );
    for window in windows {
        assert!(pollster::block_on(window.resolve()).is_some());
    }
}

/// A window whose start the device reached and whose end is a second
/// away costs one driver reading per ask: the start, once found reached,
/// is not asked again, and each "not ready" means its end is ahead.
#[test]
fn a_pending_window_whose_start_was_reached_is_asked_with_one_reading() {
    let _guard = setup();
    let s = Sim::stream_create_non_blocking().unwrap();
    let mut profiler = EventProfiler::<Sim>::new();
    let first = profiler.start(s);
    pollster::block_on(profiler.stop(s, first).unwrap().resolve()).unwrap();
    assert!(device_events_core::process::wait_for_calibrations(
        Duration::from_secs(10)
    ));
    let token = profiler.start(s);
    Sim::enqueue_work(s, Duration::from_secs(5));
    let mut window = profiler.stop(s, token).unwrap();
    assert!(window.try_resolve().is_none(), "five seconds of work ahead");
    // Past the first asks, which come every few microseconds: the lane
    // is now asked every 50 ms (the resolver's longest interval).
    std::thread::sleep(Duration::from_millis(300));
    let before = Sim::calls_of("simEventElapsedTime");
    let since = std::time::Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let readings = Sim::calls_of("simEventElapsedTime") - before;
    let asks = since.elapsed().as_millis() / 50 + 1;
    assert!(
        u128::from(readings) <= asks,
        "{readings} readings for at most {asks} asks"
    );
    drop(window);
    drop(profiler);
    Sim::stream_destroy(s).unwrap();
}
