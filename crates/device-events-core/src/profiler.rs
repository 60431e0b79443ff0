//! Device-timed windows on streams, placed on the host clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cubecl_common::profile::{Duration, Instant, ProfileDuration, ProfileTicks};

use crate::EventApi;
use crate::anchor::{Anchor, Bracket};
use crate::drift::{DriftFit, MAX_GAP};
use crate::driver::DriverError;
use crate::event::OwnedStream;
use crate::pool::{EventPool, PooledEvent};

/// Why [`EventProfiler::stop`] or [`EventProfiler::abandon`] refused a token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// The token came from another profiler.
    #[error("profiling token belongs to another profiler")]
    ForeignToken,
    /// The token's window was already stopped or abandoned.
    #[error("profiling token was already stopped or abandoned")]
    StaleToken,
    /// A driver call of the window failed, or the window was marked failed
    /// after a device fault.
    #[error("profiling window failed: {0}")]
    Driver(#[from] DriverError),
}

/// A window opened by [`EventProfiler::start`]; single-use.
///
/// `Copy` so that a caller's bookkeeping can hold it freely; a second use is
/// refused with [`ProfileError::StaleToken`] rather than trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProfileToken {
    profiler: u64,
    slot: usize,
    generation: u32,
}

/// How an [`EventProfiler`] keeps its anchor.
#[derive(Clone, Copy, Debug)]
pub struct ProfilerConfig {
    /// Re-anchor once the anchor is older than this on the host clock.
    /// Elapsed times come back as `f32` milliseconds, whose step grows with
    /// distance from the anchor: ~61 ns one second away, ~0.25 ms one hour
    /// away. Default: one second.
    pub anchor_max_age: Duration,
    /// Brackets taken per anchor; the tightest is kept. Default: 5.
    pub calibration_samples: usize,
    /// Idle events kept for reuse; beyond it, returned events are destroyed.
    /// Default: 1024.
    pub max_idle_events: usize,
    /// The host clock windows are placed on. Default: [`Instant::now`].
    pub host_clock: fn() -> Instant,
}

impl Default for ProfilerConfig {
    fn default() -> Self {
        Self {
            anchor_max_age: Duration::from_secs(1),
            calibration_samples: 5,
            max_idle_events: 1024,
            host_clock: Instant::now,
        }
    }
}

