//! Device-timed windows on streams, placed on the host clock.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use cubecl_common::profile::{Duration, Instant, ProfileDuration, ProfileTicks};

use crate::anchoring::{Anchoring, WindowAnchor};
use crate::driver::DriverError;
use crate::gate::AnchorApi;
use crate::pool::{EventPool, PooledEvent};
use crate::resolver::{self, Answer, Job};

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
    /// A window whose end lies further than this from its anchor, on the
    /// device clock, resolves to `None` (logged): an `f32` reading's step
    /// there has outgrown a placement worth having. Only a window queued far
    /// behind its start, or one placed against an anchor whose refresh
    /// keeps failing, gets there. Default: 60 s, where the step is ~4 µs.
    pub max_anchor_distance: Duration,
    /// The driver's timestamp resolution, which [`EventApi`](crate::EventApi) does not
    /// report; part of every stated bound ([`Placement::uncertainty`]).
    /// Default: 1 µs, the coarser of CUDA's (~0.5 µs) and HIP's (~1 µs).
    pub timer_resolution: Duration,
    /// Fit the device clock's rate across anchors (see [`EventProfiler`]'s
    /// placement notes). Off, each anchor stands alone at rate 1 and is
    /// refreshed every `anchor_max_age`: for measuring what the fit buys.
    /// Default: on.
    pub drift_correction: bool,
    /// Record the anchor behind a gate where the backend has one
    /// ([`AnchorApi::gate`]), so that the record call and the launch
    /// latency fall before the bracket opens. Default: on.
    pub gated_anchor: bool,
    /// How long a gated anchor's record is given to reach its stream before
    /// the gate opens: longer than the driver's usual launch latency, or
    /// the rest of it falls inside the bracket again. Default: `None`, the
    /// gate's own ([`Gate::settle`](crate::Gate::settle): 50 µs on CUDA and HIP, none on
    /// OpenCL).
    pub gate_settle: Option<Duration>,
    /// Take the anchor's time from the driver's own host-clock stamp where
    /// it has one ([`AnchorApi::host_stamp`]), instead of a bracket.
    /// Default: on.
    pub driver_clock: bool,
}

