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

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard, PoisonError};
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
    NotReady,
    CapturedEvent,
    CaptureUnsupported,
    CaptureInvalidated,
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
    /// Generation of the last record queued (0: never recorded).
    recorded: u64,
    /// Generation of the last record the device reached.
    reached: u64,
    /// Host-clock nanoseconds at which the last queued record falls due.
    due: u64,
    /// Device-clock stamp of the last reached record.
    stamp: i128,
    /// Host-clock nanoseconds at that stamp: the ground truth tests read.
    host_stamp: u64,
    /// Last recorded into a capturing stream: a graph node, not a timestamp.
    captured: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Capture {
    None,
    Active,
    Invalidated,
}

struct Stream {
    device: usize,
    /// Synchronizes with the legacy default stream (CUDA's blocking streams).
    blocking: bool,
    /// A per-device null stream, made on first use; not counted as live.
    internal: bool,
    queue: Sender<Op>,
    /// Host-clock nanoseconds at which the work queued so far is done.
    schedule: u64,
    enqueued: u64,
    completed: u64,
    capture: Capture,
}

/// An operation, with the host-clock nanoseconds at which it is done.
enum Op {
    Busy {
        until: u64,
    },
    Record {
        event: u64,
        generation: u64,
        at: u64,
    },
    WaitEvent {
        event: u64,
        generation: u64,
    },
    WaitStreams(Vec<(u64, u64)>),
}

#[derive(Default)]
struct State {
    next_id: u64,
    events: HashMap<u64, Event>,
    streams: HashMap<u64, Stream>,
    null_streams: HashMap<usize, u64>,
    /// Allocation base address to its size.
    allocations: HashMap<u64, (usize, u64)>,
    graphs: HashSet<u64>,
    bad_releases: u64,
    last_recorded: u64,
}

/// What the device holds now.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Live {
    pub(crate) events: u64,
    pub(crate) streams: u64,
    pub(crate) allocations: u64,
    pub(crate) graphs: u64,
    pub(crate) bad_releases: u64,
}

pub(crate) struct Engine {
    state: Mutex<State>,
    changed: Condvar,
}

pub(crate) static ENGINE: LazyLock<Engine> = LazyLock::new(|| Engine {
    state: Mutex::new(State {
        // Handles start away from zero and small integers, which the ABIs
        // give meanings of their own (the null and legacy streams).
        next_id: 0x1000,
        ..State::default()
    }),
    changed: Condvar::new(),
});

/// A stream argument: one the caller created, or the device's null stream.
#[derive(Clone, Copy)]
pub(crate) enum StreamRef {
    Created(u64),
    /// The null (legacy default) stream of a device; `waits_all` says whether
    /// a record there waits for every stream (HIP) or for blocking ones only
    /// (CUDA).
    Null {
        device: usize,
        waits_all: bool,
    },
}

