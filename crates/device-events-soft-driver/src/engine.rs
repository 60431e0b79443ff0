//! The device both ABIs drive: streams that run their work in order on worker
//! threads, in real host time, and events the device stamps as it reaches
//! them.
//!
//! Each stream keeps its schedule: the host-clock instant its queued work
//! will have drained. An operation is timed against that schedule when it is
//! queued (work starts when the stream is free, an event is stamped when the
//! work before it is done, a wait moves the stream past the awaited point),
//! and its worker carries it out at that instant. A worker the host's
//! scheduler runs late delays only when the host *sees* completion, as a
//! GPU's interrupt latency does, never the device's timestamps.
//!
//! Nothing reaches the device inside the call that queues it: every
//! operation, on an idle stream too, starts after a launch latency drawn
//! from [`clock::launch_latency`], and a query says not-ready until then.
//!
//! Streams synchronize as the CUDA programming guide's "implicit
//! synchronization" says, and HIP's documentation repeats: work on the null
//! (legacy default) stream waits for prior work on every blocking stream of
//! its device, and work on a blocking stream waits for prior work on the
//! null stream. Non-blocking streams do neither.
//!
//! Any use of a handle that is not live (destroyed, never made, released
//! twice) is a misuse: refused as a real driver cannot be relied on to, and
//! counted, so that tests can assert there were none.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard, PoisonError};
use std::thread::ThreadId;
use std::time::Duration;

use crate::clock;

/// What went wrong, before an ABI spells it as its own status code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    InvalidValue,
    InvalidHandle,
    InvalidContext,
    InvalidDevice,
    NotInitialized,
    /// A call once the driver's exit handler began.
    Deinitialized,
    NotReady,
    CapturedEvent,
    /// The device does not offer the operation.
    NotSupported,
    /// A module image the JIT does not take.
    InvalidImage,
    /// A module image with no code for the device's architecture (a cubin
    /// built for another).
    NoBinaryForGpu,
    /// No such symbol in the module.
    NotFound,
    CaptureUnsupported,
    CaptureInvalidated,
    /// Ending a capture on a stream that did not begin it.
    CaptureUnmatched,
    /// Ending a capture while a forked stream has not joined back.
    CaptureUnjoined,
    /// A dependency between two different captures.
    CaptureIsolation,
    /// Ending a GLOBAL or THREAD_LOCAL capture on another thread than the
    /// one that began it.
    CaptureWrongThread,
    /// A handle of a context that was torn down.
    ContextDestroyed,
    /// A status chosen by a test through the control API.
    Injected(i32),
}

pub(crate) type Outcome<T> = Result<T, Fault>;

/// Where an event was last recorded.
#[derive(Default)]
struct Event {
    device: usize,
    timing: bool,
    /// Created for blocking synchronization: a wait sleeps, and wakes a
    /// little late, instead of spinning a core.
    blocking: bool,
    /// Generation of the last record queued (0: never recorded).
    recorded: u64,
    /// Generation of the last record the device reached.
    reached: u64,
    /// Host-clock nanoseconds at which the last queued record falls due.
    due: u64,
    /// The last queued record's place: its stream, and the operation count
    /// that stream reaches with it. A wait keeps this, not the event, so a
    /// destroyed event releases none of the waits queued on it.
    record_point: (u64, u64),
    /// Device-clock stamp of the last reached record.
    stamp: i128,
    /// Host-clock nanoseconds at that stamp: the ground truth tests read.
    host_stamp: u64,
    /// Last recorded into a capturing stream: a graph node, not a timestamp;
    /// the capture, and the stream that recorded it.
    captured: Option<(u64, u64)>,
    /// The stream of the last record, captured or not, unless it was the
    /// null stream: ROCm's runtime keeps it (clr `SetCaptureStream`).
    recorded_on: Option<u64>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Capture {
    None,
    /// Part of the capture of this id: its origin, or a stream forked into
    /// it by waiting on an event recorded there.
    Active(u64),
    Invalidated(u64),
}

/// A capture in progress: the stream that began it, and the streams forked
/// into it that have not joined back; the thread that began it, and in
/// which interaction mode.
struct Capturing {
    origin: u64,
    unjoined: HashSet<u64>,
    thread: ThreadId,
    mode: u32,
}

/// How a stream's wait on an event recorded outside any capture is judged.
#[derive(Clone, Copy)]
pub(crate) enum WaitRules {
    /// CUDA: a capturing stream may wait on it only as an external event
    /// (`CU_EVENT_WAIT_EXTERNAL`); otherwise the dependency would cross the
    /// capture's boundary (905), and the capture is invalidated.
    Cuda { external: bool },
    /// ROCm's runtime, every version (`hipStreamWaitEvent_common`): refused
    /// with 905 while the event's stream captures; a capturing waiter is
    /// not checked.
    Clr,
}

/// Stream capture interaction modes, as both ABIs number them.
pub(crate) const CAPTURE_MODE_GLOBAL: u32 = 0;
pub(crate) const CAPTURE_MODE_RELAXED: u32 = 2;

thread_local! {
    /// This thread's capture interaction mode (`cuThreadExchangeStreamCaptureMode`).
    static CAPTURE_MODE: std::cell::Cell<u32> = const { std::cell::Cell::new(CAPTURE_MODE_GLOBAL) };
}

struct Stream {
    device: usize,
    /// Synchronizes with the legacy default stream (CUDA's blocking streams).
    blocking: bool,
    /// A per-device null stream or per-thread stream, made on first use;
    /// not counted as live.
    internal: bool,
    /// Destroyed with work pending: that work still runs, and still counts
    /// for synchronization, but the handle is no longer usable.
    destroyed: bool,
    /// Each operation with the stream waits on values it queues behind
    /// (see [`enqueue`]).
    queue: Sender<(Op, Vec<u64>)>,
    /// The hardware queue it shares with other streams of its device, when
    /// the driver has a limited number of them.
    hw_queue: Option<usize>,
    /// Host-clock nanoseconds at which the work queued so far is done.
    schedule: u64,
    enqueued: u64,
    completed: u64,
    capture: Capture,
}

/// An operation, with the host-clock nanoseconds at which it is done.
enum Op {
    /// Done at `until`, or `length` after a wait ahead of it let the
    /// stream go, if that is later. The spin kernel's work writes its
    /// start and end device-clock stamps to `stamps` as it ends.
    Busy {
        until: u64,
        length: u64,
        stamps: Option<(Arc<HostBlock>, usize)>,
    },
    Record {
        event: u64,
        generation: u64,
        at: u64,
    },
    /// Go on once each stream has completed that many operations (or is
    /// gone, which it is only once drained).
    WaitStreams(Vec<(u64, u64)>),
    /// Go on once `test` holds of the 32-bit value at `word` of `block`,
    /// seen a wait-value latency after it is written.
    WaitValue {
        id: u64,
        block: Arc<HostBlock>,
        word: usize,
        test: ValueTest,
        at: u64,
    },
}

/// Host memory a stream can wait on: page-locked and mapped for the
/// device, as `cuMemHostAlloc` and `hipExtMallocWithFlags(...,
/// hipMallocSignalMemory)` give it. The caller writes it through the
/// pointer it was handed; the stream reads it atomically.
pub(crate) struct HostBlock {
    words: Box<[AtomicU32]>,
    /// Mapped into the device's address space (CUDA's DEVICEMAP): only
    /// then has it a device pointer.
    mapped: bool,
}

/// A stream wait on a value, queued and not yet passed.
struct ValueWait {
    block: Arc<HostBlock>,
    word: usize,
    test: ValueTest,
    stream: u64,
    /// (device, hardware queue) where its stream shares one: work queued
    /// on that queue after it waits for it too, as a GPU's in-order queue
    /// does.
    shared: Option<(usize, usize)>,
}

/// What value waits cost: how long each held its stream once the device
/// reached it, and how long work of other streams on its hardware queue
/// was held behind it; and apart, what the driver's own host threads, which
/// stand in for the device, added: a GPU's queue reaches a wait when its
/// work ahead is done and goes on when the wait passes, where a stream's
/// worker thread here gets there, and wakes, when the host's scheduler
/// lets it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Held {
    pub(crate) waits: u64,
    pub(crate) held_ns: u64,
    pub(crate) held_max_ns: u64,
    pub(crate) delayed: u64,
    pub(crate) delayed_ns: u64,
    pub(crate) delayed_max_ns: u64,
    /// Of the work held behind waits: how long the driver's own threads
    /// kept it past its start, beside the wait's hold (its worker reaching
    /// the wait late, the held stream's worker waking late).
    pub(crate) driver_late_ns: u64,
    pub(crate) driver_late_max_ns: u64,
    /// The longest a wait's worker went between its last look that found
    /// the wait shut and the look that passed it: how late, at most, it
    /// may have seen the host's write, its own part of the hold (a GPU
    /// looks again within about a microsecond).
    pub(crate) look_gap_max_ns: u64,
}