impl Default for ProfilerConfig {
    fn default() -> Self {
        Self {
            anchor_max_age: Duration::from_secs(1),
            calibration_samples: 5,
            max_idle_events: 1024,
            host_clock: Instant::now,
            max_anchor_distance: Duration::from_secs(60),
            timer_resolution: Duration::from_micros(1),
            drift_correction: true,
            gated_anchor: true,
            gate_settle: None,
            driver_clock: true,
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
/// just before it could and the read just after the wait for it returns.
/// The common shortcut, reading the clock after the wait, puts the anchor at
/// the late edge of that bracket, so every window lands late by the wait's
/// wake-up latency, a different amount at each refresh. Here:
///
/// - **Gated** where the backend has a gate ([`AnchorApi::gate`]: CUDA's and
///   HIP's stream wait on a host-written value, an OpenCL user event): the
///   anchor is recorded behind the closed gate, and the host reads its clock
///   just before opening it, so the record call and the launch latency fall
///   before the bracket opens. Otherwise the bracket opens before the record.
/// - The bracket is taken [`calibration_samples`](ProfilerConfig::calibration_samples)
///   times and the tightest kept; the calibration polls the anchor event
///   briefly before it waits, so a blocking-sync wait's late wake-up does
///   not widen it.
/// - Where the driver stamps on a host clock it can name
///   ([`AnchorApi::host_stamp`]: PoCL's `CLOCK_MONOTONIC_RAW`), that stamp
///   is the anchor, and no bracket is needed.
///
/// Device and host clocks drift apart (crystals differ by up to ±100 ppm:
/// 100 µs per second). Successive anchors are fitted as one line, host time
/// against device time, each weighted by its bracket's width, for the rate
/// and a worst-case bound on it; a line once trusted is kept until a better
/// one replaces it. Each anchor's interval is carried forward by the exact
/// device step to the next and intersected with that anchor's bracket, so a
/// bracket stretched by a stalled wake-up is cut back to what the anchors
/// before it allow, and an anchor never leaves its own bracket: the fit can
/// narrow a placement, never widen it. Until the rate is known, anchors are
/// refreshed every few milliseconds; as the fit firms up the period grows
/// to [`anchor_max_age`](ProfilerConfig::anchor_max_age). With the fit off
/// ([`drift_correction`](ProfilerConfig::drift_correction)), each anchor
/// stands alone at rate 1.
///
/// Each window's [`Placement::uncertainty`] bounds both ends' error. The
/// README's "Placement" section has the figures `cargo xtask bench`
/// measured, and what limits them.
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
pub struct EventProfiler<A: AnchorApi> {
    id: u64,
    config: ProfilerConfig,
    slots: Vec<Slot<A>>,
    free: Vec<usize>,
    open: usize,
    anchoring: Anchoring<A>,
    pool: Arc<EventPool<A>>,
    /// Keeps the resolver thread up between windows while this lives.
    _resolver: resolver::Hold,
}

struct Slot<A: AnchorApi> {
    generation: u32,
    window: Option<Window<A>>,
}

/// An open window: its start event and anchor, or why it has neither.
type Window<A> = Result<Opened<A>, DriverError>;

struct Opened<A: AnchorApi> {
    start: PooledEvent<A>,
    anchor: WindowAnchor<A>,
}

static NEXT_PROFILER: AtomicU64 = AtomicU64::new(1);

impl<A: AnchorApi> Default for EventProfiler<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: AnchorApi> EventProfiler<A> {
    /// A profiler with the default [`ProfilerConfig`]. Nothing is asked of
    /// the driver until the first window.
    pub fn new() -> Self {
        Self::with_config(ProfilerConfig::default())
    }

    /// A profiler with the given configuration.
    pub fn with_config(config: ProfilerConfig) -> Self {
        let pool = EventPool::new(config.max_idle_events);
        Self {
            id: NEXT_PROFILER.fetch_add(1, Ordering::Relaxed),
            config,
            slots: Vec::new(),
            free: Vec::new(),
            open: 0,
            anchoring: Anchoring::new(config),
            pool,
            _resolver: resolver::Hold::new(),
        }
    }

    /// Open a window on `stream`, after everything queued there so far.
    ///
    /// Never fails: a driver error here is kept in the window and returned by
    /// [`stop`](Self::stop), where the measurement would have been.
    ///
    /// A calibration that failed is not tried again at every `start`: it
    /// backs off, from 1 ms doubling up to
    /// [`anchor_max_age`](ProfilerConfig::anchor_max_age). Meanwhile windows
    /// keep the previous anchor, or, before the first, fail with an error
    /// of the call "anchor calibration" that says so and quotes the failure.
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
    /// `stream` may differ from the one the window started on: a window
    /// that starts on one stream and ends on another across a fence
    /// hand-off times the whole hand-off. Its end must then come after its
    /// start on the device; one that does not (the other stream got there
    /// first) resolves to `None`, logged, never to a zero.
    ///
    /// The returned duration's future blocks until the device reaches the end
    /// of the window, then resolves to its placement on the host clock, or to
    /// `None` (logged) if the driver could not read it.
    ///
    /// # Errors
    ///
    /// [`ProfileError::ForeignToken`] and [`ProfileError::StaleToken`] for a
    /// token this profiler cannot close; [`ProfileError::Driver`] when the
    /// window failed to open, to close, or was marked failed, including a
    /// stream of a context other than the profiler's.
    pub fn stop(
        &mut self,
        stream: A::Stream,
        token: ProfileToken,
    ) -> Result<ProfileDuration, ProfileError> {
        // Built straight from the reading: one allocation per window, the
        // one `ProfileDuration` makes.
        let window = self.close(stream, token)?;
        Ok(ProfileDuration::new_device_time_maybe(async move {
            window.await.map(|placed| placed.ticks)
        }))
    }

    /// As [`stop`](Self::stop), with a bound on each resolved window's
    /// placement error.
    ///
    /// ```
    /// use device_events_core::{EventApi, EventProfiler, OwnedStream, sim::Sim};
    /// use std::time::Duration;
    ///
    /// let stream = OwnedStream::<Sim>::new()?;
    /// let mut profiler = EventProfiler::<Sim>::new();
    /// let window = profiler.start(stream.get());
    /// Sim::enqueue_work(stream.get(), Duration::from_micros(100));
    /// let window = profiler.stop_placed(stream.get(), window)?;
    /// let placed = pollster::block_on(window.resolve()).expect("measured");
    /// // Both ends lie within `placed.uncertainty` of where the device was.
    /// assert!(placed.uncertainty < Duration::from_millis(1));
    /// # drop(profiler);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`stop`](Self::stop).
    pub fn stop_placed(
        &mut self,
        stream: A::Stream,
        token: ProfileToken,
    ) -> Result<PlacedWindow, ProfileError> {
        Ok(PlacedWindow {
            future: Box::pin(self.close(stream, token)?),
        })
    }

    /// Record the window's end; the future reads it once the device is there.
    fn close(
        &mut self,
        stream: A::Stream,
        token: ProfileToken,
    ) -> Result<Resolving<A>, ProfileError> {
        let Opened { start, anchor } = self.take(token)??;
        let end = self.event().and_then(|end| {
            A::event_record(end.raw(), stream)?;
            Ok(end)
        });
        let end = end.inspect_err(|err| self.note_fault(err))?;
        let limits = Limits {
            max_distance: self.config.max_anchor_distance,
            resolution: self.config.timer_resolution,
        };
        Ok(Resolving {
            inputs: Some(Inputs {
                anchor,
                start,
                end,
                limits,
            }),
            pending: None,
        })
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

    /// How far the current anchor's placement can be off: the half-width of
    /// its bracket, or of what the anchors before it leave of that bracket
    /// (see the placement notes). `None` before the first anchor.
    ///
    /// It bounds the anchor, not a window: a window's placement also carries
    /// the rate's error over the window's distance from it and the
    /// readings' resolution.
    /// [`stop_placed`](Self::stop_placed) gives that bound per window.
    pub fn anchor_uncertainty(&self) -> Option<Duration> {
        self.anchoring.uncertainty()
    }

    /// Events idle in the pool, waiting for reuse.
    pub fn idle_events(&self) -> usize {
        self.pool.idle()
    }

    fn open_window(&mut self, stream: A::Stream) -> Window<A> {
        let anchor = self.anchoring.for_window()?;
        let start = self.event()?;
        A::event_record(start.raw(), stream)?;
        Ok(Opened { start, anchor })
    }

    /// An event for a window. One the pool has just created is first
    /// recorded on the anchor stream, which the backend refuses unless both
    /// are of one context: so every event the profiler holds is of the
    /// anchor's context, and a window on another context's stream is
    /// refused at `start` or `stop`, every time, rather than read as `None`
    /// later, or not, depending on which event the pool hands out.
    fn event(&self) -> Result<PooledEvent<A>, DriverError> {
        let (event, created) = self.pool.take_new()?;
        if created
            && let Some(stream) = self.anchoring.stream()
            && let Err(err) = A::event_record(event.raw(), stream)
        {
            // Of another context: released, never pooled to fail later.
            event.discard();
            let why = err.detail().unwrap_or("the driver refused it").to_owned();
            return Err(err.with_detail(format!(
                "{why}; a profiler belongs to the context current at its first window, \
                 and this thread's current context is another"
            )));
        }
        Ok(event)
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

impl<A: AnchorApi> Drop for EventProfiler<A> {
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

impl<A: AnchorApi> std::fmt::Debug for EventProfiler<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventProfiler")
            .field("backend", &A::BACKEND)
            .field("open_windows", &self.open)
            .field("anchor_uncertainty", &self.anchor_uncertainty())
            .finish_non_exhaustive()
    }
}

/// What a window's reading is checked against.
#[derive(Clone, Copy)]
struct Limits {
    max_distance: Duration,
    resolution: Duration,
}

/// A closed window, resolving to its placement and a bound on its error.
///
/// From [`EventProfiler::stop_placed`];
/// [`into_profile_duration`](Self::into_profile_duration) gives the
/// `cubecl-common` type [`EventProfiler::stop`] returns.
pub struct PlacedWindow {
    future: Pin<Box<dyn Future<Output = Option<Placement>> + Send>>,
}

impl PlacedWindow {
    /// The window's placement once the device has reached its end, or
    /// `None` (logged) when it could not be read.
    pub async fn resolve(self) -> Option<Placement> {
        self.future.await
    }

    /// The placement if the window can be read now, without waiting:
    /// `None` while the device has not reached its end (the resolver thread
    /// then asks for it, without waiting, until it has), `Some` with the
    /// reading once it has. After a
    /// `Some`, the window is spent: `resolve` gives `None`.
    ///
    /// ```
    /// use device_events_core::{EventApi, EventProfiler, OwnedStream, sim::Sim};
    /// use std::time::Duration;
    ///
    /// let stream = OwnedStream::<Sim>::new()?;
    /// let mut profiler = EventProfiler::<Sim>::new();
    /// let window = profiler.start(stream.get());
    /// Sim::enqueue_work(stream.get(), Duration::from_millis(20));
    /// let mut window = profiler.stop_placed(stream.get(), window)?;
    /// assert!(window.try_resolve().is_none(), "20 ms of work still queued");
    /// let placed = loop {
    ///     // A server would do other work here instead of sleeping.
    ///     match window.try_resolve() {
    ///         Some(placed) => break placed.expect("read"),
    ///         None => std::thread::sleep(Duration::from_millis(1)),
    ///     }
    /// };
    /// assert!(placed.ticks.duration() >= Duration::from_millis(20));
    /// # drop(profiler);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_resolve(&mut self) -> Option<Option<Placement>> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match self.future.as_mut().poll(&mut cx) {
            Poll::Ready(placed) => {
                self.future = Box::pin(std::future::ready(None));
                Some(placed)
            }
            Poll::Pending => None,
        }
    }

    /// The window as a [`ProfileDuration`], without the bound.
    pub fn into_profile_duration(self) -> ProfileDuration {
        ProfileDuration::new_device_time_maybe(async move {
            self.future.await.map(|placed| placed.ticks)
        })
    }
}

impl std::fmt::Debug for PlacedWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacedWindow").finish_non_exhaustive()
    }
}

/// A window placed on the host clock.
#[derive(Debug)]
pub struct Placement {
    /// Where the window lies on the host clock.
    pub ticks: ProfileTicks,
    /// How far either end can be from where the device really was, on the
    /// host clock: the anchor's bracket half-width, how far the drift fit
    /// moved the anchor off the bracket's midpoint, the rate's worst-case
    /// error (the fit's, or a crystal's ±100 ppm before the fit is trusted)
    /// over the distance from the anchor, and each reading's resolution
    /// ([`ProfilerConfig::timer_resolution`]) and `f32` rounding. It holds
    /// when the device stamps the anchor between the host's clock reads
    /// around its record and wait, as any driver does whose records are not
    /// stamped before they are queued.
    pub uncertainty: Duration,
}

/// Why a window resolved to `None`, or is not read yet.
enum Unread {
    Driver(DriverError),
    /// The anchor it is placed on is still being taken.
    NoAnchorYet,
    NoAnchor(DriverError),
    Reversed {
        by: Duration,
    },
    TooFar {
        distance: Duration,
        bound: Duration,
    },
}

impl Unread {
    /// Not read yet, rather than unreadable: asked again later.
    fn is_not_ready(&self) -> bool {
        match self {
            Self::Driver(err) => err.is_not_ready(),
            Self::NoAnchorYet => true,
            _ => false,
        }
    }
}

impl From<DriverError> for Unread {
    fn from(err: DriverError) -> Self {
        Self::Driver(err)
    }
}

impl std::fmt::Display for Unread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Driver(err) => err.fmt(f),
            Self::NoAnchorYet => f.write_str("its anchor is still being taken"),
            Self::NoAnchor(err) => write!(f, "it has no anchor to be placed on: {err}"),
            Self::Reversed { by } => write!(
                f,
                "its end precedes its start by {by:?}: it was stopped on a stream \
                 that got there first"
            ),
            Self::TooFar { distance, bound } => write!(
                f,
                "it ends {distance:?} from its anchor, past the {bound:?} bound \
                 (the anchor could not be refreshed, or the window was queued far behind)"
            ),
        }
    }
}