impl Engine {
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
            streams: state.streams.values().filter(|s| !s.internal).count() as u64,
            allocations: state.allocations.len() as u64,
            graphs: state.graphs.len() as u64,
            bad_releases: state.bad_releases,
        }
    }

    pub(crate) fn event_create(&self, device: usize, timing: bool) -> u64 {
        let mut state = self.lock();
        let id = next_id(&mut state);
        state.events.insert(
            id,
            Event {
                device,
                timing,
                ..Event::default()
            },
        );
        id
    }

    /// Release an event now; a record still queued for it is skipped.
    pub(crate) fn event_destroy(&self, event: u64) -> Outcome<()> {
        let mut state = self.lock();
        if state.events.remove(&event).is_none() {
            state.bad_releases += 1;
            return Err(Fault::InvalidHandle);
        }
        drop(state);
        self.changed.notify_all();
        Ok(())
    }

    pub(crate) fn event_record(&self, event: u64, stream: StreamRef) -> Outcome<()> {
        let mut state = self.lock();
        let stream = resolve(&mut state, stream)?;
        let (device, capture) = {
            let s = state.streams.get(&stream).ok_or(Fault::InvalidHandle)?;
            (s.device, s.capture)
        };
        let ev = state.events.get_mut(&event).ok_or(Fault::InvalidHandle)?;
        if ev.device != device {
            return Err(Fault::InvalidHandle);
        }
        match capture {
            Capture::Active => {
                ev.captured = true;
                return Ok(());
            }
            Capture::Invalidated => return Err(Fault::CaptureInvalidated),
            Capture::None => {}
        }
        // The record counts only once it is queued: a failed enqueue must
        // not leave the event waiting for a record that never comes.
        let generation = ev.recorded + 1;
        let now = clock::host_now_ns();
        let (idle, at) = match state.streams.get(&stream) {
            Some(s) => (s.completed == s.enqueued, s.schedule.max(now)),
            None => return Err(Fault::InvalidHandle),
        };
        if !idle {
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
        }
        state.last_recorded = event;
        if let Some(ev) = state.events.get_mut(&event) {
            ev.captured = false;
            ev.recorded = generation;
            ev.due = at;
            if idle {
                // An idle stream reaches the event at once, as a device
                // front-end does within microseconds: no worker hand-off.
                stamp(ev, generation, at);
            }
        }
        drop(state);
        self.changed.notify_all();
        Ok(())
    }

    /// The device an event or stream was made on, if it is live.
    pub(crate) fn device_of(&self, handle: u64) -> Option<usize> {
        let state = self.lock();
        state
            .events
            .get(&handle)
            .map(|e| e.device)
            .or_else(|| state.streams.get(&handle).map(|s| s.device))
    }

    /// Count a misuse: a call on a handle of a torn-down context.
    pub(crate) fn note_misuse(&self) {
        self.lock().bad_releases += 1;
    }

    /// The event most recently recorded, by any stream.
    pub(crate) fn last_recorded(&self) -> u64 {
        self.lock().last_recorded
    }

    pub(crate) fn event_query(&self, event: u64) -> Outcome<()> {
        let state = self.lock();
        let ev = state.events.get(&event).ok_or(Fault::InvalidHandle)?;
        if ev.captured {
            Err(Fault::CapturedEvent)
        } else if ev.reached >= ev.recorded {
            Ok(())
        } else {
            Err(Fault::NotReady)
        }
    }

    pub(crate) fn event_synchronize(&self, event: u64) -> Outcome<()> {
        let state = self.lock();
        let ev = state.events.get(&event).ok_or(Fault::InvalidHandle)?;
        if ev.captured {
            return Err(Fault::CapturedEvent);
        }
        let target = ev.recorded;
        let _state = self.wait_while(state, |s| {
            s.events.get(&event).is_some_and(|e| e.reached < target)
        });
        Ok(())
    }

    /// Milliseconds from `start` to `end`, quantised to `resolution_ns`.
    pub(crate) fn event_elapsed(&self, start: u64, end: u64, resolution_ns: u64) -> Outcome<f32> {
        let state = self.lock();
        let a = state.events.get(&start).ok_or(Fault::InvalidHandle)?;
        let b = state.events.get(&end).ok_or(Fault::InvalidHandle)?;
        if !a.timing || !b.timing || a.device != b.device {
            return Err(Fault::InvalidHandle);
        }
        if a.captured || b.captured {
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
    /// document, and its worker exits once the queue is empty.
    pub(crate) fn stream_destroy(&self, stream: u64) -> Outcome<()> {
        let mut state = self.lock();
        match state.streams.get(&stream) {
            Some(s) if !s.internal => {
                state.streams.remove(&stream);
            }
            _ => {
                state.bad_releases += 1;
                return Err(Fault::InvalidHandle);
            }
        }
        drop(state);
        self.changed.notify_all();
        Ok(())
    }

    pub(crate) fn stream_wait_event(&self, stream: StreamRef, event: u64) -> Outcome<()> {
        let mut state = self.lock();
        let stream = resolve(&mut state, stream)?;
        let capture = state
            .streams
            .get(&stream)
            .ok_or(Fault::InvalidHandle)?
            .capture;
        let ev = state.events.get(&event).ok_or(Fault::InvalidHandle)?;
        match capture {
            // A graph node, not a wait.
            Capture::Active => return Ok(()),
            Capture::Invalidated => return Err(Fault::CaptureInvalidated),
            Capture::None => {}
        }
        if ev.captured {
            return Err(Fault::CapturedEvent);
        }
        // Waiting on a never-recorded event completes at once.
        if ev.recorded == 0 {
            return Ok(());
        }
        let (generation, due) = (ev.recorded, ev.due);
        enqueue(&mut state, stream, due, Op::WaitEvent { event, generation })
    }

    pub(crate) fn stream_synchronize(&self, stream: StreamRef) -> Outcome<()> {
        let mut state = self.lock();
        let stream = resolve(&mut state, stream)?;
        let s = state.streams.get_mut(&stream).ok_or(Fault::InvalidHandle)?;
        match s.capture {
            Capture::Active => {
                // As the drivers do: the illegal call also breaks the capture.
                s.capture = Capture::Invalidated;
                return Err(Fault::CaptureUnsupported);
            }
            Capture::Invalidated => return Err(Fault::CaptureInvalidated),
            Capture::None => {}
        }
        let target = s.enqueued;
        let _state = self.wait_while(state, |s| {
            s.streams.get(&stream).is_some_and(|s| s.completed < target)
        });
        Ok(())
    }

    /// Every stream of `device`, drained.
    pub(crate) fn device_synchronize(&self, device: usize) -> Outcome<()> {
        let state = self.lock();
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
        let stream = lookup(&mut state, stream);
        let s = state.streams.get(&stream).ok_or(Fault::InvalidHandle)?;
        Ok(match s.capture {
            Capture::None => 0,
            Capture::Active => 1,
            Capture::Invalidated => 2,
        })
    }

    pub(crate) fn stream_begin_capture(&self, stream: u64) -> Outcome<()> {
        let mut state = self.lock();
        let s = state.streams.get_mut(&stream).ok_or(Fault::InvalidHandle)?;
        if s.internal {
            return Err(Fault::CaptureUnsupported);
        }
        if s.capture != Capture::None {
            return Err(Fault::InvalidValue);
        }
        s.capture = Capture::Active;
        Ok(())
    }

    /// Ends the capture; returns the graph it made.
    pub(crate) fn stream_end_capture(&self, stream: u64) -> Outcome<u64> {
        let mut state = self.lock();
        let s = state.streams.get_mut(&stream).ok_or(Fault::InvalidHandle)?;
        let capture = std::mem::replace(&mut s.capture, Capture::None);
        match capture {
            Capture::None => Err(Fault::InvalidValue),
            Capture::Invalidated => Err(Fault::CaptureInvalidated),
            Capture::Active => {
                let graph = next_id(&mut state);
                state.graphs.insert(graph);
                Ok(graph)
            }
        }
    }

    pub(crate) fn graph_destroy(&self, graph: u64) -> Outcome<()> {
        let mut state = self.lock();
        if state.graphs.remove(&graph) {
            Ok(())
        } else {
            state.bad_releases += 1;
            Err(Fault::InvalidValue)
        }
    }

    pub(crate) fn mem_alloc(&self, device: usize, bytes: usize) -> Outcome<u64> {
        if bytes == 0 {
            return Err(Fault::InvalidValue);
        }
        let mut state = self.lock();
        // Device addresses are never host memory: nothing behind them is
        // touched, so they cost no host memory either.
        let base = next_id(&mut state) << 32;
        state.allocations.insert(base, (device, bytes as u64));
        Ok(base)
    }

    pub(crate) fn mem_free(&self, base: u64) -> Outcome<()> {
        let mut state = self.lock();
        if state.allocations.remove(&base).is_some() {
            Ok(())
        } else {
            state.bad_releases += 1;
            Err(Fault::InvalidValue)
        }
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
        let capture = state
            .streams
            .get(&stream)
            .ok_or(Fault::InvalidHandle)?
            .capture;
        match capture {
            Capture::Active => Ok(()),
            Capture::Invalidated => Err(Fault::CaptureInvalidated),
            Capture::None => {
                let now = clock::host_now_ns();
                let start = state
                    .streams
                    .get(&stream)
                    .map_or(now, |s| s.schedule.max(now));
                let until = start.saturating_add(clock::transfer_time(bytes));
                enqueue(&mut state, stream, until, Op::Busy { until })
            }
        }
    }
}

fn next_id(state: &mut State) -> u64 {
    state.next_id += 1;
    state.next_id
}

/// The stream an operation is queued on. The null stream is made on first
/// use and, as the legacy default stream does, first waits for the work
/// queued so far on the streams it synchronizes with.
fn resolve(state: &mut State, stream: StreamRef) -> Outcome<u64> {
    let id = lookup(state, stream);
    if let StreamRef::Null { device, waits_all } = stream {
        let targets: Vec<(u64, u64)> = state
            .streams
            .iter()
            .filter(|(other, s)| **other != id && s.device == device && (waits_all || s.blocking))
            .map(|(other, s)| (*other, s.enqueued))
            .collect();
        if !targets.is_empty() {
            let due = targets
                .iter()
                .filter_map(|(other, _)| state.streams.get(other).map(|s| s.schedule))
                .max()
                .unwrap_or(0);
            enqueue(state, id, due, Op::WaitStreams(targets))?;
        }
    }
    Ok(id)
}

/// The stream a query is about: as [`resolve`], but queues nothing.
fn lookup(state: &mut State, stream: StreamRef) -> u64 {
    match stream {
        StreamRef::Created(id) => id,
        StreamRef::Null { device, .. } => match state.null_streams.get(&device) {
            Some(id) => *id,
            None => {
                let id = spawn_stream(state, device, true, true);
                state.null_streams.insert(device, id);
                id
            }
        },
    }
}

/// Queue `op` on `stream`, whose schedule then runs at least to `done`.
fn enqueue(state: &mut State, stream: u64, done: u64, op: Op) -> Outcome<()> {
    let s = state.streams.get_mut(&stream).ok_or(Fault::InvalidHandle)?;
    s.queue.send(op).map_err(|_| Fault::InvalidHandle)?;
    s.schedule = s.schedule.max(done);
    s.enqueued += 1;
    Ok(())
}

fn streams_reached(state: &State, targets: &[(u64, u64)]) -> bool {
    targets
        .iter()
        .all(|(id, count)| state.streams.get(id).is_none_or(|s| s.completed >= *count))
}

fn spawn_stream(state: &mut State, device: usize, blocking: bool, internal: bool) -> u64 {
    let id = next_id(state);
    let (queue, ops) = channel::<Op>();
    state.streams.insert(
        id,
        Stream {
            device,
            blocking,
            internal,
            queue,
            schedule: 0,
            enqueued: 0,
            completed: 0,
            capture: Capture::None,
        },
    );
    let worker = move || {
        for op in ops {
            run(id, op);
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

/// The device reached `ev`'s record of `generation` at host time `at`.
fn stamp(ev: &mut Event, generation: u64, at: u64) {
    if ev.reached < generation {
        ev.stamp = clock::device_at(at);
        ev.host_stamp = at;
        ev.reached = generation;
    }
}

/// One operation, on the stream's worker thread.
fn run(stream: u64, op: Op) {
    let engine = &*ENGINE;
    match op {
        Op::Busy { until } => busy_until(until),
        Op::Record {
            event,
            generation,
            at,
        } => {
            busy_until(at);
            let mut state = engine.lock();
            if let Some(ev) = state.events.get_mut(&event) {
                stamp(ev, generation, at);
            }
        }
        Op::WaitEvent { event, generation } => {
            let state = engine.lock();
            drop(engine.wait_while(state, |s| {
                s.events.get(&event).is_some_and(|e| e.reached < generation)
            }));
        }
        Op::WaitStreams(targets) => {
            let state = engine.lock();
            drop(engine.wait_while(state, |s| !streams_reached(s, &targets)));
        }
    }
    if let Some(s) = engine.lock().streams.get_mut(&stream) {
        s.completed += 1;
    }
    engine.changed.notify_all();
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
        let event = engine.event_create(0, true);

        let refused = engine.event_record(event, StreamRef::Created(stream));

        assert_eq!(refused, Err(Fault::InvalidHandle));
        // Never recorded, so complete: not waiting for a record that never comes.
        assert_eq!(engine.event_query(event), Ok(()));
        assert_ne!(engine.last_recorded(), event);
        engine.event_destroy(event).expect("live event");
        engine.lock().streams.remove(&stream);
    }
}
