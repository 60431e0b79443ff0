//! Keeping a profiler's anchor fresh, off the caller's thread.
//!
//! `start()` never waits for a calibration: it takes the anchor there is,
//! and when that one is stale hands a new calibration to the calibrator
//! thread, which binds the profiler's context (the anchor stream's) and
//! takes it there. A window started while there is no anchor yet holds the
//! one being taken, and its reading waits for it on the resolver thread.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};

use std::time::{Duration, Instant};

use crate::anchoring::anchor::{Anchor, EventProbe};
use crate::anchoring::bracket::{self, Bracket};
use crate::anchoring::calibrator;
use crate::anchoring::drift::DriftFit;
use crate::anchoring::line::{nanos, reading_error};
use crate::anchoring::{AnchorApi, Gate};
use crate::config::ProfilerConfig;
use crate::driver::{DriverError, ErrorKind};
use crate::events::pool::{EventPool, PooledEvent};
use crate::owned_stream::OwnedStream;
use crate::tunables::calibrator::{
    DRAIN_SLEEP_UP_TO, FIRST_RETRY, LAST_RETRY, NO_EVENT_FIRST_PAUSE, NO_EVENT_LAST_PAUSE,
};
use crate::tunables::drift::MAX_GAP;

/// The anchor a calibration in flight will give: filled once, with the new
/// anchor, the previous one when the refresh failed, or the failure.
pub(crate) type Next<A> = OnceLock<Result<Arc<Anchor<A>>, DriverError>>;

/// The anchor a window is placed on.
pub(crate) enum WindowAnchor<A: AnchorApi> {
    Known(Arc<Anchor<A>>),
    /// Taken after the window started; its reading waits for it.
    Next(Arc<Next<A>>),
}

impl<A: AnchorApi> WindowAnchor<A> {
    /// The anchor, `None` while it is being taken.
    pub(crate) fn get(&self) -> Option<Result<&Arc<Anchor<A>>, &DriverError>> {
        match self {
            Self::Known(anchor) => Some(Ok(anchor)),
            Self::Next(next) => next.get().map(Result::as_ref),
        }
    }
}

/// A profiler's anchoring: what `start()` reads, and what the calibrator
/// thread works on.
pub(crate) struct Anchoring<A: AnchorApi> {
    shared: Arc<Shared<A>>,
    /// The anchor `start()` last found current: until it is due for a
    /// refresh it is still `latest.anchor` (only a refresh replaces that,
    /// and none begins before it is due), so it is read without the lock.
    cache: Option<Arc<Anchor<A>>>,
}

struct Shared<A: AnchorApi> {
    config: ProfilerConfig,
    /// Anchor events, apart from the windows' pool: a window's events are
    /// recorded again only by the thread that starts windows, never by a
    /// calibration in between.
    pool: Arc<EventPool<A>>,
    /// Made on the first window, on the caller's thread: of its context;
    /// with the process that made it, whose alone it is to release.
    stream: OnceLock<(OwnedStream<A>, u32)>,
    /// Locked briefly, by `start()` and by a calibration's end.
    latest: Mutex<Latest<A>>,
    /// Taken out by the calibration in flight, and put back at its end, so
    /// that no lock is held across its driver waits: a child made by
    /// `fork` meanwhile finds it gone, and starts afresh.
    work: Mutex<Option<Work>>,
}

struct Latest<A: AnchorApi> {
    anchor: Option<Arc<Anchor<A>>>,
    /// While a calibration is in flight: where it leaves its anchor.
    in_flight: Option<Arc<Next<A>>>,
    /// The process that began it: in a child made by `fork`, the parent's
    /// calibration never ends.
    in_flight_in: u32,
    /// After a failed calibration: when to try again, the delay that led
    /// there (doubling), and the failure.
    retry: Option<(Instant, Duration, DriverError)>,
    /// The next calibration, made ahead on the calibrator thread: the
    /// `start` that hands it over allocates nothing.
    prepared: Option<(Arc<Next<A>>, calibrator::DeviceTask)>,
}

