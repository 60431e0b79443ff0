//! A simulated device, in process, for tests and examples (feature `sim`).
//!
//! Streams are ordered queues on a virtual device clock that runs with the
//! host's monotonic clock (plus a skew tests can advance), so a waited event
//! really is reached. It counts live events and streams, can make the n-th
//! call of any function fail with a chosen [`ErrorKind`], and can hand back
//! raw elapsed readings (negative, NaN) that a real driver returns rarely.
//!
//! The state is process-wide, as a driver's is: tests that use it take
//! [`Sim::exclusive`] first so that they do not count each other's calls.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use std::time::{Duration, Instant};

use crate::EventApi;
use crate::driver::{DriverError, ErrorKind, elapsed_from_ms};

/// The simulated backend.
#[derive(Debug)]
pub struct Sim;

/// A simulated event handle.
#[derive(Debug)]
pub struct SimEvent(u64);

/// A simulated stream handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SimStream(u64);

/// Counts of what the simulated device holds and has done since the last reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimCounts {
    /// Events created and not destroyed.
    pub live_events: u64,
    /// Streams created and not destroyed.
    pub live_streams: u64,
    /// Events ever created.
    pub events_created: u64,
    /// Releases of a handle that was not live: a double release or garbage.
    pub bad_releases: u64,
    /// Calls of any [`EventApi`] function.
    pub calls: u64,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Live events: device-clock nanoseconds of their last recorded point.
    events: HashMap<u64, Option<u64>>,
    /// Live streams: device-clock nanoseconds at which their queue drains.
    streams: HashMap<u64, u64>,
    counts: SimCounts,
    fail_at: Option<(u64, ErrorKind)>,
    /// A function that fails at every call, until reset.
    failing: Option<(&'static str, ErrorKind)>,
    /// A function whose next call fails.
    failing_once: Option<(&'static str, ErrorKind)>,
    /// Calls per function.
    calls_of: HashMap<&'static str, u64>,
    injected: Option<DriverError>,
    elapsed_readings: VecDeque<f32>,
    /// By the thread that recorded: calibrations record on their own.
    last_record: HashMap<std::thread::ThreadId, u64>,
    /// The device of each stream made on one other than the default.
    devices: HashMap<u64, u64>,
    /// While a [`SimHold`] holds: the device time its held work begins at,
    /// the latest end of the queues it holds.
    held_from: Option<u64>,
}

/// Where the stamps of work queued behind a [`SimHold`] begin: past every
/// device time a run reaches (146 years), so none is reached until the
/// hold is released and they are moved to the release's time.
const HELD: u64 = 1 << 62;

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| Mutex::new(State::default()));
static EXCLUSIVE: Mutex<()> = Mutex::new(());
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
static SKEW_NANOS: AtomicU64 = AtomicU64::new(0);
/// How much faster the device clock runs, in parts per billion.
static DRIFT_PPB: AtomicI64 = AtomicI64::new(0);