/// A value wait that passed: when its stream's worker got to it, and when
/// it saw the value that let it pass, on the host clock.
#[derive(Clone, Copy)]
struct Passed {
    id: u64,
    arrived: u64,
    passed: u64,
}

/// How many passed waits are remembered for the work held behind them: far
/// more than are ever queued on one hardware queue at once.
const PASSED_KEPT: usize = 1024;

/// The comparison of a stream wait on a value, as both ABIs define it:
/// `>=`, `==`, `&`, and NOR (CUDA's flags 0-3, HIP's the same, HIP's with
/// a mask applied to the value read).
#[derive(Clone, Copy)]
pub(crate) struct ValueTest {
    pub(crate) kind: u32,
    pub(crate) value: u32,
    pub(crate) mask: u32,
}

/// CUDA's `CU_STREAM_WAIT_VALUE_GEQ`: "cyclic" greater-or-equal,
/// `(int32_t)(*addr - value) >= 0`, so a count that wraps keeps working.
/// HIP's `hipStreamWaitValueGte` (0) is a plain `>=`.
pub(crate) const CYCLIC_GEQ: u32 = 4;

impl ValueTest {
    fn holds(self, read: u32) -> bool {
        let read = read & self.mask;
        match self.kind {
            0 => read >= self.value,
            #[allow(clippy::cast_possible_wrap)]
            CYCLIC_GEQ => read.wrapping_sub(self.value) as i32 >= 0,
            1 => read == self.value,
            2 => read & self.value != 0,
            _ => !(read | (self.value & self.mask)) != 0,
        }
    }
}

#[derive(Default)]
struct State {
    next_id: u64,
    events: HashMap<u64, Event>,
    streams: HashMap<u64, Stream>,
    null_streams: HashMap<usize, u64>,
    per_thread: HashMap<(ThreadId, usize), u64>,
    /// Allocation base address to its size.
    allocations: HashMap<u64, (usize, u64)>,
    /// Host memory mapped for the devices, by its address.
    host_blocks: HashMap<u64, Arc<HostBlock>>,
    /// Stream waits on a value, queued and not yet passed.
    value_waits: HashMap<u64, ValueWait>,
    /// How long value waits held their streams, and what they delayed on
    /// the hardware queues they share.
    held: Held,
    /// The waits passed last, oldest first, at most [`PASSED_KEPT`].
    passed: std::collections::VecDeque<Passed>,
    graphs: HashSet<u64>,
    /// Events and streams freed with their context's teardown.
    orphans: HashSet<u64>,
    captures: HashMap<u64, Capturing>,
    /// Hardware queues per device (0: one per stream), and streams made
    /// per device so far, which take them in turn.
    hw_queues: usize,
    streams_made: HashMap<usize, usize>,
    /// Host-clock nanoseconds at which each (device, hardware queue)'s
    /// work queued so far is done.
    hw_schedule: HashMap<(usize, usize), u64>,
    /// By the thread that recorded it: a library records on threads of
    /// its own too.
    last_recorded: HashMap<ThreadId, u64>,
    /// Loaded modules, by handle, with their device.
    modules: HashMap<u64, usize>,
    /// Functions got from modules, by handle, with their module.
    functions: HashMap<u64, u64>,
}

/// What the device holds now.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Live {
    pub(crate) events: u64,
    pub(crate) streams: u64,
    pub(crate) allocations: u64,
    pub(crate) graphs: u64,
    pub(crate) misuses: u64,
}

pub(crate) struct Engine {
    state: Mutex<State>,
    changed: Condvar,
    /// Calls a capture did not allow (its interaction mode's, or calls no
    /// capture allows): each failed, and invalidated the capture.
    capture_violations: AtomicU64,
    /// Bumped at every change waiters look for: what a spinning wait
    /// watches, so that it does not hammer the state's lock.
    progress: AtomicU64,
}

pub(crate) static ENGINE: LazyLock<Engine> = LazyLock::new(|| Engine {
    state: Mutex::new(State {
        // Handles start away from zero and small integers, which the ABIs
        // give meanings of their own (the null and legacy streams).
        next_id: 0x1000,
        hw_queues: clock::max_connections(),
        ..State::default()
    }),
    changed: Condvar::new(),
    capture_violations: AtomicU64::new(0),
    progress: AtomicU64::new(0),
});

/// Misuses since the process began. A plain static, outside [`ENGINE`]:
/// a fork child counts and reads it without waiting on anything a parent
/// thread may have held at the fork (the engine's lazy initialisation
/// included).
static MISUSES: AtomicU64 = AtomicU64::new(0);

/// Count a misuse.
pub(crate) fn count_misuse() {
    MISUSES.fetch_add(1, Ordering::Relaxed);
}

/// Misuses since the process began, read without taking any lock.
pub(crate) fn misuses() -> u64 {
    MISUSES.load(Ordering::Relaxed)
}

/// A handle that is not live was used: counted, and refused.
fn misuse() -> Fault {
    count_misuse();
    Fault::InvalidHandle
}

/// A stream argument: one the caller created, the device's null (legacy
/// default) stream, or the calling thread's per-thread default stream.
#[derive(Clone, Copy)]
pub(crate) enum StreamRef {
    Created(u64),
    Null { device: usize },
    PerThread { device: usize },
}

impl Engine {
    /// Tell waiters, sleeping or spinning, that something changed.
    fn signal(&self) {
        self.progress.fetch_add(1, Ordering::Release);
        self.changed.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait_while<'a>(
        &self,
        guard: MutexGuard<'a, State>,
        blocked: impl FnMut(&mut State) -> bool,
    ) -> MutexGuard<'a, State> {
        self.changed
            .wait_while(guard, blocked)
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn live(&self) -> Live {
        let state = self.lock();
        Live {
            events: state.events.len() as u64,
            streams: state
                .streams
                .values()
                .filter(|s| !s.internal && !s.destroyed)
                .count() as u64,
            allocations: (state.allocations.len() + state.host_blocks.len()) as u64,
            graphs: state.graphs.len() as u64,
            misuses: misuses(),
        }
    }

    pub(crate) fn event_create(&self, device: usize, timing: bool, blocking: bool) -> u64 {
        let mut state = self.lock();
        let id = next_id(&mut state);
        state.events.insert(
            id,
            Event {
                device,
                timing,
                blocking,
                ..Event::default()
            },
        );
        id
    }

    /// Release an event now; a record still queued for it is skipped.
    /// `clr`: as ROCm's runtime, which first checks the stream of the last
    /// record and, if valid, uses it ([`Engine::checked_then_used`]).
    pub(crate) fn event_destroy(&self, event: u64, clr: bool) -> Outcome<()> {
        let mut state = self.lock();
        if clr {
            let recorded_on = live_event(&state, event)?.recorded_on;
            state = self.checked_then_used(state, recorded_on);
        }
        if state.events.remove(&event).is_none() {
            return Err(misuse());
        }
        drop(state);
        self.signal();
        Ok(())
    }