struct Work {
    /// Dropped before the stream it waits on, in `Shared`'s drop: open
    /// (in a fork child, a gate on the parent's stream is left as it is).
    gate: Option<Box<dyn Gate>>,
    gate_tried: bool,
    /// Whether anything was ever enqueued on the anchor stream (a record,
    /// a gate's wait): until then its destroy has nothing to wait for.
    enqueued: bool,
    fit: DriftFit,
}

impl Work {
    fn new(config: &ProfilerConfig) -> Self {
        Self {
            gate: None,
            gate_tried: false,
            enqueued: false,
            fit: DriftFit::new(config.timer_resolution),
        }
    }
}

impl<A: AnchorApi> Anchoring<A> {
    pub(crate) fn new(config: ProfilerConfig) -> Self {
        let pool = EventPool::new(config.anchor.calibration_samples.max(1) + 1);
        Self {
            shared: Arc::new(Shared {
                config,
                pool,
                stream: OnceLock::new(),
                latest: Mutex::new(Latest {
                    anchor: None,
                    in_flight: None,
                    in_flight_in: 0,
                    retry: None,
                    prepared: None,
                }),
                work: Mutex::new(Some(Work::new(&config))),
            }),
            cache: None,
        }
    }

    /// The private stream anchors are taken on, once a window made it.
    pub(crate) fn stream(&self) -> Option<A::Stream> {
        self.shared.stream.get().map(|(stream, _)| stream.get())
    }

    /// The current anchor's bound, `None` before the first.
    pub(crate) fn uncertainty(&self) -> Option<Duration> {
        self.shared
            .latest()
            .anchor
            .as_ref()
            .map(|anchor| anchor.uncertainty())
    }

    /// The anchor for a window starting now, without waiting: the current
    /// one while it is younger than `anchor_max_age`, a refresh begun in the
    /// background once it is due; older, or before the first, the one a
    /// calibration is taking, which lies near the window, after its start
    /// or before. An old one also while a failed calibration backs off.
    ///
    /// # Errors
    ///
    /// With no anchor at all: while a failed first calibration backs off,
    /// or when none could be begun.
    #[inline]
    pub(crate) fn for_window(&mut self, stream: A::Stream) -> Result<WindowAnchor<A>, DriverError> {
        let now = (self.shared.config.anchor.host_clock)();
        if let Some(anchor) = &self.cache
            && !anchor.stale(now)
        {
            return Ok(WindowAnchor::Known(Arc::clone(anchor)));
        }
        self.refreshed(now, stream)
    }

    /// As [`for_window`](Self::for_window), past its anchor's refresh time.
    #[inline(never)]
    fn refreshed(
        &mut self,
        now: Instant,
        stream: A::Stream,
    ) -> Result<WindowAnchor<A>, DriverError> {
        // Declared first, so dropped last: after `latest` is unlocked.
        let mut unrun = None;
        let mut latest = self.shared.latest();
        self.cache.clone_from(&latest.anchor);
        if let Some(anchor) = &latest.anchor
            && !anchor.stale(now)
        {
            return Ok(WindowAnchor::Known(Arc::clone(anchor)));
        }
        if latest.in_flight.is_some() && latest.in_flight_in != std::process::id() {
            // Forked: the parent's calibration is not this process's to
            // wait for.
            latest.in_flight = None;
        }
        if latest.in_flight.is_none() {
            let backing_off = latest.retry.as_ref().is_some_and(|(at, ..)| now < *at);
            if !backing_off && let Err(err) = self.begin(&mut latest, &mut unrun, stream) {
                log::warn!("{}: no anchor calibration begun: {err}", A::BACKEND);
                Shared::back_off(&mut latest, now, &self.shared.config, err);
            }
        }
        // Due for a refresh, but within `anchor_max_age`: still a good
        // anchor (the stated bound carries the rate's error over the
        // distance), and a window on it is read without waiting for the
        // refresh. Older (an idle hour), the new one places it better.
        if let Some(old) = &latest.anchor
            && (latest.in_flight.is_none()
                || now.saturating_duration_since(old.measured())
                    <= self.shared.config.anchor.anchor_max_age)
        {
            return Ok(WindowAnchor::Known(Arc::clone(old)));
        }
        if let Some(next) = &latest.in_flight {
            return Ok(WindowAnchor::Next(Arc::clone(next)));
        }
        let (at, _, err) = latest.retry.as_ref().ok_or_else(|| {
            DriverError::refused(
                A::BACKEND,
                "anchor calibration",
                ErrorKind::Other,
                "no anchor, and none being taken",
            )
        })?;
        // Not the old error as it was: it names a call this window never
        // made.
        Err(DriverError::refused(
            A::BACKEND,
            "anchor calibration",
            err.kind(),
            format!(
                "no anchor yet: the last calibration failed ({err}); \
                 the next is tried in {:?}",
                at.saturating_duration_since(now)
            ),
        ))
    }

