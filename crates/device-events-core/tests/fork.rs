//! A child made by `fork` has the parent's memory but none of its threads:
//! the resolver thread the parent runs is not the child's, and a window the
//! child reads late still gets a thread of its own. Its own binary: a child
//! of a process with other test threads could inherit a lock one of them
//! held.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use device_events_core::process::{resolver_running, wait_for_calibrations};
use device_events_core::sim::Sim;
use device_events_core::{EventApi, EventProfiler};
use support::{OnWait, WaitHook};

/// Start a window behind `work` and read it, within two seconds.
fn read_late_window<
    A: device_events_core::backend::AnchorApi<Stream = device_events_core::sim::SimStream>
        + device_events_core::backend::FenceApi,
>(
    profiler: &mut EventProfiler<A>,
    work: Duration,
) -> bool {
    let s = Sim::stream_create_non_blocking().unwrap();
    let token = profiler.start(s);
    Sim::enqueue_work(s, work);
    let window = profiler.stop(s, token).unwrap();
    let (sent, answer) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sent.send(pollster::block_on(window.resolve()).is_some());
    });
    answer.recv_timeout(Duration::from_secs(2)).unwrap_or(false)
}

#[test]
fn a_forked_child_resolves_windows_on_a_thread_of_its_own() {
    let _sim = Sim::exclusive();
    let mut profiler = EventProfiler::<Sim>::new();
    assert!(read_late_window(&mut profiler, Duration::from_millis(20)));
    assert!(resolver_running(), "the parent's resolver thread is up");
    // SAFETY: the child only reads a window and exits; this binary has no
    // other test thread that could hold a lock across the fork.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        let read = read_late_window(&mut profiler, Duration::from_millis(20));
        // SAFETY: leaves the child at once, with the outcome as its status.
        unsafe { libc::_exit(if read { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: `child` is this process's child; `status` is writable.
    let waited = unsafe { libc::waitpid(child, &mut status, 0) };
    assert_eq!(waited, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child read its window (status {status:#x})"
    );
}

/// Holds every wait in the driver while set: a calibration in flight.
static HOLD: AtomicBool = AtomicBool::new(false);

struct Hold;

impl WaitHook for Hold {
    fn waited() {
        while HOLD.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// What `docs/design.md` promises after `fork`: a calibration the parent had in
/// flight is not the child's to wait for; the child's profiler takes its
/// own anchor, reads its windows, and sees its calibrations end.
#[test]
fn a_child_forked_during_a_calibration_takes_its_own_anchor() {
    let _sim = Sim::exclusive();
    let mut profiler = EventProfiler::<OnWait<Hold>>::new();
    let s = Sim::stream_create_non_blocking().unwrap();
    HOLD.store(true, Ordering::Release);
    // The first window begins a calibration, which waits on the hold.
    let token = profiler.start(s);
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        !wait_for_calibrations(Duration::ZERO),
        "a calibration is in flight"
    );
    // SAFETY: the child only profiles and exits; the only other threads
    // are the library's, and the calibrator is parked in the hold, outside
    // any lock.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        // The child's own calibrations must not wait on the parent's hold.
        HOLD.store(false, Ordering::Release);
        let read = read_late_window(&mut profiler, Duration::from_millis(5));
        let idle = wait_for_calibrations(Duration::from_secs(2));
        // SAFETY: leaves the child at once, with the outcome as its status.
        unsafe { libc::_exit(i32::from(!read) | (i32::from(!idle) << 1)) };
    }
    HOLD.store(false, Ordering::Release);
    let mut status = 0;
    // SAFETY: `child` is this process's child; `status` is writable.
    let waited = unsafe { libc::waitpid(child, &mut status, 0) };
    assert_eq!(waited, child);
    assert!(
        libc::WIFEXITED(status),
        "the child exited (status {status:#x})"
    );
    let code = libc::WEXITSTATUS(status);
    assert!(code & 1 == 0, "the child read its window");
    assert!(code & 2 == 0, "the child's calibrations ended");
    let _ = profiler.stop(s, token);
    drop(profiler);
    assert!(wait_for_calibrations(Duration::from_secs(2)));
}

/// The exit status of `child`, or `None` when it had not exited after
/// 10 s (killed then): a child that hangs fails the test instead of
/// hanging it.
fn status_of(child: libc::pid_t) -> Option<i32> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut status = 0;
    loop {
        // SAFETY: `child` is this process's child; `status` is writable.
        let reaped = unsafe { libc::waitpid(child, &raw mut status, libc::WNOHANG) };
        if reaped == child {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        assert_eq!(reaped, 0, "waitpid failed");
        if std::time::Instant::now() > deadline {
            // SAFETY: `child` is this process's unreaped child.
            unsafe {
                libc::kill(child, libc::SIGKILL);
                libc::waitpid(child, &raw mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The core's fork handlers, registered once, as a process that uses no
/// backend crate registers them.
fn register_fork_handlers() {
    extern "C" fn prepare() {
        device_events_core::process::before_fork();
    }
    extern "C" fn parent() {
        device_events_core::process::after_fork_in_parent();
    }
    extern "C" fn child() {
        device_events_core::process::after_fork_in_child();
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: three functions of no arguments that do not unwind.
    ONCE.call_once(|| unsafe {
        libc::pthread_atfork(Some(prepare), Some(parent), Some(child));
    });
}

/// Set: each ask of a window's events on the resolver thread, and each
/// anchor record on a calibrator thread, lasts 100 ms (a driver call that
/// takes its time), with [`IN_CALL`] set meanwhile.
static SLOW_ASKS: AtomicBool = AtomicBool::new(false);
static SLOW_ANCHORS: AtomicBool = AtomicBool::new(false);
static IN_CALL: AtomicBool = AtomicBool::new(false);
/// Set: an anchor record on a calibrator thread stays in the "driver"
/// until it is cleared (10 s at most), as an enqueue into the full queue
/// of a hung device does, with [`IN_CALL`] set meanwhile.
static HELD_ANCHORS: AtomicBool = AtomicBool::new(false);
/// Streams [`Slow`] destroyed.
static DESTROYS: AtomicUsize = AtomicUsize::new(0);

/// On a calibrator thread, while [`HELD_ANCHORS`] is set: in the "driver"
/// until it is cleared.
fn held_call() {
    if HELD_ANCHORS.load(Ordering::Acquire)
        && std::thread::current().name() == Some("device-events-calibrator")
    {
        IN_CALL.store(true, Ordering::Release);
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while HELD_ANCHORS.load(Ordering::Acquire) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        IN_CALL.store(false, Ordering::Release);
    }
}

/// On a library thread named `name`, while `slow` is set: 100 ms in the
/// "driver", flagged.
fn slow_call(slow: &AtomicBool, name: &str) {
    if slow.load(Ordering::Acquire) && std::thread::current().name() == Some(name) {
        IN_CALL.store(true, Ordering::Release);
        std::thread::sleep(Duration::from_millis(100));
        IN_CALL.store(false, Ordering::Release);
    }
}

/// Wait up to 2 s for a library thread to be inside a slow call.
fn in_a_call() -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !IN_CALL.load(Ordering::Acquire) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    true
}

/// The simulated backend, with calls of the library's threads that take
/// their time ([`slow_call`]).
struct Slow;

impl EventApi for Slow {
    type Event = <Sim as EventApi>::Event;
    type Stream = device_events_core::sim::SimStream;
    const BACKEND: &'static str = "sim";

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
        slow_call(&SLOW_ANCHORS, "device-events-calibrator");
        held_call();
        Sim::event_record(event, stream)
    }
    fn event_wait(event: &Self::Event) -> Result<(), device_events_core::DriverError> {
        Sim::event_wait(event)
    }
    fn event_elapsed(
        start: &Self::Event,
        end: &Self::Event,
    ) -> Result<Duration, device_events_core::DriverError> {
        slow_call(&SLOW_ASKS, "device-events-resolver");
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
        DESTROYS.fetch_add(1, Ordering::SeqCst);
        Sim::stream_destroy(stream)
    }
}

impl device_events_core::backend::AnchorApi for Slow {}
impl device_events_core::backend::ThreadApi for Slow {}
impl device_events_core::backend::FenceApi for Slow {}

/// A profiler of [`Slow`] with its anchor taken, and a window on `s`
/// behind 300 ms of work, handed to the resolver thread, which is inside
/// a slow ask of it (holding the window's own lock) when this returns.
fn window_being_asked(
    s: device_events_core::sim::SimStream,
) -> (EventProfiler<Slow>, device_events_core::PlacedWindow<Slow>) {
    let mut profiler = EventProfiler::<Slow>::new();
    assert!(read_late_window(&mut profiler, Duration::from_millis(1)));
    let token = profiler.start(s);
    Sim::enqueue_work(s, Duration::from_millis(300));
    let mut window = profiler.stop(s, token).unwrap();
    SLOW_ASKS.store(true, Ordering::Release);
    assert!(window.try_resolve().is_none(), "handed to the resolver");
    assert!(in_a_call(), "the resolver asks the window within 2 s");
    (profiler, window)
}

/// `docs/design.md`'s promise after `fork`: no lock of the library's is
/// left held in the child. The parent's resolver thread is inside a
/// driver call asking a window (holding the window's own lock) as the
/// process forks; the child drops that window without hanging.
#[test]
fn a_child_drops_a_window_its_parents_resolver_was_asking_at_the_fork() {
    let _sim = Sim::exclusive();
    register_fork_handlers();
    let s = Sim::stream_create_non_blocking().unwrap();
    let (profiler, window) = window_being_asked(s);
    // SAFETY: the child only drops the window and exits; the other threads
    // are the library's, which the fork handlers fence off.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        drop(window);
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(0) };
    }
    SLOW_ASKS.store(false, Ordering::Release);
    let status = status_of(child);
    assert!(
        pollster::block_on(window.resolve()).is_some(),
        "the parent reads it"
    );
    drop(profiler);
    assert_eq!(
        status,
        Some(0),
        "the child's drop of the window (None: hung, killed)"
    );
}

/// As above, the child reading the window instead: it is the parent's,
/// handed to the parent's resolver, which the child does not have; it
/// reads `None` at once, never asked there.
#[test]
fn a_child_reads_none_from_a_window_its_parents_resolver_was_asking_at_the_fork() {
    let _sim = Sim::exclusive();
    register_fork_handlers();
    let s = Sim::stream_create_non_blocking().unwrap();
    let (profiler, window) = window_being_asked(s);
    // SAFETY: as above; the child reads the window on a thread of its own.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        let (sent, answer) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sent.send(pollster::block_on(window.resolve()).is_none());
        });
        let code = match answer.recv_timeout(Duration::from_secs(2)) {
            Ok(true) => 0,
            Ok(false) => 2,
            Err(_) => 1,
        };
        // SAFETY: leaves the child at once, with the outcome as its status.
        unsafe { libc::_exit(code) };
    }
    SLOW_ASKS.store(false, Ordering::Release);
    let status = status_of(child);
    assert!(
        pollster::block_on(window.resolve()).is_some(),
        "the parent reads it"
    );
    drop(profiler);
    assert_eq!(
        status,
        Some(0),
        "1: no answer within 2 s; 2: read Some in the child; None: hung, killed"
    );
}

/// The parent's calibrator thread is inside a driver call taking a
/// profiler's first anchor as the process forks; the child uses that
/// profiler (a window read), a fence made before the fork, and drops both,
/// without hanging.
#[test]
fn a_child_uses_and_drops_a_profiler_and_a_fence_whose_anchor_was_in_a_call_at_the_fork() {
    let _sim = Sim::exclusive();
    register_fork_handlers();
    let s = Sim::stream_create_non_blocking().unwrap();
    let mut profiler = EventProfiler::<Slow>::new();
    let fence = device_events_core::EventFence::<Slow>::new(s);
    SLOW_ANCHORS.store(true, Ordering::Release);
    let token = profiler.start(s);
    assert!(in_a_call(), "the calibrator records the anchor within 2 s");
    // SAFETY: as above.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        SLOW_ANCHORS.store(false, Ordering::Release);
        let read = read_late_window(&mut profiler, Duration::from_millis(5));
        let waited = fence.wait_sync().is_ok();
        drop((fence, profiler));
        // SAFETY: leaves the child at once, with the outcome as its status.
        unsafe { libc::_exit(i32::from(!read) | (i32::from(!waited) << 1)) };
    }
    SLOW_ANCHORS.store(false, Ordering::Release);
    let status = status_of(child);
    let _ = profiler.stop(s, token);
    drop((fence, profiler));
    assert_eq!(
        status,
        Some(0),
        "1: the child's window unread; 2: its fence wait failed; None: hung, killed"
    );
}

/// `docs/design.md`'s promise for `fork`: it waits for no driver call that
/// can wait on the device. A calibrator thread is inside an anchor's record
/// that the "driver" holds (an enqueue into a hung device's full queue);
/// the fork handler returns meanwhile.
#[test]
fn a_fork_waits_for_no_anchor_record_held_in_the_driver() {
    assert_eq!(
        fork_while_held::<Slow>(),
        Ok(true),
        "the fork handler returned while the record was in the driver \
         (Err: it waited 5 s for it)"
    );
}

/// A profiler of `A` starts its first window, whose anchor's calibration
/// the "driver" holds ([`held_call`]), and the fork handlers run on another
/// thread meanwhile: whether they returned while the call was still held
/// (`Err`: not within 5 s). The hold is let go, and all cleaned up, after.
fn fork_while_held<
    A: device_events_core::backend::AnchorApi<Stream = device_events_core::sim::SimStream>
        + device_events_core::backend::FenceApi,
>() -> Result<bool, std::sync::mpsc::RecvTimeoutError> {
    let _sim = Sim::exclusive();
    let s = Sim::stream_create_non_blocking().unwrap();
    let mut profiler = EventProfiler::<A>::new();
    HELD_ANCHORS.store(true, Ordering::Release);
    let token = profiler.start(s);
    assert!(in_a_call(), "the calibrator is in the held call within 2 s");
    let (sent, forked) = std::sync::mpsc::channel();
    let forking = std::thread::spawn(move || {
        device_events_core::process::before_fork();
        let _ = sent.send(IN_CALL.load(Ordering::Acquire));
        device_events_core::process::after_fork_in_parent();
    });
    let during = forked.recv_timeout(Duration::from_secs(5));
    HELD_ANCHORS.store(false, Ordering::Release);
    forking.join().unwrap();
    let _ = profiler.stop(s, token);
    drop(profiler);
    assert!(wait_for_calibrations(Duration::from_secs(10)));
    during
}

/// A child made by `fork` drops a profiler whose anchor stream the parent
/// made: the stream is the parent's (CUDA and ROCm let no child use it,
/// and a parent's thread may have been in a call on it at the fork), so
/// the child leaves it to the process and destroys no stream.
#[test]
fn a_child_leaves_its_parents_anchor_stream_to_the_process() {
    let _sim = Sim::exclusive();
    register_fork_handlers();
    let mut profiler = EventProfiler::<Slow>::new();
    assert!(read_late_window(&mut profiler, Duration::from_millis(1)));
    assert!(wait_for_calibrations(Duration::from_secs(10)));
    // SAFETY: the child only drops the profiler and exits; the other
    // threads are the library's, which the fork handlers fence off.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        let before = DESTROYS.load(Ordering::SeqCst);
        drop(profiler);
        let idle = wait_for_calibrations(Duration::from_secs(2));
        let destroyed = DESTROYS.load(Ordering::SeqCst) - before;
        // SAFETY: leaves the child at once, with the outcome as its status.
        unsafe { libc::_exit(i32::from(destroyed > 0) | (i32::from(!idle) << 1)) };
    }
    let status = status_of(child);
    let before = DESTROYS.load(Ordering::SeqCst);
    drop(profiler);
    assert!(wait_for_calibrations(Duration::from_secs(10)));
    assert_eq!(
        status,
        Some(0),
        "1: the child destroyed its parent's anchor stream; 2: its calibrations \
         did not end; None: hung, killed"
    );
    assert_eq!(
        DESTROYS.load(Ordering::SeqCst) - before,
        1,
        "the parent destroys its anchor stream"
    );
}

/// The simulated backend, with an anchor gate whose wait the "driver"
/// holds while [`HELD_ANCHORS`] is set.
struct Gated;

support::events_of_sim!(Gated);

impl device_events_core::backend::AnchorApi for Gated {
    fn gate(
        _: Self::Stream,
    ) -> Result<Option<Box<dyn device_events_core::backend::Gate>>, device_events_core::DriverError>
    {
        Ok(Some(Box::new(HeldGate)))
    }
}
impl device_events_core::backend::ThreadApi for Gated {}
impl device_events_core::backend::FenceApi for Gated {}

/// A gate whose close is held in the "driver" ([`held_call`]).
struct HeldGate;

impl device_events_core::backend::Gate for HeldGate {
    fn close(&mut self) -> Result<(), device_events_core::DriverError> {
        held_call();
        Ok(())
    }
    fn open(&mut self) -> Result<(), device_events_core::DriverError> {
        Ok(())
    }
    fn settle(&self) -> Duration {
        Duration::ZERO
    }
}

/// As [`a_fork_waits_for_no_anchor_record_held_in_the_driver`], the
/// calibrator inside the anchor gate's wait, which the "driver" holds.
#[test]
fn a_fork_waits_for_no_gate_wait_held_in_the_driver() {
    assert_eq!(
        fork_while_held::<Gated>(),
        Ok(true),
        "the fork handler returned while the gate's wait was in the driver \
         (Err: it waited 5 s for it)"
    );
}

/// On the checked layer (the counting backend, whose streams live in a
/// handle table as every backend's do): the parent's calibrator is inside
/// an anchor's record, holding the anchor stream's table entry, as the
/// process forks. The fork does not wait for it; the child drops the
/// inherited profiler (its calibration, on the parent's thread, is never
/// ended there), then profiles a stream of its own and releases it, the
/// table's copied hold on the parent's entry in it.
#[test]
fn a_child_profiles_on_the_checked_layer_while_its_parents_record_held_a_stream_entry() {
    use device_events_core::tally::Tally;
    let _sim = Sim::exclusive();
    register_fork_handlers();
    Tally::set_current(Some(7));
    let s = Tally::stream_create_non_blocking().unwrap();
    let mut profiler = EventProfiler::<Tally>::new();
    Tally::hold_calibrator_records(true);
    let token = profiler.start(s);
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !Tally::calibrator_record_held() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
    assert!(
        Tally::calibrator_record_held(),
        "the calibrator records the anchor within 2 s"
    );
    // SAFETY: the child only profiles and exits; the other threads are
    // the library's, which the fork handlers fence off (the calibrator's
    // held record among them: outside its piece of work).
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork failed");
    if child == 0 {
        Tally::hold_calibrator_records(false);
        let held_at_fork = Tally::calibrator_record_held();
        drop(profiler);
        let own = Tally::stream_create_non_blocking().unwrap();
        let mut mine = EventProfiler::<Tally>::new();
        let token = mine.start(own);
        let window = mine.stop(own, token).unwrap();
        let (sent, answer) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sent.send(pollster::block_on(window.resolve()).is_some());
        });
        let read = answer.recv_timeout(Duration::from_secs(2)).is_ok();
        drop(mine);
        let idle = wait_for_calibrations(Duration::from_secs(2));
        let released = Tally::stream_destroy(own).is_ok();
        let code = i32::from(!held_at_fork)
            | (i32::from(!read) << 1)
            | (i32::from(!idle) << 2)
            | (i32::from(!released) << 3);
        // SAFETY: leaves the child at once, with the outcome as its status.
        unsafe { libc::_exit(code) };
    }
    let forked_while_held = Tally::calibrator_record_held();
    Tally::hold_calibrator_records(false);
    let status = status_of(child);
    let _ = profiler.stop(s, token);
    drop(profiler);
    assert!(wait_for_calibrations(Duration::from_secs(10)));
    let _ = Tally::stream_destroy(s);
    assert!(forked_while_held, "the fork waited for the held record");
    assert_eq!(
        status,
        Some(0),
        "1: no record held at the fork; 2: the child's window never answered; 4: its \
         calibrations did not end; 8: its stream was not released; None: hung, killed"
    );
}