    pub(crate) fn event_record(&self, event: u64, stream: StreamRef) -> Outcome<()> {
        let mut state = self.lock();
        live_event(&state, event)?;
        let null = matches!(stream, StreamRef::Null { .. });
        let stream = resolve(&mut state, stream)?;
        let (device, capture) = {
            let s = state.streams.get(&stream).ok_or(Fault::InvalidHandle)?;
            (s.device, s.capture)
        };
        let ev = state.events.get_mut(&event).ok_or(Fault::InvalidHandle)?;
        if ev.device != device {
            return Err(Fault::InvalidHandle);
        }
        ev.recorded_on = (!null).then_some(stream);
        match capture {
            Capture::Active(id) => {
                ev.captured = Some((id, stream));
                return Ok(());
            }
            Capture::Invalidated(_) => return Err(Fault::CaptureInvalidated),
            Capture::None => {}
        }
        // The record counts only once it is queued: a failed enqueue must
        // not leave the event waiting for a record that never comes.
        let generation = ev.recorded + 1;
        let at = start_time(&state, stream);
        enqueue(
            &mut state,
            stream,
            at,
            Op::Record {
                event,
                generation,
                at,
            },
        )?;
        state
            .last_recorded
            .insert(std::thread::current().id(), event);
        let point = (stream, state.streams.get(&stream).map_or(0, |s| s.enqueued));
        if let Some(ev) = state.events.get_mut(&event) {
            ev.captured = None;
            ev.recorded = generation;
            ev.due = at;
            ev.record_point = point;
        }
        drop(state);
        self.signal();
        Ok(())
    }

    /// Tear down `device`'s context: free its events and streams, as a
    /// driver frees what a destroyed context held. Work still queued runs
    /// out; later calls on the handles find a destroyed context.
    pub(crate) fn tear_down(&self, device: usize) {
        let mut state = self.lock();
        let events: Vec<u64> = state
            .events
            .iter()
            .filter(|(_, e)| e.device == device)
            .map(|(id, _)| *id)
            .collect();
        for id in events {
            state.events.remove(&id);
            state.orphans.insert(id);
        }
        let streams: Vec<u64> = state
            .streams
            .iter()
            .filter(|(_, s)| s.device == device && !s.internal && !s.destroyed)
            .map(|(id, _)| *id)
            .collect();
        for id in streams {
            state.orphans.insert(id);
            if let Some(s) = state.streams.get_mut(&id) {
                s.destroyed = true;
                if s.completed == s.enqueued {
                    state.streams.remove(&id);
                }
            }
        }
        drop(state);
        self.signal();
    }

    /// Refuse, as a misuse, a handle its context's teardown freed.
    pub(crate) fn context_alive(&self, handle: u64) -> Outcome<()> {
        if self.lock().orphans.contains(&handle) {
            count_misuse();
            return Err(Fault::ContextDestroyed);
        }
        Ok(())
    }

    /// The event the calling thread recorded last.
    pub(crate) fn last_recorded(&self) -> u64 {
        let me = std::thread::current().id();
        self.lock().last_recorded.get(&me).copied().unwrap_or(0)
    }

    /// Swap the calling thread's capture interaction mode with `*mode`.
    pub(crate) fn exchange_capture_mode(mode: &mut u32) -> Outcome<()> {
        if *mode > CAPTURE_MODE_RELAXED {
            return Err(Fault::InvalidValue);
        }
        *mode = CAPTURE_MODE.with(|m| m.replace(*mode));
        Ok(())
    }

    /// Calls prohibited by the thread's capture interaction mode, as the
    /// CUDA driver API documents `cuThreadExchangeStreamCaptureMode` (HIP
    /// mirrors it): queries and synchronizations, which a capture cannot
    /// record. GLOBAL: prohibited while this thread captures in a mode
    /// other than RELAXED, or any other thread captures in GLOBAL mode;
    /// THREAD_LOCAL: only this thread's own capture counts; RELAXED: never.
    /// A prohibited call fails, invalidates the captures that prohibited
    /// it (their end fails), and is counted.
    fn capture_permits(&self, state: &mut State) -> Outcome<()> {
        let mode = CAPTURE_MODE.with(std::cell::Cell::get);
        if mode == CAPTURE_MODE_RELAXED || state.captures.is_empty() {
            return Ok(());
        }
        let me = std::thread::current().id();
        let against: Vec<u64> = state
            .captures
            .iter()
            .filter(|(_, c)| {
                if c.thread == me {
                    c.mode != CAPTURE_MODE_RELAXED
                } else {
                    mode == CAPTURE_MODE_GLOBAL && c.mode == CAPTURE_MODE_GLOBAL
                }
            })
            .map(|(id, _)| *id)
            .collect();
        if against.is_empty() {
            return Ok(());
        }
        self.broke(state, against);
        Err(Fault::CaptureUnsupported)
    }

    /// Refuse a memory allocation or release where the thread's capture
    /// interaction mode prohibits it: the CUDA programming guide counts
    /// them among the "potentially unsafe" calls (rule "alloc/free in
    /// capture" in the crate's rules).
    fn memory_call_permitted(&self, state: &mut State) -> Outcome<()> {
        self.capture_permits(state)
    }

    /// Map each device's streams made from now on onto `queues` hardware
    /// queues, in turn, as CUDA (`CUDA_DEVICE_MAX_CONNECTIONS`, 8) and ROCm
    /// (`GPU_MAX_HW_QUEUES`, 4) do: streams sharing one wait for each
    /// other's work. 0: one queue per stream, the default.
    pub(crate) fn set_hw_queues(&self, queues: usize) {
        let mut state = self.lock();
        state.hw_queues = queues;
        state.streams_made.clear();
    }

    /// Calls a capture did not allow, since the start.
    pub(crate) fn capture_violations(&self) -> u64 {
        self.capture_violations.load(Ordering::Relaxed)
    }