    /// Hand a calibration to the calibrator thread; the anchor stream is
    /// made here first, in the context of `window`'s stream, the first
    /// window's: the profiler's context from then on. Calibrations no
    /// thread will run are left in `unrun`, to be dropped once `latest` is
    /// unlocked.
    fn begin(
        &self,
        latest: &mut Latest<A>,
        unrun: &mut Option<calibrator::Unrun>,
        window: A::Stream,
    ) -> Result<(), DriverError> {
        if self.shared.stream.get().is_none() {
            let stream = A::in_context_of(window, OwnedStream::new)??;
            calibrator::profiler_joined(A::context_key(stream.get()));
            // Only this thread sets it: `start()` takes `&mut self`.
            let _ = self.shared.stream.set((stream, std::process::id()));
        }
        let (next, task) = latest
            .prepared
            .take()
            .unwrap_or_else(|| PendingCalibration::prepared(&self.shared));
        let device = self.stream().and_then(A::context_key);
        calibrator::run_for_device(device, task).map_err(|(err, tasks)| {
            *unrun = Some(tasks);
            DriverError::refused(
                A::BACKEND,
                "anchor calibration",
                ErrorKind::Other,
                format!("no calibrator thread could be started: {err}"),
            )
        })?;
        latest.in_flight = Some(next);
        latest.in_flight_in = std::process::id();
        Ok(())
    }
}

impl<A: AnchorApi> Shared<A> {
    fn latest(&self) -> MutexGuard<'_, Latest<A>> {
        self.latest.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Back off, doubling up to the anchor's own refresh period: a failing
    /// driver is not asked again at every `start`.
    fn back_off(
        latest: &mut Latest<A>,
        now: Instant,
        config: &ProfilerConfig,
        err: DriverError,
    ) -> Duration {
        let cap = config.anchor.anchor_max_age.clamp(FIRST_RETRY, LAST_RETRY);
        let delay = latest
            .retry
            .as_ref()
            .map_or(FIRST_RETRY, |retry| retry.1.saturating_mul(2).min(cap));
        latest.retry = Some((now + delay, delay, err));
        delay
    }

    fn work(&self) -> MutexGuard<'_, Option<Work>> {
        self.work.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new anchor on the private stream, placed by the drift fit.
    fn calibrate(&self, stream: A::Stream) -> Result<Anchor<A>, DriverError> {
        // Only one calibration of a profiler is in flight at a time (in
        // this process): `None` only in a child forked during one.
        let mut work = self
            .work()
            .take()
            .unwrap_or_else(|| Work::new(&self.config));
        let anchor = self.calibrate_with(&mut work, stream);
        *self.work() = Some(work);
        anchor
    }