/// The window's placement, read without waiting: the driver's "not ready"
/// when its end (or start) was not reached yet.
fn read_window<A: AnchorApi>(inputs: &Inputs<A>) -> Result<Placement, Unread> {
    let Inputs {
        anchor,
        start,
        end,
        limits,
    } = inputs;
    let anchor = match anchor.get() {
        None => return Err(Unread::NoAnchorYet),
        Some(Err(err)) => return Err(Unread::NoAnchor(err.clone())),
        Some(Ok(anchor)) => anchor,
    };
    // The span first: the end not reached yet is the common "not ready",
    // and answers it with one reading.
    let span = A::event_elapsed(start.raw(), end.raw())?;
    if span.is_zero() {
        // A reversed window reads as zero too (the backends clamp negative
        // readings): read the other way round, it is not.
        let by = A::event_elapsed(end.raw(), start.raw())?;
        if !by.is_zero() {
            return Err(Unread::Reversed { by });
        }
    }
    // An anchor taken after the window started (the first, taken off the
    // caller's thread) lies after its start: the offset is negative, and
    // read the other way round, as the backends clamp negative readings.
    let after = A::event_elapsed(anchor.event(), start.raw())?;
    let before = if after.is_zero() {
        A::event_elapsed(start.raw(), anchor.event())?
    } else {
        Duration::ZERO
    };
    let distance = (after + span).max(before);
    if distance > limits.max_distance {
        return Err(Unread::TooFar {
            distance,
            bound: limits.max_distance,
        });
    }
    let begin = if before.is_zero() {
        anchor.place(after)
    } else {
        anchor.place_before(before)
    };
    let offset = after.max(before);
    let uncertainty = anchor.placement_bound(offset)
        + reading_error(offset, limits.resolution)
        + anchor.rate_error(span)
        + reading_error(span, limits.resolution);
    Ok(Placement {
        ticks: ProfileTicks::from_start_end(begin, begin + anchor.to_host(span)),
        uncertainty,
    })
}