    /// clr's `hipEventDestroy` and `hipStreamWaitEvent_common`: the stream
    /// of the event's last record is checked (`hip::isValid`) and, if
    /// valid, used, with no lock held in between. With a gap set
    /// ([`clock::check_to_use_ns`]) the engine's lock is let go for up to
    /// that long between the two (until a destroy of the stream begins),
    /// and a destroy of the stream that began meanwhile is a counted
    /// misuse: clr would use a stream it frees.
    fn checked_then_used<'a>(
        &'a self,
        state: MutexGuard<'a, State>,
        recorded_on: Option<u64>,
    ) -> MutexGuard<'a, State> {
        let gap = clock::check_to_use_ns();
        let valid = |state: &State| {
            recorded_on
                .and_then(|s| state.streams.get(&s))
                .is_some_and(|s| !s.destroyed)
        };
        if gap == 0 || !valid(&state) {
            return state;
        }
        drop(state);
        clock::entered_gap();
        // The gap, cut short by a destroy of the stream begun in it.
        let until = std::time::Instant::now() + Duration::from_nanos(gap);
        let mut state = self.lock();
        while valid(&state) && std::time::Instant::now() < until {
            drop(state);
            std::thread::sleep(Duration::from_millis(1));
            state = self.lock();
        }
        if !valid(&state) {
            // What clr does then is undefined; the call goes on here.
            count_misuse();
        }
        state
    }

    /// ROCm's rule before 7.2 (clr `ihipEventQuery`, `hipEventSynchronize`):
    /// asking an event whose last record's stream captures now fails with
    /// 907 and invalidates that capture, whatever was recorded and in any
    /// interaction mode. Counted as a capture violation.
    /// A wait (`hipEventSynchronize`) is also refused with 900 while that
    /// capture is invalidated but not yet ended (`StreamCaptureOngoing`).
    /// An event whose last record's stream was destroyed is a counted
    /// misuse: clr reads that stream, freed, on every version from 6.0.
    fn asked_of_a_capturing_stream(
        &self,
        state: &mut State,
        event: u64,
        wait: bool,
    ) -> Outcome<()> {
        let ev = live_event(state, event)?;
        // clr reads the last record's stream with no validity check
        // (`e->GetCaptureStream()`): once `hipStreamDestroy` released it,
        // that read is of freed memory (ROCm/clr#157, ROCm/ROCm#4670).
        if let Some(stream) = ev.recorded_on
            && state.streams.get(&stream).is_none_or(|s| s.destroyed)
        {
            return Err(misuse());
        }
        match ev
            .recorded_on
            .and_then(|s| state.streams.get(&s))
            .map(|s| s.capture)
        {
            Some(Capture::Active(id)) => {
                self.broke(state, [id]);
                Err(Fault::CapturedEvent)
            }
            Some(Capture::Invalidated(_)) if wait => Err(Fault::CaptureUnsupported),
            _ => Ok(()),
        }
    }

    /// A query or wait of an event recorded inside a capture: 907, and, as
    /// "any operation [...] invalid during capture" does (CUDA programming
    /// guide, 'Invalidation'), the capture invalidated if it goes on.
    fn refuse_captured(&self, state: &mut State, event: u64) -> Outcome<()> {
        if let Some((id, _)) = live_event(state, event)?.captured {
            self.broke(state, [id]);
            return Err(Fault::CapturedEvent);
        }
        Ok(())
    }

    /// Invalidate the captures `ids`, on every stream in them, for a call
    /// they did not allow (their end fails), and count the call.
    fn broke(&self, state: &mut State, ids: impl IntoIterator<Item = u64>) {
        for id in ids {
            for s in state.streams.values_mut() {
                if s.capture == Capture::Active(id) {
                    s.capture = Capture::Invalidated(id);
                }
            }
        }
        self.capture_violations.fetch_add(1, Ordering::Relaxed);
    }

    /// `clr`: with ROCm's rule for an event whose stream captures now.
    pub(crate) fn event_query(&self, event: u64, clr: bool) -> Outcome<()> {
        let mut state = self.lock();
        if clr {
            self.asked_of_a_capturing_stream(&mut state, event, false)?;
        }
        self.capture_permits(&mut state)?;
        self.refuse_captured(&mut state, event)?;
        let ev = live_event(&state, event)?;
        if ev.reached >= ev.recorded {
            Ok(())
        } else {
            Err(Fault::NotReady)
        }
    }

    /// Wait until the device reaches the event's last record. As the
    /// drivers document: an event created for blocking synchronization
    /// sleeps and wakes a configured latency late; any other spins, burning
    /// the calling thread's core for the whole wait.
    pub(crate) fn event_synchronize(&self, event: u64, clr: bool) -> Outcome<()> {
        let mut state = self.lock();
        if clr {
            self.asked_of_a_capturing_stream(&mut state, event, true)?;
        }
        self.capture_permits(&mut state)?;
        self.refuse_captured(&mut state, event)?;
        let ev = live_event(&state, event)?;
        let (target, blocking) = (ev.recorded, ev.blocking);
        let reached = |s: &State| s.events.get(&event).is_none_or(|e| e.reached >= target);
        if blocking {
            let state = self.wait_while(state, |s| !reached(s));
            drop(state);
            let late = clock::blocking_wake_latency();
            if late > 0 {
                std::thread::sleep(Duration::from_nanos(late));
            }
            return Ok(());
        }
        drop(state);
        loop {
            let seen = self.progress.load(Ordering::Acquire);
            if reached(&self.lock()) {
                return Ok(());
            }
            // Spin, as a default event's wait does, watching for a change
            // rather than taking the lock; now and then yield, so that on a
            // small machine the device's own threads still run.
            let mut spins = 0u32;
            while self.progress.load(Ordering::Acquire) == seen {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(4096) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// Milliseconds from `start` to `end`, quantised to `resolution_ns`.
    pub(crate) fn event_elapsed(&self, start: u64, end: u64, resolution_ns: u64) -> Outcome<f32> {
        let state = self.lock();
        let a = live_event(&state, start)?;
        let b = live_event(&state, end)?;
        if !a.timing || !b.timing || a.device != b.device {
            return Err(Fault::InvalidHandle);
        }
        if a.captured.is_some() || b.captured.is_some() {
            return Err(Fault::CapturedEvent);
        }
        if a.recorded == 0 || b.recorded == 0 {
            return Err(Fault::InvalidHandle);
        }
        if a.reached < a.recorded || b.reached < b.recorded {
            return Err(Fault::NotReady);
        }
        let steps = (b.stamp - a.stamp) / i128::from(resolution_ns.max(1));
        #[allow(clippy::cast_precision_loss)]
        let ms = (steps * i128::from(resolution_ns)) as f64 / 1e6;
        #[allow(clippy::cast_possible_truncation)]
        Ok(ms as f32)
    }

    /// Host-clock nanoseconds at which the device reached `event`.
    pub(crate) fn event_truth(&self, event: u64) -> Outcome<u64> {
        let state = self.lock();
        let ev = state.events.get(&event).ok_or(Fault::InvalidHandle)?;
        if ev.recorded == 0 || ev.reached < ev.recorded {
            return Err(Fault::NotReady);
        }
        Ok(ev.host_stamp)
    }

    pub(crate) fn stream_create(&self, device: usize, blocking: bool) -> u64 {
        let mut state = self.lock();
        spawn_stream(&mut state, device, blocking, false)
    }

    /// Release a stream; work already queued still runs, as the drivers
    /// document, and its worker exits once the queue is empty. `clr`: as
    /// ROCm's runtime (`hipStreamDestroy`, `HostQueue::terminate`), first
    /// wait until that work is done, and end a capture the stream is in.
    pub(crate) fn stream_destroy(&self, stream: u64, clr: bool) -> Outcome<()> {
        let mut state = self.lock();
        let s = live_stream(&mut state, stream)?;
        if s.internal {
            return Err(misuse());
        }
        if clr {
            if let Capture::Active(id) | Capture::Invalidated(id) = s.capture {
                s.capture = Capture::None;
                if state.captures.get(&id).is_some_and(|c| c.origin == stream) {
                    end_capture(&mut state, id);
                } else if let Some(c) = state.captures.get_mut(&id) {
                    c.unjoined.remove(&stream);
                }
            }
            // clr takes the stream out of its device's set before it waits
            // (`hip::Stream::Destroy`: `Device::RemoveStream`, then the
            // release that waits): from here `hip::isValid` says no, and
            // the handle is not usable.
            let Some(s) = state.streams.get_mut(&stream) else {
                return Err(misuse());
            };
            s.destroyed = true;
            let target = s.enqueued;
            if s.completed == target {
                state.streams.remove(&stream);
            }
            // Its worker removes it once drained.
            let state = self.wait_while(state, |s| {
                s.streams.get(&stream).is_some_and(|s| s.completed < target)
            });
            drop(state);
            self.signal();
            return Ok(());
        }
        let s = live_stream(&mut state, stream)?;
        if s.completed == s.enqueued {
            state.streams.remove(&stream);
        } else {
            // Its worker removes it once drained.
            s.destroyed = true;
        }
        drop(state);
        self.signal();
        Ok(())
    }

    pub(crate) fn stream_wait_event(
        &self,
        stream: StreamRef,
        event: u64,
        rules: WaitRules,
    ) -> Outcome<()> {
        let mut state = self.lock();
        let recorded_on = live_event(&state, event)?.recorded_on;
        if let WaitRules::Clr = rules {
            // The waiter first, as clr checks it first.
            lookup(&mut state, stream)?;
            // clr takes an event whose last record's stream is no longer
            // valid (destroyed, or being destroyed) as reached, and adds no
            // wait (`hipStreamWaitEvent_common`).
            if recorded_on.is_some_and(|s| state.streams.get(&s).is_none_or(|s| s.destroyed)) {
                return Ok(());
            }
            state = self.checked_then_used(state, recorded_on);
        }
        let stream = resolve(&mut state, stream)?;
        let capture = state
            .streams
            .get(&stream)
            .ok_or(Fault::InvalidHandle)?
            .capture;
        let ev = live_event(&state, event)?;
        if let Some((id, recorder)) = ev.captured {
            return fork_or_join(&mut state, stream, capture, id, recorder);
        }
        let recorder_captures = ev
            .recorded_on
            .and_then(|s| state.streams.get(&s))
            .is_some_and(|s| matches!(s.capture, Capture::Active(_)));
        let (recorded, point, due) = (ev.recorded, ev.record_point, ev.due);
        match (rules, capture) {
            (WaitRules::Clr, _) if recorder_captures => return Err(Fault::CaptureIsolation),
            // Unverified where no work of another stream is involved (an
            // event never recorded, or recorded on the waiting stream):
            // left alone there.
            (WaitRules::Cuda { external: false }, Capture::Active(id))
                if recorded != 0 && point.0 != stream =>
            {
                self.broke(&mut state, [id]);
                return Err(Fault::CaptureIsolation);
            }
            _ => {}
        }
        match capture {
            // A graph node, not a wait.
            Capture::Active(_) => return Ok(()),
            Capture::Invalidated(_) => return Err(Fault::CaptureInvalidated),
            Capture::None => {}
        }
        // Waiting on a never-recorded event completes at once.
        if recorded == 0 {
            return Ok(());
        }
        let at = start_time(&state, stream).max(due);
        enqueue(&mut state, stream, at, Op::WaitStreams(vec![point]))
    }

    pub(crate) fn stream_synchronize(&self, stream: StreamRef) -> Outcome<()> {
        let mut state = self.lock();
        self.capture_permits(&mut state)?;
        let stream = lookup(&mut state, stream)?;
        let s = state.streams.get_mut(&stream).ok_or(Fault::InvalidHandle)?;
        match s.capture {
            Capture::Active(id) => {
                // As the drivers do: the illegal call also breaks the
                // capture, on every stream in it.
                self.broke(&mut state, [id]);
                return Err(Fault::CaptureUnsupported);
            }
            Capture::Invalidated(_) => return Err(Fault::CaptureInvalidated),
            Capture::None => {}
        }
        let target = s.enqueued;
        let _state = self.wait_while(state, |s| {
            s.streams.get(&stream).is_some_and(|s| s.completed < target)
        });
        Ok(())
    }

    /// Every stream of `device`, drained. `in_no_capture`: refused with 900
    /// while any stream of `of_device` (every device: `None`) captures, in
    /// any mode, and those captures invalidated, as `cuCtxSynchronize` lists
    /// 900 and clr's `CHECK_SUPPORTED_DURING_CAPTURE` does for
    /// `hipDeviceSynchronize`; otherwise only the mode rule.
    pub(crate) fn device_synchronize(
        &self,
        device: usize,
        in_no_capture: Option<Option<usize>>,
    ) -> Outcome<()> {
        let mut state = self.lock();
        if let Some(of_device) = in_no_capture {
            let capturing: HashSet<u64> = state
                .streams
                .values()
                .filter(|s| of_device.is_none_or(|d| d == s.device))
                .filter_map(|s| match s.capture {
                    // Until it ends, an invalidated capture still counts
                    // (clr: `g_allCapturingStreams`).
                    Capture::Active(id) | Capture::Invalidated(id) => Some(id),
                    Capture::None => None,
                })
                .collect();
            if !capturing.is_empty() {
                self.broke(&mut state, capturing);
                return Err(Fault::CaptureUnsupported);
            }
        }
        self.capture_permits(&mut state)?;
        let targets: Vec<(u64, u64)> = state
            .streams
            .iter()
            .filter(|(_, s)| s.device == device)
            .map(|(id, s)| (*id, s.enqueued))
            .collect();
        let _state = self.wait_while(state, |s| !streams_reached(s, &targets));
        Ok(())
    }

    /// 0: not capturing; 1: capturing; 2: capture invalidated.
    pub(crate) fn stream_capture_status(&self, stream: StreamRef) -> Outcome<u32> {
        let mut state = self.lock();
        let stream = lookup(&mut state, stream)?;
        let s = state.streams.get(&stream).ok_or(Fault::InvalidHandle)?;
        Ok(match s.capture {
            Capture::None => 0,
            Capture::Active(_) => 1,
            Capture::Invalidated(_) => 2,
        })
    }

    pub(crate) fn stream_begin_capture(&self, stream: u64, mode: u32) -> Outcome<()> {
        let mut state = self.lock();
        let s = live_stream(&mut state, stream)?;
        if s.internal {
            return Err(Fault::CaptureUnsupported);
        }
        if s.capture != Capture::None {
            return Err(Fault::InvalidValue);
        }
        let id = next_id(&mut state);
        if let Some(s) = state.streams.get_mut(&stream) {
            s.capture = Capture::Active(id);
        }
        state.captures.insert(
            id,
            Capturing {
                origin: stream,
                unjoined: HashSet::new(),
                thread: std::thread::current().id(),
                mode,
            },
        );
        Ok(())
    }

    /// Ends the capture `stream` began, on every stream forked into it;
    /// returns the graph it made. Fails, ending it all the same, while a
    /// forked stream has not joined back.
    /// `clr`: as ROCm's runtime, events recorded in the capture are asked
    /// as if it never happened, once it ends.
    pub(crate) fn stream_end_capture(&self, stream: u64, clr: bool) -> Outcome<u64> {
        let mut state = self.lock();
        let (Capture::Active(id) | Capture::Invalidated(id)) =
            live_stream(&mut state, stream)?.capture
        else {
            return Err(Fault::InvalidValue);
        };
        if state.captures.get(&id).is_some_and(|c| c.origin != stream) {
            return Err(Fault::CaptureUnmatched);
        }
        // "A capture sequence which is not in RELAXED mode must be ended on
        // the same thread" (`cuStreamBeginCapture`); clr checks the same.
        let me = std::thread::current().id();
        if state
            .captures
            .get(&id)
            .is_some_and(|c| c.mode != CAPTURE_MODE_RELAXED && c.thread != me)
        {
            return Err(Fault::CaptureWrongThread);
        }
        let invalidated = matches!(
            state.streams.get(&stream).map(|s| s.capture),
            Some(Capture::Invalidated(_))
        );
        let capture = end_capture(&mut state, id);
        if clr {
            // clr `Stream::EndCapture`: events recorded in the capture are
            // tied to no stream, and ask as before it.
            for ev in state.events.values_mut() {
                if ev.captured.is_some_and(|(c, _)| c == id) {
                    ev.captured = None;
                    ev.recorded_on = None;
                }
            }
        }
        if invalidated {
            return Err(Fault::CaptureInvalidated);
        }
        if capture.is_some_and(|c| !c.unjoined.is_empty()) {
            return Err(Fault::CaptureUnjoined);
        }
        let graph = next_id(&mut state);
        state.graphs.insert(graph);
        Ok(graph)
    }

    pub(crate) fn graph_destroy(&self, graph: u64) -> Outcome<()> {
        let mut state = self.lock();
        if state.graphs.remove(&graph) {
            Ok(())
        } else {
            misuse();
            Err(Fault::InvalidValue)
        }
    }

    pub(crate) fn mem_alloc(&self, device: usize, bytes: usize) -> Outcome<u64> {
        if bytes == 0 {
            return Err(Fault::InvalidValue);
        }
        let mut state = self.lock();
        self.memory_call_permitted(&mut state)?;
        // Device addresses are never host memory: nothing behind them is
        // touched, so they cost no host memory either.
        let base = next_id(&mut state) << 32;
        state.allocations.insert(base, (device, bytes as u64));
        Ok(base)
    }

    pub(crate) fn mem_free(&self, base: u64) -> Outcome<()> {
        let mut state = self.lock();
        self.memory_call_permitted(&mut state)?;
        if state.allocations.remove(&base).is_some() || free_host(&mut state, base) {
            Ok(())
        } else {
            misuse();
            Err(Fault::InvalidValue)
        }
    }

    /// Page-locked host memory of at least `bytes`, mapped for the devices;
    /// its address is the host's and the device's (unified addressing).
    ///
    /// `capture_checked`: whether the thread's capture mode may prohibit
    /// it (`cuMemHostAlloc`); clr's `hipExtMallocWithFlags` checks nothing.
    pub(crate) fn host_alloc(
        &self,
        bytes: usize,
        capture_checked: bool,
        mapped: bool,
    ) -> Outcome<u64> {
        if bytes == 0 {
            return Err(Fault::InvalidValue);
        }
        let mut state = self.lock();
        if capture_checked {
            self.memory_call_permitted(&mut state)?;
        }
        let words = (0..bytes.div_ceil(4)).map(|_| AtomicU32::new(0)).collect();
        let block = Arc::new(HostBlock { words, mapped });
        let address = block.words.as_ptr() as u64;
        state.host_blocks.insert(address, block);
        Ok(address)
    }

    /// Free host memory from [`host_alloc`](Self::host_alloc); a misuse for
    /// any other address. A stream still waiting on it is a misuse too: a
    /// real device would go on reading freed memory.
    pub(crate) fn host_free(&self, address: u64) -> Outcome<()> {
        let mut state = self.lock();
        self.memory_call_permitted(&mut state)?;
        if free_host(&mut state, address) {
            Ok(())
        } else {
            Err(misuse())
        }
    }

    /// Write `value` to the host word at `address`, as the driver itself
    /// initialises memory it hands out.
    pub(crate) fn host_store(&self, address: u64, value: u32) -> Outcome<()> {
        let state = self.lock();
        let (block, word) = host_word(&state, address)?;
        block.words[word].store(value, Ordering::Release);
        Ok(())
    }

    /// The device address of host memory at `address`: the same, when it
    /// lies inside a mapped block.
    /// The device's address of mapped host memory: the same, as with
    /// unified addressing; an unmapped block has none.
    pub(crate) fn host_device_pointer(&self, address: u64) -> Outcome<u64> {
        let state = self.lock();
        let (block, _) = host_word(&state, address)?;
        if !block.mapped {
            return Err(Fault::InvalidValue);
        }
        Ok(address)
    }

    /// Make `stream` wait until `test` holds of the 32-bit value at
    /// `address`, which must lie in mapped host memory.
    pub(crate) fn stream_wait_value(
        &self,
        stream: StreamRef,
        address: u64,
        test: ValueTest,
    ) -> Outcome<()> {
        if !clock::stream_mem_ops() {
            return Err(Fault::NotSupported);
        }
        let mut state = self.lock();
        let (block, word) = host_word(&state, address)?;
        let stream = resolve(&mut state, stream)?;
        match state
            .streams
            .get(&stream)
            .ok_or(Fault::InvalidHandle)?
            .capture
        {
            Capture::Active(_) => return Ok(()),
            Capture::Invalidated(_) => return Err(Fault::CaptureInvalidated),
            Capture::None => {}
        }
        let at = start_time(&state, stream);
        let id = next_id(&mut state);
        enqueue(
            &mut state,
            stream,
            at,
            Op::WaitValue {
                id,
                block: Arc::clone(&block),
                word,
                test,
                at,
            },
        )?;
        let shared = state
            .streams
            .get(&stream)
            .and_then(|s| s.hw_queue.map(|q| (s.device, q)));
        state.value_waits.insert(
            id,
            ValueWait {
                block,
                word,
                test,
                stream,
                shared,
            },
        );
        Ok(())
    }

    /// Stream waits on a value, queued and not passed, whose value does
    /// not let them pass now: streams held by the host.
    pub(crate) fn blocked_value_waits(&self) -> u64 {
        let state = self.lock();
        state
            .value_waits
            .values()
            .filter(|w| !w.test.holds(w.block.words[w.word].load(Ordering::Acquire)))
            .count() as u64
    }

    /// What value waits have cost since the last reset.
    pub(crate) fn held(&self) -> Held {
        self.lock().held
    }

    pub(crate) fn reset_held(&self) {
        self.lock().held = Held::default();
    }

    /// Load a module into `device`'s context; the thread's capture mode
    /// may prohibit it, as it may an allocation.
    pub(crate) fn module_load(&self, device: usize) -> Outcome<u64> {
        let mut state = self.lock();
        self.memory_call_permitted(&mut state)?;
        let id = next_id(&mut state);
        state.modules.insert(id, device);
        Ok(id)
    }

    /// Unload a module: its functions go with it.
    pub(crate) fn module_unload(&self, module: u64) -> Outcome<()> {
        let mut state = self.lock();
        state.modules.remove(&module).ok_or_else(misuse)?;
        state.functions.retain(|_, m| *m != module);
        Ok(())
    }

    /// A function of a live module, with the module's device.
    pub(crate) fn module_function(&self, module: u64) -> Outcome<u64> {
        let mut state = self.lock();
        if !state.modules.contains_key(&module) {
            return Err(misuse());
        }
        let id = next_id(&mut state);
        state.functions.insert(id, module);
        Ok(id)
    }

    /// Drop a function handle made for a name the module lacks.
    pub(crate) fn function_forget(&self, function: u64) {
        self.lock().functions.remove(&function);
    }

    /// Launch the spin kernel `function` on `stream` from `device`'s
    /// context: it occupies the stream `ns`, then writes its start and end
    /// device-clock stamps to the 16 bytes at `out`, which must lie in
    /// mapped host memory (the one memory this driver backs).
    pub(crate) fn launch_spin(
        &self,
        function: u64,
        device: usize,
        stream: StreamRef,
        ns: u64,
        out: u64,
    ) -> Outcome<()> {
        let mut state = self.lock();
        let module = *state.functions.get(&function).ok_or_else(misuse)?;
        if state.modules.get(&module) != Some(&device) {
            return Err(Fault::InvalidContext);
        }
        let (block, word) = host_word(&state, out)?;
        if !block.mapped || !out.is_multiple_of(8) || word + 4 > block.words.len() {
            return Err(Fault::InvalidValue);
        }
        let stream = resolve(&mut state, stream)?;
        if state.streams.get(&stream).map(|s| s.device) != Some(device) {
            return Err(Fault::InvalidContext);
        }
        busy(&mut state, stream, ns, Some((block, word)))
    }

    /// Fill `bytes` at `address`: it takes `bytes` over the configured
    /// bandwidth once the stream reaches it.
    pub(crate) fn memset_async(
        &self,
        address: u64,
        bytes: usize,
        stream: StreamRef,
    ) -> Outcome<()> {
        let mut state = self.lock();
        let stream = resolve(&mut state, stream)?;
        let inside = state
            .allocations
            .iter()
            .any(|(base, (_, size))| address >= *base && address - base + bytes as u64 <= *size);
        if !inside {
            return Err(Fault::InvalidValue);
        }
        busy(&mut state, stream, clock::transfer_time(bytes), None)
    }
}

/// Queue device work on `stream`, `length` ns from when the stream
/// reaches it; in a capture, a graph node that runs nothing.
fn busy(
    state: &mut State,
    stream: u64,
    length: u64,
    stamps: Option<(Arc<HostBlock>, usize)>,
) -> Outcome<()> {
    match state
        .streams
        .get(&stream)
        .ok_or(Fault::InvalidHandle)?
        .capture
    {
        Capture::Active(_) => Ok(()),
        Capture::Invalidated(_) => Err(Fault::CaptureInvalidated),
        Capture::None => {
            let start = start_time(state, stream);
            let until = start.saturating_add(length);
            enqueue(
                state,
                stream,
                until,
                Op::Busy {
                    until,
                    length: until - start,
                    stamps,
                },
            )
        }
    }
}

/// Whether `address` was a mapped block, now freed.
fn free_host(state: &mut State, address: u64) -> bool {
    match state.host_blocks.remove(&address) {
        Some(block) => {
            if Arc::strong_count(&block) > 1 {
                // A stream's queued wait holds it: counted, and kept alive
                // for that wait, which a real device would not do.
                misuse();
            }
            true
        }
        None => false,
    }
}

/// The block and 32-bit word `address` names; a 4-byte aligned address
/// inside a mapped block.
fn host_word(state: &State, address: u64) -> Outcome<(Arc<HostBlock>, usize)> {
    state
        .host_blocks
        .iter()
        .find_map(|(base, block)| {
            let offset = address.checked_sub(*base)?;
            let word = usize::try_from(offset / 4).ok()?;
            (offset % 4 == 0 && word < block.words.len()).then(|| (Arc::clone(block), word))
        })
        .ok_or(Fault::InvalidValue)
}

/// End capture `id` on every stream in it, and forget it.
fn end_capture(state: &mut State, id: u64) -> Option<Capturing> {
    for s in state.streams.values_mut() {
        if matches!(s.capture, Capture::Active(c) | Capture::Invalidated(c) if c == id) {
            s.capture = Capture::None;
        }
    }
    state.captures.remove(&id)
}

fn next_id(state: &mut State) -> u64 {
    state.next_id += 1;
    state.next_id
}

/// `stream` waits on an event recorded in capture `id` by `recorder`: as the
/// CUDA and HIP documentation describe fork and join, a stream outside any
/// capture joins it (forked), and a stream in it joins the recorder's
/// branch back. A wait across two captures is refused.
fn fork_or_join(
    state: &mut State,
    stream: u64,
    capture: Capture,
    id: u64,
    recorder: u64,
) -> Outcome<()> {
    let Some(capturing) = state.captures.get_mut(&id) else {
        // The capture ended: the event is a node of a finished graph.
        return Err(Fault::CapturedEvent);
    };
    match capture {
        Capture::None => {
            capturing.unjoined.insert(stream);
            if let Some(s) = state.streams.get_mut(&stream) {
                s.capture = Capture::Active(id);
            }
            Ok(())
        }
        Capture::Active(own) if own == id => {
            if recorder != stream {
                capturing.unjoined.remove(&recorder);
            }
            Ok(())
        }
        Capture::Invalidated(own) if own == id => Err(Fault::CaptureInvalidated),
        Capture::Active(_) | Capture::Invalidated(_) => Err(Fault::CaptureIsolation),
    }
}

/// A live event, or a counted misuse.
fn live_event(state: &State, event: u64) -> Outcome<&Event> {
    state.events.get(&event).ok_or_else(misuse)
}

/// A live stream the caller made, or a counted misuse.
fn live_stream(state: &mut State, stream: u64) -> Outcome<&mut Stream> {
    state
        .streams
        .get_mut(&stream)
        .filter(|s| !s.destroyed)
        .ok_or_else(misuse)
}

/// When an operation queued now on `stream` starts on the device: once the
/// stream's earlier work is done, and not before the launch latency.
fn start_time(state: &State, stream: u64) -> u64 {
    let reached = clock::host_now_ns().saturating_add(clock::launch_latency());
    state.streams.get(&stream).map_or(reached, |s| {
        let shared = s
            .hw_queue
            .and_then(|q| state.hw_schedule.get(&(s.device, q)))
            .copied()
            .unwrap_or(0);
        s.schedule.max(shared).max(reached)
    })
}

/// The stream an operation is queued on, after the implicit synchronization
/// the legacy default stream imposes: work on the null stream first waits
/// for the work queued so far on the device's blocking streams, and work on
/// a blocking stream for the work queued so far on the null stream.
fn resolve(state: &mut State, stream: StreamRef) -> Outcome<u64> {
    let id = lookup(state, stream)?;
    let Some(s) = state.streams.get(&id) else {
        return Err(misuse());
    };
    let (device, blocking) = (s.device, s.blocking);
    let null = state.null_streams.get(&device).copied();
    let is_null = null == Some(id);
    if !is_null && !blocking {
        return Ok(id);
    }
    let targets: Vec<(u64, u64)> = state
        .streams
        .iter()
        .filter(|(other, o)| {
            **other != id
                && o.device == device
                && o.completed < o.enqueued
                && if is_null {
                    o.blocking
                } else {
                    null == Some(**other)
                }
        })
        .map(|(other, o)| (*other, o.enqueued))
        .collect();
    if !targets.is_empty() {
        let due = targets
            .iter()
            .filter_map(|(other, _)| state.streams.get(other).map(|o| o.schedule))
            .max()
            .unwrap_or(0);
        enqueue(state, id, due, Op::WaitStreams(targets))?;
    }
    Ok(id)
}

/// The stream a call is about, made on first use for the default streams;
/// a misuse for a stream that is not live.
fn lookup(state: &mut State, stream: StreamRef) -> Outcome<u64> {
    match stream {
        StreamRef::Created(id) => live_stream(state, id).map(|_| id),
        StreamRef::Null { device } => Ok(match state.null_streams.get(&device) {
            Some(id) => *id,
            None => {
                let id = spawn_stream(state, device, true, true);
                state.null_streams.insert(device, id);
                id
            }
        }),
        StreamRef::PerThread { device } => {
            let key = (std::thread::current().id(), device);
            Ok(match state.per_thread.get(&key) {
                Some(id) => *id,
                None => {
                    // Blocking: it synchronizes with the legacy stream.
                    let id = spawn_stream(state, device, true, true);
                    state.per_thread.insert(key, id);
                    id
                }
            })
        }
    }
}

/// Queue `op` on `stream`, whose schedule then runs at least to `done`.
/// Where the stream shares a hardware queue, `op` also waits for the value
/// waits other streams queued there before it: the queue runs in order.
fn enqueue(state: &mut State, stream: u64, done: u64, op: Op) -> Outcome<()> {
    let s = state.streams.get(&stream).ok_or(Fault::InvalidHandle)?;
    let shared = s.hw_queue.map(|q| (s.device, q));
    let behind: Vec<u64> = match shared {
        Some(_) => state
            .value_waits
            .iter()
            .filter(|(_, w)| w.shared == shared && w.stream != stream)
            .map(|(id, _)| *id)
            .collect(),
        None => Vec::new(),
    };
    let s = state.streams.get_mut(&stream).ok_or(Fault::InvalidHandle)?;
    s.queue
        .send((op, behind))
        .map_err(|_| Fault::InvalidHandle)?;
    s.schedule = s.schedule.max(done);
    s.enqueued += 1;
    if let Some(q) = s.hw_queue {
        let shared = state.hw_schedule.entry((s.device, q)).or_insert(0);
        *shared = (*shared).max(done);
    }
    Ok(())
}

fn streams_reached(state: &State, targets: &[(u64, u64)]) -> bool {
    targets
        .iter()
        .all(|(id, count)| state.streams.get(id).is_none_or(|s| s.completed >= *count))
}

fn spawn_stream(state: &mut State, device: usize, blocking: bool, internal: bool) -> u64 {
    let id = next_id(state);
    let (queue, ops) = channel::<(Op, Vec<u64>)>();
    let made = state.streams_made.entry(device).or_insert(0);
    let hw_queue = (state.hw_queues > 0).then(|| *made % state.hw_queues);
    *made += 1;
    state.streams.insert(
        id,
        Stream {
            device,
            blocking,
            internal,
            queue,
            hw_queue,
            schedule: 0,
            enqueued: 0,
            completed: 0,
            capture: Capture::None,
            destroyed: false,
        },
    );
    let worker = move || {
        // When the last wait on a value let the stream go on: work queued
        // behind it cannot have run before, whatever its schedule said.
        let mut released = 0;
        for (op, behind) in ops {
            if !behind.is_empty() {
                released = released.max(behind_waits(&op, &behind));
            }
            run(id, op, &mut released);
        }
    };
    if std::thread::Builder::new()
        .name(format!("soft-stream-{id:x}"))
        .spawn(worker)
        .is_err()
    {
        // No worker: the stream can take no work. Its queue is closed, so
        // every enqueue fails with an invalid handle rather than hanging.
        if let Some(s) = state.streams.get_mut(&id) {
            let (closed, _) = channel();
            s.queue = closed;
        }
    }
    id
}

/// Hold an operation until the value waits it was queued behind, on its
/// hardware queue, have passed; counts the delay, and returns when they
/// let it go: when the last of them passed, plus a device's latency in
/// going on, as a GPU's in-order queue does, however late this thread
/// wakes.
///
/// The hold counted is the wait's: from the later of the operation's start
/// and its wait's worker getting there (the host can open a gate only once
/// it sees the stream at it) to the release. What this thread's waking late
/// and that worker's getting there late added is the driver's own, counted
/// apart.
fn behind_waits(op: &Op, behind: &[u64]) -> u64 {
    let engine = &*ENGINE;
    let state = engine.lock();
    let mut state = engine.wait_while(state, |s| {
        behind.iter().any(|id| s.value_waits.contains_key(id))
    });
    let latency = clock::wait_value_latency();
    let woke = clock::host_now_ns().saturating_add(latency);
    let (mut arrived, mut passed) = (None::<u64>, None::<u64>);
    for p in state.passed.iter().filter(|p| behind.contains(&p.id)) {
        arrived = Some(arrived.map_or(p.arrived, |a| a.max(p.arrived)));
        passed = Some(passed.map_or(p.passed, |a| a.max(p.passed)));
    }
    // A wait no longer remembered: released as this thread woke.
    let release = passed.map_or(woke, |p| p.saturating_add(latency).min(woke));
    let start = match op {
        Op::Busy { until, length, .. } => Some(until - length),
        Op::Record { at, .. } | Op::WaitValue { at, .. } => Some(*at),
        Op::WaitStreams(_) => None,
    };
    if let Some(start) = start
        && woke > start
    {
        let from = start.max(arrived.unwrap_or(start));
        let delay = release.saturating_sub(from);
        let late = (woke - start).saturating_sub(delay);
        let held = &mut state.held;
        if delay > 0 {
            held.delayed += 1;
            held.delayed_ns += delay;
            held.delayed_max_ns = held.delayed_max_ns.max(delay);
        }
        held.driver_late_ns += late;
        held.driver_late_max_ns = held.driver_late_max_ns.max(late);
    }
    release
}

/// The device reached `ev`'s record of `generation` at host time `at`.
fn stamp(ev: &mut Event, generation: u64, at: u64) {
    if ev.reached < generation {
        ev.stamp = clock::device_at(at);
        ev.host_stamp = at;
        ev.reached = generation;
    }
}

/// One operation, on the stream's worker thread; `released` is when the
/// stream's last wait on a value ended.
fn run(stream: u64, op: Op, released: &mut u64) {
    let engine = &*ENGINE;
    match op {
        Op::Busy {
            until,
            length,
            stamps,
        } => {
            // Work held past its start runs its full length after; what
            // follows on the stream starts no earlier than its end.
            let end = until.max(released.saturating_add(length));
            busy_until(end);
            *released = (*released).max(end);
            if let Some((block, word)) = stamps {
                // `%globaltimer` at the kernel's first and last read.
                for (at, host) in [(word, end - length), (word + 2, end)] {
                    let stamp = u64::try_from(clock::device_at(host)).unwrap_or(0);
                    #[allow(clippy::cast_possible_truncation)] // the halves
                    {
                        block.words[at].store(stamp as u32, Ordering::Release);
                        block.words[at + 1].store((stamp >> 32) as u32, Ordering::Release);
                    }
                }
            }
        }
        Op::Record {
            event,
            generation,
            at,
        } => {
            let at = at.max(*released);
            busy_until(at);
            let mut state = engine.lock();
            if let Some(ev) = state.events.get_mut(&event) {
                stamp(ev, generation, at);
            }
        }
        Op::WaitValue {
            id,
            block,
            word,
            test,
            at,
        } => {
            let reached = at.max(*released);
            busy_until(reached);
            let arrived = clock::host_now_ns();
            let cell = &block.words[word];
            // The last look that found the wait shut: the host wrote the
            // value between it and the look that passed.
            let mut shut_at = None;
            let passed = loop {
                let looked = clock::host_now_ns();
                if test.holds(cell.load(Ordering::Acquire)) {
                    break looked;
                }
                shut_at = Some(looked);
                // Poll as a device polls host memory, yielding every time:
                // a device polls without taking a host core, and on a small
                // machine this thread may share one with the host thread
                // that writes the value.
                std::thread::yield_now();
            };
            *released = passed + clock::wait_value_latency();
            let mut state = engine.lock();
            state.value_waits.remove(&id);
            if state.passed.len() == PASSED_KEPT {
                state.passed.pop_front();
            }
            state.passed.push_back(Passed {
                id,
                arrived,
                passed,
            });
            // Held from when the host could first see the stream there.
            let held = passed.saturating_sub(reached.max(arrived));
            state.held.waits += 1;
            state.held.held_ns += held;
            state.held.held_max_ns = state.held.held_max_ns.max(held);
            let gap = shut_at.map_or(0, |shut| passed.saturating_sub(shut));
            state.held.look_gap_max_ns = state.held.look_gap_max_ns.max(gap);
        }
        Op::WaitStreams(targets) => {
            let state = engine.lock();
            drop(engine.wait_while(state, |s| !streams_reached(s, &targets)));
        }
    }
    let mut state = engine.lock();
    if let Some(s) = state.streams.get_mut(&stream) {
        s.completed += 1;
        if s.destroyed && s.completed == s.enqueued {
            state.streams.remove(&stream);
        }
    }
    drop(state);
    engine.signal();
}

/// Occupy the stream until host time `until`: sleep the bulk, spin the
/// tail, so that short work is not stretched by the scheduler's granularity.
fn busy_until(until: u64) {
    let left = until.saturating_sub(clock::host_now_ns());
    if left > 200_000 {
        std::thread::sleep(Duration::from_nanos(left - 200_000));
    }
    while clock::host_now_ns() < until {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream with work queued, whose worker is gone: every enqueue on it
    /// fails, as it does when the driver could not start the worker.
    fn busy_stream_without_a_worker(engine: &Engine) -> u64 {
        let stream = engine.stream_create(0, false);
        let mut state = engine.lock();
        let s = state.streams.get_mut(&stream).expect("just created");
        s.queue = channel().0;
        s.enqueued += 1;
        stream
    }

    #[test]
    fn a_record_that_could_not_be_queued_leaves_the_event_as_it_was() {
        let engine = &*ENGINE;
        let stream = busy_stream_without_a_worker(engine);
        let event = engine.event_create(0, true, false);

        let refused = engine.event_record(event, StreamRef::Created(stream));

        assert_eq!(refused, Err(Fault::InvalidHandle));
        // Never recorded, so complete: not waiting for a record that never comes.
        assert_eq!(engine.event_query(event, false), Ok(()));
        assert_ne!(engine.last_recorded(), event);
        engine.event_destroy(event, false).expect("live event");
        engine.lock().streams.remove(&stream);
    }
}