/// Timing windows on streams, with device-measured durations placed on the
/// host clock.
///
/// Each window's start is placed as `anchor + elapsed(anchor, start)` and its
/// end as `start + elapsed(start, end)`: the span is read directly from the
/// device, never as the difference of two offsets that each carry the `f32`
/// rounding of their distance from the anchor.
///
/// The anchor is taken on a private non-blocking stream, so taking it never
/// drains the caller's streams; each window keeps the anchor it started under.
///
/// # Placement
///
/// The device reaches the anchor event somewhere between the host clock read
/// just before it is recorded and the read just after the wait for it
/// returns. The common shortcut, reading the clock after the wait, puts the
/// anchor at the late edge of that bracket, so every window lands late by the
/// wait's wake-up latency: microseconds when the wait spins, far more when
/// the thread was descheduled, and a different amount at each refresh. Here
/// the bracket is taken [`calibration_samples`](ProfilerConfig::calibration_samples)
/// times, the tightest is kept, the anchor sits at its midpoint, and its
/// half-width is [`anchor_uncertainty`](Self::anchor_uncertainty): a bound
/// that can be checked, not a bias.
///
/// Device and host clocks drift apart (crystals differ by up to ±100 ppm:
/// 100 µs per second). Successive anchors are fitted as one line, host time
/// against device time, as Tracy's calibration does: the fit's rate scales
/// each window's offset and span, and smooths each anchor's position. Until
/// the rate is known, anchors are refreshed every few milliseconds; as the
/// fit firms up the period grows to [`anchor_max_age`](ProfilerConfig::anchor_max_age).
/// On the software driver, its clock offset and drifting 100 ppm, windows
/// over a 60-second session land within 0.3 µs of the truth at the median
/// and 2 µs at worst (`cargo xtask bench`).
///
/// Windows nest and overlap freely, on one stream or several. A window that
/// cannot be read resolves to `None`, logged: never a zero and never a
/// made-up value.
///
/// ```
/// use device_events_core::{EventApi, EventProfiler, sim::Sim};
/// use std::time::Duration;
///
/// let stream = Sim::stream_create_non_blocking()?;
/// let mut profiler = EventProfiler::<Sim>::new();
///
/// let outer = profiler.start(stream);
/// Sim::enqueue_work(stream, Duration::from_micros(300));
/// let inner = profiler.start(stream);
/// Sim::enqueue_work(stream, Duration::from_micros(200));
/// let inner = profiler.stop(stream, inner)?;
/// let outer = profiler.stop(stream, outer)?;
///
/// let inner = pollster::block_on(inner.resolve()).expect("measured");
/// let outer = pollster::block_on(outer.resolve()).expect("measured");
/// assert!(inner.duration() >= Duration::from_micros(200));
/// assert!(outer.duration() >= inner.duration());
/// # drop(profiler);
/// # Sim::stream_destroy(stream)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct EventProfiler<A: EventApi> {
    id: u64,
    config: ProfilerConfig,
    slots: Vec<Slot<A>>,
    free: Vec<usize>,
    open: usize,
    anchor: Option<Arc<Anchor<A>>>,
    anchor_stream: Option<OwnedStream<A>>,
    fit: DriftFit,
    pool: Arc<EventPool<A>>,
}

struct Slot<A: EventApi> {
    generation: u32,
    window: Option<Window<A>>,
}

/// An open window: its start event and anchor, or why it has neither.
type Window<A> = Result<Opened<A>, DriverError>;

struct Opened<A: EventApi> {
    start: PooledEvent<A>,
    anchor: Arc<Anchor<A>>,
}

static NEXT_PROFILER: AtomicU64 = AtomicU64::new(1);

impl<A: EventApi> Default for EventProfiler<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: EventApi> EventProfiler<A> {
    /// A profiler with the default [`ProfilerConfig`]. Nothing is asked of
    /// the driver until the first window.
    pub fn new() -> Self {
        Self::with_config(ProfilerConfig::default())
    }

    /// A profiler with the given configuration.
    pub fn with_config(config: ProfilerConfig) -> Self {
        Self {
            id: NEXT_PROFILER.fetch_add(1, Ordering::Relaxed),
            config,
            slots: Vec::new(),
            free: Vec::new(),
            open: 0,
            anchor: None,
            anchor_stream: None,
            fit: DriftFit::new(),
            pool: EventPool::new(config.max_idle_events),
        }
    }