/// What a window's reading needs.
struct Inputs<A: AnchorApi> {
    anchor: WindowAnchor<A>,
    start: PooledEvent<A>,
    end: PooledEvent<A>,
    limits: Limits,
}

/// The reading, or `None` with the reason logged.
fn placement_or_none<A: AnchorApi>(read: Result<Placement, Unread>) -> Option<Placement> {
    read.inspect_err(|why| {
        log::warn!(
            "{}: profiling window unreadable, reporting no measurement: {why}",
            A::BACKEND
        );
    })
    .ok()
}

/// A closed window's reading: at once when the device is already past its
/// end, else by the resolver thread, which asks without waiting until it
/// is; neither thread blocks in a driver wait.
struct Resolving<A: AnchorApi> {
    /// Until the first poll.
    inputs: Option<Inputs<A>>,
    /// Once handed to the resolver.
    pending: Option<Arc<Pending<A>>>,
}

/// A window the resolver waits for.
struct Pending<A: AnchorApi> {
    /// Taken by the resolver when it starts, or by the future dropped
    /// before that, which then releases the events itself.
    inputs: Mutex<Option<Inputs<A>>>,
    answer: Answer<Option<Placement>>,
}

impl<A: AnchorApi> Job for Pending<A> {
    fn attempt(&self) -> bool {
        let mut inputs = self.inputs.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(taken) = inputs.as_ref() else {
            // The future was dropped, and released the events itself.
            return true;
        };
        A::own_thread();
        let read = read_window(taken);
        if let Err(why) = &read
            && why.is_not_ready()
        {
            log::trace!("{}: window not read yet: {why}", A::BACKEND);
            return false;
        }
        // The events go back before the waiter hears: a caller that counts
        // handles right after resolving sees them released.
        drop(inputs.take());
        drop(inputs);
        self.answer.fill(placement_or_none::<A>(read));
        true
    }