    fn calibrate_with(&self, work: &mut Work, stream: A::Stream) -> Result<Anchor<A>, DriverError> {
        if self.config.anchor.gated_anchor && !work.gate_tried {
            work.gate_tried = true;
            work.gate = A::gate(stream).unwrap_or_else(|err| {
                log::warn!("{}: anchoring without a gate: {err}", A::BACKEND);
                None
            });
            work.enqueued |= work.gate.is_some();
        }
        let mut probe = EventProbe {
            pool: &self.pool,
            stream,
            gate: &mut work.gate,
            enqueued: &mut work.enqueued,
        };
        let bracket = bracket::tightest(&mut probe, &self.config.anchor)?;
        let pairing = |b: &Bracket<PooledEvent<A>>| {
            Ok(A::pairing(b.stamp.raw())?.map(|s| (s, Duration::ZERO)))
        };
        let (point, _) = bracket.point(self.config.anchor.driver_pairing, pairing, A::BACKEND);
        let previous = self.latest().anchor.clone();
        let chain = chain_position(&mut work.fit, previous.as_deref(), &bracket);
        let placement = work.fit.place(point, chain, &self.config.anchor);
        Ok(Anchor::new(bracket.stamp, point.at, placement, chain))
    }
}

impl<A: AnchorApi> Drop for Shared<A> {
    /// The gate and the anchor stream are released on the calibrator
    /// thread, in RELAXED mode: draining the stream is a call another
    /// thread's graph capture forbids, and the stream's destroy may wait
    /// for its work (`hipStreamDestroy`). Here only without a thread. In a
    /// child made by `fork`, a stream the parent made is left to the
    /// process, with its gate and anchor events: none is released.
    fn drop(&mut self) {
        let work = self
            .work
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut();
        // No work: a calibration was in flight as this process forked.
        let enqueued = work.as_ref().is_none_or(|work| work.enqueued);
        let gate = work.and_then(|work| work.gate.take());
        let stream = match self.stream.take() {
            Some((stream, made_in)) if made_in != std::process::id() => {
                // A child made by `fork`: the stream is the parent's, which
                // CUDA and ROCm let no child use, and a parent's thread may
                // have been inside a call on it at the fork, holding its
                // table entry (a removal would wait for it for good). Left
                // to the process, with the gate queued on it and the anchor
                // events: that thread may have held a lock of the driver's
                // own (clr's stream set's), which a destroy takes.
                let latest = self
                    .latest
                    .get_mut()
                    .unwrap_or_else(PoisonError::into_inner);
                let anchors = (latest.anchor.take(), latest.in_flight.take());
                std::mem::forget((stream, gate, anchors, Arc::clone(&self.pool)));
                return;
            }
            stream => stream.map(|(stream, _)| stream),
        };
        let release = Release {
            pool: Arc::clone(&self.pool),
            gate,
            stream,
            enqueued,
        };
        if release.gate.is_none() && release.stream.is_none() {
            return;
        }
        let joined = release.stream.is_some();
        let device = release
            .stream
            .as_ref()
            .and_then(|stream| A::context_key(stream.get()));
        let task = move || {
            A::own_thread();
            drop(release);
        };
        if let Err((err, unrun)) = calibrator::run_for_device(device, Box::new(task)) {
            log::warn!(
                "{}: an anchor stream and gate are released on the caller's thread: \
                 no calibrator thread could be started: {err}",
                A::BACKEND
            );
            drop(unrun);
        }
        if joined {
            calibrator::profiler_left(device);
        }
    }
}

/// What a profiler's anchoring holds of the driver's, in the order it is
/// released: the gate before the stream that waits on it, dropped open;
/// the stream drained first by polling (an event of `pool`), so that its
/// destroy does not wait for its work in the driver (`hipStreamDestroy`
/// does). Released on a calibrator thread, inside a round of its work,
/// which a `fork` waits for: a stream the driver would not let drain (the
/// drain's record or its ask failed, twice) is left to the process's end,
/// not destroyed, as it is once the process is exiting
/// ([`stop_driver_calls`](crate::process::stop_driver_calls)): its destroy
/// could wait for the device, a hung one's for good. A stream that never
/// had work is destroyed at once. A stream no event could be made to drain (nor its context bound) is destroyed undrained
/// only when the device is lost (its destroy has nothing to wait for);
/// a driver merely out of events is asked again, from sleeps outside the
/// round (about a third of a second in all), and the stream is left to the
/// process if it never has one.
struct Release<A: AnchorApi> {
    pool: Arc<EventPool<A>>,
    gate: Option<Box<dyn Gate>>,
    stream: Option<OwnedStream<A>>,
    /// Whether `stream` ever had work: else it is destroyed at once.
    enqueued: bool,
}