    /// Open a window on `stream`, after everything queued there so far.
    ///
    /// Never fails: a driver error here is kept in the window and returned by
    /// [`stop`](Self::stop), where the measurement would have been.
    pub fn start(&mut self, stream: A::Stream) -> ProfileToken {
        let window = self.open_window(stream);
        if let Err(err) = &window {
            self.note_fault(err);
        }
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    window: None,
                });
                self.slots.len() - 1
            }
        };
        let entry = &mut self.slots[slot];
        entry.window = Some(window);
        self.open += 1;
        ProfileToken {
            profiler: self.id,
            slot,
            generation: entry.generation,
        }
    }

    /// Close the window on `stream`, after everything queued there so far.
    ///
    /// The returned duration's future blocks until the device reaches the end
    /// of the window, then resolves to its placement on the host clock, or to
    /// `None` (logged) if the driver could not read it.
    ///
    /// # Errors
    ///
    /// [`ProfileError::ForeignToken`] and [`ProfileError::StaleToken`] for a
    /// token this profiler cannot close; [`ProfileError::Driver`] when the
    /// window failed to open, to close, or was marked failed.
    pub fn stop(
        &mut self,
        stream: A::Stream,
        token: ProfileToken,
    ) -> Result<ProfileDuration, ProfileError> {
        let Opened { start, anchor } = self.take(token)??;
        let end = self.pool.take().and_then(|end| {
            A::event_record(end.raw(), stream)?;
            Ok(end)
        });
        let end = end.inspect_err(|err| self.note_fault(err))?;
        Ok(ProfileDuration::new_device_time_maybe(async move {
            match read_window(&anchor, &start, &end) {
                Ok(ticks) => Some(ticks),
                Err(err) => {
                    log::warn!(
                        "{}: profiling window unreadable, reporting no measurement: {err}",
                        A::BACKEND
                    );
                    None
                }
            }
        }))
    }

    /// Close a window without measuring it; its events go back to the pool.
    ///
    /// # Errors
    ///
    /// [`ProfileError::ForeignToken`] and [`ProfileError::StaleToken`], as for
    /// [`stop`](Self::stop).
    pub fn abandon(&mut self, token: ProfileToken) -> Result<(), ProfileError> {
        if let Err(err) = self.take(token)? {
            log::warn!("{}: abandoned a window that had failed: {err}", A::BACKEND);
        }
        Ok(())
    }

    /// Mark every open window failed with `error`: each one's `stop` returns
    /// it. For the caller that learned of a device fault elsewhere; the
    /// profiler does this itself for faults its own calls meet.
    pub fn fail_open_windows(&mut self, error: &DriverError) {
        for slot in &mut self.slots {
            if let Some(window) = &mut slot.window {
                if let Err(earlier) = window
                    && earlier != error
                {
                    log::warn!("{}: a failed window failed again: {earlier}", A::BACKEND);
                }
                *window = Err(error.clone());
            }
        }
    }

    /// How many windows are open.
    pub fn open_windows(&self) -> usize {
        self.open
    }

    /// Half-width of the current anchor's bracket: how far a window's
    /// placement can be off, beyond the driver's own resolution. `None`
    /// before the first anchor.
    pub fn anchor_uncertainty(&self) -> Option<Duration> {
        self.anchor.as_ref().map(|anchor| anchor.uncertainty())
    }

    /// Events idle in the pool, waiting for reuse.
    pub fn idle_events(&self) -> usize {
        self.pool.idle()
    }

    fn open_window(&mut self, stream: A::Stream) -> Window<A> {
        let anchor = self.fresh_anchor()?;
        let start = self.pool.take()?;
        A::event_record(start.raw(), stream)?;
        Ok(Opened { start, anchor })
    }

    fn fresh_anchor(&mut self) -> Result<Arc<Anchor<A>>, DriverError> {
        let now = (self.config.host_clock)();
        if let Some(anchor) = &self.anchor
            && !anchor.stale(now)
        {
            return Ok(Arc::clone(anchor));
        }
        match self.calibrate() {
            Ok(anchor) => {
                let anchor = Arc::new(anchor);
                self.anchor = Some(Arc::clone(&anchor));
                Ok(anchor)
            }
            Err(err) => match &self.anchor {
                Some(old) if !err.is_device_poisoned() => {
                    log::warn!(
                        "{}: anchor refresh failed, keeping the previous anchor: {err}",
                        A::BACKEND
                    );
                    Ok(Arc::clone(old))
                }
                _ => Err(err),
            },
        }
    }

    /// A new anchor on the private stream, placed by the drift fit; a
    /// stream made here for it is released again if it cannot be taken.
    fn calibrate(&mut self) -> Result<Anchor<A>, DriverError> {
        let made_stream = self.anchor_stream.is_none();
        let stream = match &self.anchor_stream {
            Some(stream) => stream.raw(),
            None => self.anchor_stream.insert(OwnedStream::create()?).raw(),
        };
        let bracket = Bracket::take(
            &self.pool,
            stream,
            self.config.calibration_samples,
            self.config.host_clock,
        )
        .inspect_err(|_| {
            if made_stream {
                self.anchor_stream = None;
            }
        })?;
        let chain_ns = self.chain_position(&bracket);
        let placement = self.fit.admit(
            bracket.midpoint(),
            bracket.width / 2,
            chain_ns,
            self.config.anchor_max_age,
        );
        Ok(Anchor::new(
            bracket,
            placement.instant,
            placement.scale,
            chain_ns,
            placement.max_age,
        ))
    }

    /// Device time from the start of the anchor chain to `bracket`'s event,
    /// read from the previous anchor; a new chain when there is none to read
    /// from.
    fn chain_position(&mut self, bracket: &Bracket<A>) -> f64 {
        let Some(previous) = &self.anchor else {
            self.fit.restart();
            return 0.0;
        };
        if bracket
            .midpoint()
            .saturating_duration_since(previous.measured())
            > MAX_GAP
        {
            self.fit.restart();
            return 0.0;
        }
        match A::event_elapsed(previous.event(), bracket.event.raw()) {
            Ok(step) => previous.chain_ns() + step.as_nanos() as f64,
            Err(err) => {
                log::warn!("{}: drift estimate restarted: {err}", A::BACKEND);
                self.fit.restart();
                0.0
            }
        }
    }

    fn take(&mut self, token: ProfileToken) -> Result<Window<A>, ProfileError> {
        if token.profiler != self.id {
            return Err(ProfileError::ForeignToken);
        }
        let slot = self
            .slots
            .get_mut(token.slot)
            .filter(|slot| slot.generation == token.generation)
            .ok_or(ProfileError::StaleToken)?;
        let window = slot.window.take().ok_or(ProfileError::StaleToken)?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(token.slot);
        self.open -= 1;
        Ok(window)
    }

    fn note_fault(&mut self, err: &DriverError) {
        if err.is_device_poisoned() {
            self.fail_open_windows(err);
        }
    }
}