    fn abandon(&self) {
        // The events go back (or are released) whatever the reading left.
        drop(
            self.inputs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        self.answer.fill(None);
    }
}

// Nothing of it is ever pinned in place: the inputs move to the resolver.
impl<A: AnchorApi> Unpin for Resolving<A> {}

impl<A: AnchorApi> Future for Resolving<A> {
    type Output = Option<Placement>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Placement>> {
        let this = self.get_mut();
        if let Some(inputs) = this.inputs.take() {
            match read_window(&inputs) {
                Err(why) if why.is_not_ready() => {
                    log::debug!(
                        "{}: window not read yet, handed to the resolver thread: {why}",
                        A::BACKEND
                    );
                    let pending = Arc::new(Pending {
                        inputs: Mutex::new(Some(inputs)),
                        answer: Answer::new(),
                    });
                    // The waker first: the resolver may answer at once.
                    let _ = pending.answer.take_or_wait(cx.waker());
                    resolver::submit(Arc::clone(&pending) as Arc<dyn Job>);
                    this.pending = Some(pending);
                    return Poll::Pending;
                }
                read => return Poll::Ready(placement_or_none::<A>(read)),
            }
        }
        match &this.pending {
            Some(pending) => match pending.answer.take_or_wait(cx.waker()) {
                Some(placed) => Poll::Ready(placed),
                None => Poll::Pending,
            },
            None => Poll::Ready(None),
        }
    }
}

impl<A: AnchorApi> Drop for Resolving<A> {
    /// Dropped unresolved: the events go back now, unless the resolver is
    /// already waiting on them, when they go back as it finishes.
    fn drop(&mut self) {
        if let Some(pending) = &self.pending {
            let inputs = pending
                .inputs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            drop(inputs);
        }
    }
}

/// How far an elapsed reading of `reading` can be off: the driver's
/// resolution, half the `f32` millisecond step there, and the nanosecond
/// rounding of the conversion.
pub(crate) fn reading_error(reading: Duration, resolution: Duration) -> Duration {
    #[allow(clippy::cast_possible_truncation)]
    let ms = (reading.as_secs_f64() * 1e3) as f32;
    let step_ms = f64::from(ms.next_up() - ms);
    resolution + Duration::from_secs_f64(step_ms / 2e3) + Duration::from_nanos(1)
}