impl<A: AnchorApi> Drop for Release<A> {
    fn drop(&mut self) {
        drop(self.gate.take());
        let Some(stream) = self.stream.take() else {
            return;
        };
        if !self.enqueued {
            return drop(stream);
        }
        let raw = stream.get();
        // The outer error: no event to drain with; the inner one, the
        // drain's own, on the stream.
        let drain = || {
            A::in_context_of(raw, || {
                let event = self.pool.take()?;
                Ok(crate::anchoring::drained::<A>(event.raw(), raw))
            })
            .and_then(|taken| taken)
        };
        let mut drained = match drain() {
            Ok(Err(err)) if !crate::threads::stopping() => {
                log::warn!(
                    "{}: an anchor stream's drain failed, trying once more: {err}",
                    A::BACKEND
                );
                drain()
            }
            first => first,
        };
        // No event to drain with: a driver out of them may have one again
        // shortly. Asked again outside the round, which a fork waits for.
        let mut pause = NO_EVENT_FIRST_PAUSE;
        while let Err(err) = &drained
            && !lost(err)
            && pause <= NO_EVENT_LAST_PAUSE
            && paused_unless_stopping(pause)
        {
            pause *= 4;
            drained = drain();
        }
        match drained {
            // The process is exiting: the destroy could wait in the driver.
            Ok(Ok(Some(false))) => std::mem::forget(stream),
            Ok(Ok(_)) => drop(stream),
            Ok(Err(err)) if lost(&err) => {
                log::warn!(
                    "{}: an anchor stream of a lost device is destroyed undrained: {err}",
                    A::BACKEND
                );
                drop(stream);
            }
            // An undrained stream's destroy could wait for its work in the
            // driver (`hipStreamDestroy` does), inside this round of work,
            // or past the process's exit.
            Ok(Err(err)) => {
                log::warn!(
                    "{}: an undrained anchor stream is left to the process's end: {err}",
                    A::BACKEND
                );
                std::mem::forget(stream);
            }
            Err(err) if crate::threads::stopping() => {
                log::warn!(
                    "{}: an undrained anchor stream is left to the process's end: {err}",
                    A::BACKEND
                );
                std::mem::forget(stream);
            }
            Err(err) if lost(&err) => {
                log::warn!(
                    "{}: an anchor stream of a lost device is destroyed undrained: {err}",
                    A::BACKEND
                );
                drop(stream);
            }
            // Its destroy could wait for the stream's last command, inside
            // this round.
            Err(err) => {
                log::warn!(
                    "{}: an undrained anchor stream is left to the process's end, no event \
                     could be made to drain it: {err}",
                    A::BACKEND
                );
                std::mem::forget(stream);
            }
        }
    }
}

/// A device whose every call fails: a stream's destroy there has no work
/// to wait for. Not `Unavailable`: a device taken by another process, or
/// a driver not initialised, may still have the stream's work to finish.
fn lost(err: &DriverError) -> bool {
    matches!(err.kind(), ErrorKind::DevicePoisoned | ErrorKind::NoDevice)
}