thread_local! {
    /// The device this thread's new streams are made on, as a context
    /// current on it would say: set by [`Sim::stream_create_on`] and by
    /// [`in_context_of`](crate::backend::ThreadApi::in_context_of).
    static CURRENT_DEVICE: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// `call` with `device` current on this thread, as it was after.
fn on_device<T>(device: Option<u64>, call: impl FnOnce() -> T) -> T {
    let before = CURRENT_DEVICE.replace(device);
    let made = call();
    CURRENT_DEVICE.set(before);
    made
}

/// The device's state, locked, for [`crate::process::before_fork`].
pub(crate) fn lock_for_fork() -> Box<dyn std::any::Any> {
    Box::new(state())
}

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn to_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

fn device_now() -> u64 {
    device_at(to_nanos(Sim::host_now().saturating_duration_since(*EPOCH)))
}

fn drift() -> f64 {
    DRIFT_PPB.load(Ordering::Relaxed) as f64 * 1e-9
}

/// The device clock at host time `host_ns` since the epoch.
fn device_at(host_ns: u64) -> u64 {
    (host_ns as f64 * (1.0 + drift())) as u64
}

/// The host time since the epoch at device time `device_ns`.
fn host_at(device_ns: u64) -> u64 {
    (device_ns as f64 / (1.0 + drift())).round() as u64
}

/// Sleep until the device clock reaches the stamp `read` finds, read again
/// while it lies behind a hold; at once when `read` finds none.
fn wait_for(read: impl Fn(&State) -> Option<u64>) {
    loop {
        match read(&state()) {
            Some(target) if target >= HELD => std::thread::sleep(Duration::from_millis(1)),
            Some(target) => return wait_until(target),
            None => return,
        }
    }
}

/// Sleep until the device clock reaches `target`.
fn wait_until(target: u64) {
    loop {
        let now = device_now();
        if target <= now {
            return;
        }
        std::thread::sleep(Duration::from_nanos(target - now));
    }
}

fn status_of(kind: ErrorKind) -> (i64, &'static str) {
    match kind {
        ErrorKind::NotReady => (600, "SIM_NOT_READY"),
        ErrorKind::DevicePoisoned => (700, "SIM_ILLEGAL_ADDRESS"),
        ErrorKind::OutOfResources => (2, "SIM_OUT_OF_MEMORY"),
        ErrorKind::NoDevice => (100, "SIM_NO_DEVICE"),
        ErrorKind::Capture => (900, "SIM_STREAM_CAPTURE_UNSUPPORTED"),
        ErrorKind::Unavailable => (4, "SIM_DEINITIALIZED"),
        ErrorKind::InvalidHandle => (400, "SIM_INVALID_HANDLE"),
        ErrorKind::Other => (1, "SIM_INVALID_VALUE"),
    }
}

fn error(call: &'static str, kind: ErrorKind) -> DriverError {
    let (status, name) = status_of(kind);
    DriverError::from_status(Sim::BACKEND, call, status, Some(name), kind)
}

/// Exclusive use of the simulated device, reset on entry; see [`Sim::exclusive`].
#[derive(Debug)]
pub struct SimGuard {
    _lock: MutexGuard<'static, ()>,
}

/// Device work held until this is released or dropped; see [`Sim::hold`].
#[derive(Debug)]
pub struct SimHold {
    released: bool,
}

impl SimHold {
    /// Let the held work run, from now on.
    pub fn release(mut self) {
        self.let_go();
    }

    /// Move every stamp behind the hold to the release's time; nothing
    /// once the device was reset meanwhile.
    fn let_go(&mut self) {
        if std::mem::replace(&mut self.released, true) {
            return;
        }
        let now = device_now();
        let mut state = state();
        let Some(from) = state.held_from.take() else {
            return;
        };
        let base = from.max(now);
        let moved = |stamp: &mut u64| {
            if *stamp >= HELD {
                *stamp = base + (*stamp - HELD);
            }
        };
        state.streams.values_mut().for_each(moved);
        state.events.values_mut().flatten().for_each(moved);
        state.last_record.values_mut().for_each(moved);
    }
}

impl Drop for SimHold {
    fn drop(&mut self) {
        self.let_go();
    }
}

impl Sim {
    /// Take the simulated device for the calling test, and reset it.
    pub fn exclusive() -> SimGuard {
        let lock = EXCLUSIVE.lock().unwrap_or_else(PoisonError::into_inner);
        // The previous user's calibrations end first: they would count
        // here, and use handles the reset forgets.
        if !crate::process::wait_for_calibrations(Duration::from_secs(10)) {
            log::warn!("sim: a calibration still runs across the reset");
        }
        *state() = State::default();
        DRIFT_PPB.store(0, Ordering::Relaxed);
        SimGuard { _lock: lock }
    }

    /// A stream on simulated device `device`: a device of its own for the
    /// library (its anchors taken on a thread of their own, as a second
    /// GPU's are), on the same clock as the default device's streams.
    ///
    /// ```
    /// use device_events_core::{EventApi, EventProfiler, sim::Sim};
    ///
    /// let s = Sim::stream_create_on(1)?;
    /// let mut profiler = EventProfiler::<Sim>::new();
    /// let token = profiler.start(s);
    /// let window = profiler.stop(s, token)?;
    /// assert!(pollster::block_on(window.resolve()).is_some());
    /// # drop(profiler);
    /// Sim::stream_destroy(s)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`EventApi::stream_create_non_blocking`].
    pub fn stream_create_on(device: u64) -> Result<SimStream, DriverError> {
        on_device(Some(device), Self::stream_create_non_blocking)
    }

    /// The host clock the simulated device runs on: the monotonic clock plus
    /// the skew [`advance_clock`](Self::advance_clock) adds. Give it to a
    /// profiler as its `host_clock` so both jump together.
    pub fn host_now() -> Instant {
        Instant::now() + Duration::from_nanos(SKEW_NANOS.load(Ordering::Relaxed))
    }

    /// Jump the host and device clocks forward together, e.g. by an hour.
    pub fn advance_clock(by: Duration) {
        SKEW_NANOS.fetch_add(to_nanos(by), Ordering::Relaxed);
    }

    /// Make the device clock run `ppm` parts per million faster than the
    /// host's, from now on (reset by [`exclusive`](Self::exclusive)).
    pub fn set_drift_ppm(ppm: f64) {
        DRIFT_PPB.store((ppm * 1000.0).round() as i64, Ordering::Relaxed);
    }

    /// Queue device work on `stream` that takes `duration` once reached.
    pub fn enqueue_work(stream: SimStream, duration: Duration) {
        let now = device_now();
        if let Some(cursor) = state().streams.get_mut(&stream.0) {
            *cursor = (*cursor).max(now) + to_nanos(duration);
        }
    }

    /// Hold `stream` where its queue now ends: the work, records and waits
    /// queued on it from now on (and on streams made to wait on them) run
    /// only once the returned hold is released or dropped, however long
    /// that takes, and then as they would have from that moment. For a test
    /// whose device work must outlast whatever the host does meanwhile.
    /// One hold at a time: a second, taken while one holds, joins it, and
    /// releasing either releases both.
    ///
    /// ```
    /// use device_events_core::{EventApi, EventFence, sim::Sim};
    ///
    /// let _sim = Sim::exclusive();
    /// let s = Sim::stream_create_non_blocking()?;
    /// let hold = Sim::hold(s);
    /// let fence = EventFence::<Sim>::new(s);
    /// std::thread::sleep(std::time::Duration::from_millis(10));
    /// assert!(!fence.is_complete()?);
    /// hold.release();
    /// fence.wait_sync()?;
    /// # drop(fence);
    /// # Sim::stream_destroy(s)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn hold(stream: SimStream) -> SimHold {
        let now = device_now();
        let mut state = state();
        if let Some(cursor) = state.streams.get_mut(&stream.0)
            && *cursor < HELD
        {
            let from = (*cursor).max(now);
            *cursor = HELD;
            state.held_from = Some(state.held_from.map_or(from, |held| held.max(from)));
        }
        SimHold { released: false }
    }

    /// Make the `n`-th call from now (1 for the next) of any [`EventApi`]
    /// function fail with an error of `kind`.
    pub fn fail_call(n: u64, kind: ErrorKind) {
        let mut state = state();
        let at = state.counts.calls + n;
        state.fail_at = Some((at, kind));
        state.injected = None;
    }

    /// Make every call of the function named `call` (as in its errors, e.g.
    /// `simEventSynchronize`) fail with an error of `kind`, until the next
    /// [`exclusive`](Self::exclusive).
    pub fn fail_every(call: &'static str, kind: ErrorKind) {
        state().failing = Some((call, kind));
    }

    /// Make the next call of the function named `call` (as in its errors)
    /// fail with an error of `kind`, whichever thread makes it.
    pub fn fail_next(call: &'static str, kind: ErrorKind) {
        let mut state = state();
        state.failing_once = Some((call, kind));
        state.injected = None;
    }

    /// Calls of the function named `call` since the last reset.
    pub fn calls_of(call: &str) -> u64 {
        state().calls_of.get(call).copied().unwrap_or(0)
    }

    /// The error the last injected failure returned, once it fired.
    pub fn injected() -> Option<DriverError> {
        state().injected.clone()
    }

    /// Make the next elapsed readings return these raw milliseconds.
    pub fn queue_elapsed_readings(readings: impl IntoIterator<Item = f32>) {
        state().elapsed_readings.extend(readings);
    }

    /// Counts since the last reset.
    pub fn counts() -> SimCounts {
        state().counts
    }

    /// Where on the host clock the device stamped the event this thread
    /// recorded last: the ground truth placements are checked against.
    /// Per thread, as anchors are recorded on the library's own.
    pub fn last_record_instant() -> Option<Instant> {
        state()
            .last_record
            .get(&std::thread::current().id())
            .map(|nanos| *EPOCH + Duration::from_nanos(host_at(*nanos)))
    }

    /// Count a call, and fail it if it is the one chosen.
    fn enter(call: &'static str) -> Result<MutexGuard<'static, State>, DriverError> {
        let mut state = state();
        state.counts.calls += 1;
        *state.calls_of.entry(call).or_insert(0) += 1;
        if let Some((name, kind)) = state.failing
            && name == call
        {
            return Err(error(call, kind));
        }
        if let Some((name, kind)) = state.failing_once
            && name == call
        {
            state.failing_once = None;
            let err = error(call, kind);
            state.injected = Some(err.clone());
            return Err(err);
        }
        if let Some((at, kind)) = state.fail_at
            && at == state.counts.calls
        {
            let err = error(call, kind);
            state.injected = Some(err.clone());
            return Err(err);
        }
        Ok(state)
    }
}

/// No gate and no host-clock stamps: the profiler brackets.
impl crate::backend::AnchorApi for Sim {}

/// New events for each fence, none kept.
impl crate::backend::FenceApi for Sim {}

impl crate::backend::ThreadApi for Sim {
    /// `call` with `stream`'s device current: the streams it makes are
    /// made there.
    fn in_context_of<T>(stream: SimStream, call: impl FnOnce() -> T) -> Result<T, DriverError> {
        let device = state().devices.get(&stream.0).copied();
        Ok(on_device(device, call))
    }

    fn stream_key(stream: SimStream) -> Option<u64> {
        Some(stream.0)
    }

    /// A stream made on a device of its own ([`Sim::stream_create_on`])
    /// names that device; the default device's, none.
    fn context_key(stream: SimStream) -> Option<u64> {
        state().devices.get(&stream.0).copied()
    }
}

impl EventApi for Sim {
    type Event = SimEvent;
    type Stream = SimStream;
    const BACKEND: &'static str = "sim";

    fn event_create() -> Result<SimEvent, DriverError> {
        let mut state = Self::enter("simEventCreate")?;
        state.next_id += 1;
        let id = state.next_id;
        state.events.insert(id, None);
        state.counts.live_events += 1;
        state.counts.events_created += 1;
        Ok(SimEvent(id))
    }

    /// An injected failure here still releases the event, as a driver that
    /// reports an earlier asynchronous fault on a destroy call does.
    fn event_destroy(event: &mut SimEvent) -> Result<(), DriverError> {
        let injected = Self::enter("simEventDestroy").err();
        let mut state = state();
        if state.events.remove(&event.0).is_some() {
            state.counts.live_events -= 1;
        } else {
            state.counts.bad_releases += 1;
            return Err(error("simEventDestroy", ErrorKind::InvalidHandle));
        }
        injected.map_or(Ok(()), Err)
    }

    fn event_record(event: &SimEvent, stream: SimStream) -> Result<(), DriverError> {
        let mut state = Self::enter("simEventRecord")?;
        let now = device_now();
        let cursor = state
            .streams
            .get_mut(&stream.0)
            .ok_or_else(|| error("simEventRecord", ErrorKind::InvalidHandle))?;
        *cursor = (*cursor).max(now);
        let stamp = *cursor;
        let slot = state
            .events
            .get_mut(&event.0)
            .ok_or_else(|| error("simEventRecord", ErrorKind::InvalidHandle))?;
        *slot = Some(stamp);
        state.last_record.insert(std::thread::current().id(), stamp);
        Ok(())
    }

    fn event_wait(event: &SimEvent) -> Result<(), DriverError> {
        let state = Self::enter("simEventSynchronize")?;
        let stamp = *state
            .events
            .get(&event.0)
            .ok_or_else(|| error("simEventSynchronize", ErrorKind::InvalidHandle))?;
        drop(state);
        if stamp.is_some() {
            // Read again while held: a release moves the stamp.
            wait_for(|state| state.events.get(&event.0).copied().flatten());
        }
        Ok(())
    }

    fn event_elapsed(start: &SimEvent, end: &SimEvent) -> Result<Duration, DriverError> {
        const CALL: &str = "simEventElapsedTime";
        let mut state = Self::enter(CALL)?;
        let stamp = |event: &SimEvent| match state.events.get(&event.0) {
            Some(Some(stamp)) => Ok(*stamp),
            _ => Err(error(CALL, ErrorKind::InvalidHandle)),
        };
        let (from, to) = (stamp(start)?, stamp(end)?);
        if from.max(to) > device_now() {
            return Err(error(CALL, ErrorKind::NotReady));
        }
        #[allow(clippy::cast_precision_loss)]
        let exact = (to as f64 - from as f64) / 1e6;
        #[allow(clippy::cast_possible_truncation)]
        let ms = state.elapsed_readings.pop_front().unwrap_or(exact as f32);
        elapsed_from_ms(Self::BACKEND, CALL, ms)
    }

    fn stream_wait_event(stream: SimStream, event: &SimEvent) -> Result<(), DriverError> {
        const CALL: &str = "simStreamWaitEvent";
        let mut state = Self::enter(CALL)?;
        let stamp = *state
            .events
            .get(&event.0)
            .ok_or_else(|| error(CALL, ErrorKind::InvalidHandle))?;
        let cursor = state
            .streams
            .get_mut(&stream.0)
            .ok_or_else(|| error(CALL, ErrorKind::InvalidHandle))?;
        if let Some(stamp) = stamp {
            *cursor = (*cursor).max(stamp);
        }
        Ok(())
    }

    fn stream_synchronize(stream: SimStream) -> Result<(), DriverError> {
        const CALL: &str = "simStreamSynchronize";
        let state = Self::enter(CALL)?;
        if !state.streams.contains_key(&stream.0) {
            return Err(error(CALL, ErrorKind::InvalidHandle));
        }
        drop(state);
        wait_for(|state| state.streams.get(&stream.0).copied());
        Ok(())
    }

    fn stream_create_non_blocking() -> Result<SimStream, DriverError> {
        let mut state = Self::enter("simStreamCreate")?;
        state.next_id += 1;
        let id = state.next_id;
        state.streams.insert(id, 0);
        if let Some(device) = CURRENT_DEVICE.get() {
            state.devices.insert(id, device);
        }
        state.counts.live_streams += 1;
        Ok(SimStream(id))
    }

    /// Like [`event_destroy`](Self::event_destroy), an injected failure still
    /// releases the stream.
    fn stream_destroy(stream: SimStream) -> Result<(), DriverError> {
        let injected = Self::enter("simStreamDestroy").err();
        let mut state = state();
        if state.streams.remove(&stream.0).is_some() {
            state.devices.remove(&stream.0);
            state.counts.live_streams -= 1;
        } else {
            state.counts.bad_releases += 1;
            return Err(error("simStreamDestroy", ErrorKind::InvalidHandle));
        }
        injected.map_or(Ok(()), Err)
    }
}

impl crate::backend::EventQuery for Sim {
    fn event_query(event: &SimEvent) -> Result<bool, DriverError> {
        let state = Self::enter("simEventQuery")?;
        match state.events.get(&event.0) {
            Some(Some(stamp)) => Ok(*stamp <= device_now()),
            Some(None) => Ok(true),
            None => Err(error("simEventQuery", ErrorKind::InvalidHandle)),
        }
    }
}