impl<A: EventApi> Drop for EventProfiler<A> {
    /// Windows still open go back to the pool; an error one of them holds
    /// would otherwise reach no one, so it is logged.
    fn drop(&mut self) {
        for slot in &mut self.slots {
            if let Some(Err(err)) = slot.window.take() {
                log::warn!("{}: dropped with a failed window open: {err}", A::BACKEND);
            }
        }
    }
}

impl<A: EventApi> std::fmt::Debug for EventProfiler<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventProfiler")
            .field("backend", &A::BACKEND)
            .field("open_windows", &self.open)
            .field("anchor_uncertainty", &self.anchor_uncertainty())
            .finish_non_exhaustive()
    }
}

fn read_window<A: EventApi>(
    anchor: &Anchor<A>,
    start: &PooledEvent<A>,
    end: &PooledEvent<A>,
) -> Result<ProfileTicks, DriverError> {
    // The span first: waiting for the end, if it was not reached yet, also
    // covers the start on one stream, and a window read after the device
    // got there costs no wait at all.
    let span = reading::<A>(start.raw(), end.raw(), end.raw())?;
    let offset = reading::<A>(anchor.event(), start.raw(), start.raw())?;
    let begin = anchor.place(offset);
    Ok(ProfileTicks::from_start_end(
        begin,
        begin + anchor.to_host(span),
    ))
}

/// Elapsed time from `from` to `to`, waiting for `until` and asking again if
/// the driver says they were not reached yet.
fn reading<A: EventApi>(
    from: &A::Event,
    to: &A::Event,
    until: &A::Event,
) -> Result<Duration, DriverError> {
    match A::event_elapsed(from, to) {
        Err(err) if err.is_not_ready() => {
            log::debug!(
                "{}: window not reached yet, waiting for it: {err}",
                A::BACKEND
            );
            A::event_wait(until)?;
            A::event_elapsed(from, to)
        }
        reading => reading,
    }
}