/// Sleep `pause` outside the round of work, in slices no longer than a
/// drain's sleep, so that the process's exit waits for it no longer than
/// for a drain; `false` once the process is exiting.
fn paused_unless_stopping(pause: Duration) -> bool {
    let until = Instant::now() + pause;
    loop {
        if crate::threads::stopping() {
            return false;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        crate::fork_gate::outside_library_work(|| std::thread::sleep(left.min(DRAIN_SLEEP_UP_TO)));
    }
}

/// Device time from the start of the anchor chain to `bracket`'s event,
/// read from the previous anchor, and how far the sum of readings can be
/// off; a new chain when there is none to read from.
fn chain_position<A: AnchorApi>(
    fit: &mut DriftFit,
    previous: Option<&Anchor<A>>,
    bracket: &Bracket<PooledEvent<A>>,
) -> (f64, f64) {
    let Some(previous) = previous else {
        fit.restart();
        return (0.0, 0.0);
    };
    if bracket
        .midpoint()
        .at
        .saturating_duration_since(previous.measured())
        > MAX_GAP
    {
        fit.restart();
        return (0.0, 0.0);
    }
    match A::event_elapsed(previous.event(), bracket.stamp.raw()) {
        Ok(step) => (
            previous.chain_ns() + step.as_nanos() as f64,
            // Stamps are quantised, so the resolution telescopes out of a
            // sum of readings; the `f32` rounding of each does not.
            previous.chain_error_ns() + reading_error(nanos(step)) as f64,
        ),
        Err(err) => {
            log::warn!("{}: drift estimate restarted: {err}", A::BACKEND);
            fit.restart();
            (0.0, 0.0)
        }
    }
}

/// One calibration, as handed to the calibrator thread. Its `Next` is
/// filled on every path: dropped unrun (no thread) or unwinding, with a
/// failure. It holds its profiler's anchoring weakly: made ahead, it is
/// kept there, and a calibration of a profiler gone meanwhile is not run.
struct PendingCalibration<A: AnchorApi> {
    shared: Weak<Shared<A>>,
    next: Arc<Next<A>>,
}

impl<A: AnchorApi> PendingCalibration<A> {
    /// A calibration for `shared`, boxed for the calibrator thread, and
    /// where it leaves its anchor.
    fn prepared(shared: &Arc<Shared<A>>) -> (Arc<Next<A>>, calibrator::DeviceTask) {
        let next = Arc::new(Next::<A>::new());
        let task = Self {
            shared: Arc::downgrade(shared),
            next: Arc::clone(&next),
        };
        (next, Box::new(move || task.run()))
    }

    fn run(self) {
        A::own_thread();
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let Some(stream) = shared.stream.get().map(|(stream, _)| stream.get()) else {
            return;
        };
        let taken = A::in_context_of(stream, || shared.calibrate(stream)).and_then(|t| t);
        let now = (shared.config.anchor.host_clock)();
        let mut latest = shared.latest();
        latest.in_flight = None;
        if latest.prepared.is_none() {
            latest.prepared = Some(Self::prepared(&shared));
        }
        let outcome = match taken {
            Ok(anchor) => {
                let anchor = Arc::new(anchor);
                latest.anchor = Some(Arc::clone(&anchor));
                latest.retry = None;
                Ok(anchor)
            }
            Err(err) => {
                let delay = Shared::back_off(&mut latest, now, &shared.config, err.clone());
                match &latest.anchor {
                    Some(old) if !err.is_device_poisoned() => {
                        log::warn!(
                            "{}: anchor refresh failed, keeping the previous anchor, \
                             next try in {delay:?}: {err}",
                            A::BACKEND
                        );
                        Ok(Arc::clone(old))
                    }
                    // Left for the process's exit: nothing to say.
                    _ if crate::threads::stopping() => Err(err),
                    _ => {
                        // Off the caller's thread, with nowhere else to go:
                        // the windows waiting for it read `None`.
                        log::warn!(
                            "{}: anchor calibration failed, next try in {delay:?}; \
                             windows waiting for it read None: {err}",
                            A::BACKEND
                        );
                        Err(err)
                    }
                }
            }
        };
        drop(latest);
        let _ = self.next.set(outcome);
    }
}

impl<A: AnchorApi> Drop for PendingCalibration<A> {
    fn drop(&mut self) {
        if self.next.get().is_none()
            && let Some(shared) = self.shared.upgrade()
        {
            let mut latest = shared.latest();
            if latest
                .in_flight
                .as_ref()
                .is_some_and(|n| Arc::ptr_eq(n, &self.next))
            {
                latest.in_flight = None;
            }
            drop(latest);
        }
        if self.next.get().is_none() {
            let _ = self.next.set(Err(DriverError::refused(
                A::BACKEND,
                "anchor calibration",
                ErrorKind::Other,
                "the calibration did not run to its end",
            )));
        }
    }
}
