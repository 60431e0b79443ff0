//! Device-timed windows on streams, placed on the host clock.

mod chain;
pub(crate) mod token;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

use crate::anchoring::AnchorApi;
use crate::anchoring::refresh::{Anchoring, WindowAnchor};
use crate::arena::{Arena, Key};
use crate::config::ProfilerConfig;
use crate::driver::{DriverError, ErrorKind};
use crate::errors::ProfileError;
use crate::events::owned::OwnedEvent;
use crate::events::point::Point;
use crate::events::pool::EventPool;
use crate::limits::Limits;
use crate::profiler::token::ProfileToken;
use crate::waiting::placed_window::{PlacedWindow, Resolving};
use crate::waiting::reading::{Inputs, LaneOf};
use crate::waiting::resolver;

/// Timing windows on streams, with device-measured durations placed on the
/// host clock.
///
/// Each window's start is placed as `anchor + elapsed(anchor, start)` and its
/// end as `start + elapsed(start, end)`: the span is read directly from the
/// device, never as the difference of two offsets that each carry the `f32`
/// rounding of their distance from the anchor.
///
/// The anchor is taken on a private non-blocking stream, so taking it never
/// drains the caller's streams, and on the library's calibrator thread, so
/// `start()` and `stop()` never wait; each window keeps the anchor it
/// started under, or rides the one being taken (see
/// [`start`](Self::start)).
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
/// - The bracket is taken [`calibration_samples`](crate::AnchorConfig::calibration_samples)
///   times and the tightest kept; the calibration polls the anchor event
///   briefly before it waits, so a blocking-sync wait's late wake-up does
///   not widen it.
/// - Where the driver stamps on a host clock it can name
///   ([`AnchorApi::pairing`]: PoCL's `CLOCK_MONOTONIC_RAW`), that stamp
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
/// to [`anchor_max_age`](crate::AnchorConfig::anchor_max_age). With the fit off
/// ([`drift_correction`](crate::AnchorConfig::drift_correction)), each anchor
/// stands alone at rate 1.
///
/// Each window's [`Placement::uncertainty`](crate::Placement::uncertainty) bounds both ends' error. The
/// repository's `docs/measurements.md` has the figures `cargo xtask bench`
/// measured, and `docs/design.md` what limits them.
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
/// let inner = pollster::block_on(inner).expect("measured");
/// let outer = pollster::block_on(outer).expect("measured");
/// assert!(inner.duration >= Duration::from_micros(200));
/// assert!(outer.duration >= inner.duration);
/// # drop(profiler);
/// # Sim::stream_destroy(stream)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct EventProfiler<A: AnchorApi> {
    id: u64,
    /// Windows closed so far: each end's place on its stream.
    ends: u64,
    windows: Arena<Window<A>>,
    anchoring: Anchoring<A>,
    /// The windows' events; anchors have their own.
    pool: Arc<EventPool<A>>,
    /// The pool's idle events this profiler holds aside, taken without a
    /// lock.
    spare: Vec<OwnedEvent<A>>,
    /// [`ProfilerConfig::context_current`].
    context_current: bool,
    /// Keeps the resolver thread up between windows while this lives.
    _resolver: resolver::KeepAlive,
}

/// An open window: its start event and anchor, or why it has neither (a
/// [`DriverError`] is one pointer wide: the slots stay small).
type Window<A> = Result<Opened<A>, DriverError>;

struct Opened<A: AnchorApi> {
    start: Point<A>,
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
        let id = NEXT_PROFILER.fetch_add(1, Ordering::Relaxed);
        let pool = EventPool::for_windows(
            config.max_idle_events,
            Limits {
                max_distance: config.anchor.max_anchor_distance,
                resolution: config.timer_resolution,
            },
            id,
        );
        Self {
            id,
            ends: 0,
            windows: Arena::new(),
            anchoring: Anchoring::new(config),
            pool,
            spare: Vec::new(),
            context_current: config.context_current,
            _resolver: resolver::KeepAlive::new(),
        }
    }

    /// Open a window on `stream`, after everything queued there so far.
    ///
    /// Never fails: a driver error here is kept in the window and returned by
    /// [`stop`](Self::stop), where the measurement would have been.
    ///
    /// Makes no waiting driver call. The window takes the current anchor
    /// while it is younger than
    /// [`anchor_max_age`](crate::AnchorConfig::anchor_max_age), and a refresh
    /// due by then is handed to the calibrator thread; before the first
    /// anchor, or once the current one is older, it rides the one being
    /// taken, and its reading waits for it.
    ///
    /// A calibration that failed is logged and not tried again at every
    /// `start`: it backs off, doubling up to `anchor_max_age` (the first
    /// delay and the longest are the crate's `src/tunables.rs`).
    /// Meanwhile windows keep the previous anchor; with none, the windows
    /// waiting for the failed one read `None`, and new ones fail with an
    /// error of the call "anchor calibration" that says so and quotes the
    /// failure.
    pub fn start(&mut self, stream: A::Stream) -> ProfileToken {
        let window = match self.open_window(stream) {
            Ok(opened) => Ok(opened),
            Err(err) => Err(self.noted(err)),
        };
        ProfileToken {
            profiler: self.id,
            key: self.windows.insert(window),
        }
    }

    /// `err`, once [`note_fault`](Self::note_fault) has seen it: apart,
    /// so that a window that opened is moved once, into its slot.
    #[cold]
    #[inline(never)]
    fn noted(&mut self, err: DriverError) -> DriverError {
        self.note_fault(&err);
        err
    }

    /// As [`start`](Self::start), for a caller whose contract reports a
    /// refused start at once (CubeCL's `start_profile`): the driver's error
    /// is returned here, before the work to profile is queued, and no
    /// window is kept.
    ///
    /// # Errors
    ///
    /// The driver's refusal of the window's event or its record, or of the
    /// anchor it needs (a failed calibration with no anchor before it).
    ///
    /// ```
    /// use device_events_core::{EventApi, EventProfiler, sim::Sim};
    ///
    /// let stream = Sim::stream_create_non_blocking()?;
    /// let mut profiler = EventProfiler::<Sim>::new();
    /// let token = profiler.try_start(stream)?;
    /// Sim::enqueue_work(stream, std::time::Duration::from_micros(100));
    /// let duration = profiler.stop(stream, token)?;
    /// assert!(pollster::block_on(duration.resolve()).is_some());
    /// # drop(profiler);
    /// # Sim::stream_destroy(stream)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_start(&mut self, stream: A::Stream) -> Result<ProfileToken, DriverError> {
        match self.open_window(stream) {
            Ok(opened) => Ok(ProfileToken {
                profiler: self.id,
                key: self.windows.insert(Ok(opened)),
            }),
            Err(err) => Err(self.noted(err)),
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
    /// The returned window is a future, pending until the device reaches
    /// the end of the window, then resolving to its [`Placement`](crate::Placement)
    /// on the host clock, with a bound on the placement's error, or to
    /// `None` (logged) if the driver could not read it. It never blocks the
    /// thread that polls it: a window not yet reached is asked after by the
    /// library's resolver thread, which wakes the future.
    ///
    /// ```
    /// use device_events_core::{EventApi, EventProfiler, OwnedStream, sim::Sim};
    /// use std::time::Duration;
    ///
    /// let stream = OwnedStream::<Sim>::new()?;
    /// let mut profiler = EventProfiler::<Sim>::new();
    /// let window = profiler.start(stream.get());
    /// Sim::enqueue_work(stream.get(), Duration::from_micros(100));
    /// let window = profiler.stop(stream.get(), window)?;
    /// let placed = pollster::block_on(window).expect("measured");
    /// assert!(placed.duration >= Duration::from_micros(100));
    /// // Both ends lie within `placed.uncertainty` of where the device was.
    /// assert!(placed.uncertainty < Duration::from_millis(1));
    /// # drop(profiler);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
    ) -> Result<PlacedWindow<A>, ProfileError> {
        Ok(PlacedWindow {
            resolving: self.close(stream, token)?,
        })
    }

    /// Record the window's end; the future reads it once the device is there.
    fn close(
        &mut self,
        stream: A::Stream,
        token: ProfileToken,
    ) -> Result<Resolving<A>, ProfileError> {
        let opened = self.take(token)?;
        let opened = opened?;
        let end = self.recorded(stream)?;
        Ok(self.resolving(opened, Point::Own(end), stream))
    }
    /// An event of the pool, recorded on `stream`.
    #[inline]
    fn recorded(&mut self, stream: A::Stream) -> Result<OwnedEvent<A>, DriverError> {
        let event = match self.event() {
            Ok(event) => event,
            Err(err) => return Err(self.noted(err)),
        };
        match self.record(&event, stream) {
            Ok(()) => Ok(event),
            Err(err) => Err(self.noted(err)),
        }
    }

    /// The future of a window whose end is recorded on `stream`.
    fn resolving(&mut self, opened: Opened<A>, end: Point<A>, stream: A::Stream) -> Resolving<A> {
        self.ends += 1;
        let lane = match A::stream_key(stream) {
            Some(stream) => LaneOf {
                stream,
                thread: resolver::this_thread(),
                seq: self.ends,
            },
            None => LaneOf::NONE,
        };
        Resolving::Unread(Inputs {
            anchor: opened.anchor,
            start: opened.start,
            end,
            pool: Arc::clone(&self.pool),
            lane,
        })
    }

    /// Close a window without measuring it; its events go back to the pool.
    ///
    /// # Errors
    ///
    /// [`ProfileError::ForeignToken`] and [`ProfileError::StaleToken`], as for
    /// [`stop`](Self::stop).
    pub fn abandon(&mut self, token: ProfileToken) -> Result<(), ProfileError> {
        match self.take(token)? {
            Ok(opened) => self.recycle(opened),
            Err(err) => log::warn!("{}: abandoned a window that had failed: {err}", A::BACKEND),
        }
        Ok(())
    }

    /// An unread window's own start event, back to the pool.
    fn recycle(&self, mut opened: Opened<A>) {
        self.pool.give_back([opened.start.take_own()]);
    }

    /// Mark every open window failed with `error`: each one's `stop` returns
    /// it. For the caller that learned of a device fault elsewhere; the
    /// profiler does this itself for faults its own calls meet.
    pub fn fail_open_windows(&mut self, error: &DriverError) {
        for window in self.windows.values_mut() {
            match std::mem::replace(window, Err(error.clone())) {
                Ok(mut opened) => self.pool.give_back([opened.start.take_own()]),
                Err(earlier) if earlier != *error => {
                    log::warn!("{}: a failed window failed again: {earlier}", A::BACKEND);
                }
                Err(_) => {}
            }
        }
    }

    /// How many windows are open.
    pub fn open_windows(&self) -> usize {
        self.windows.len()
    }

    /// How far the current anchor's placement can be off: the half-width of
    /// its bracket, or of what the anchors before it leave of that bracket
    /// (see the placement notes). `None` before the first anchor.
    ///
    /// It bounds the anchor, not a window: a window's placement also carries
    /// the rate's error over the window's distance from it and the
    /// readings' resolution.
    /// A window's [`Placement::uncertainty`](crate::Placement::uncertainty)
    /// gives that bound per window.
    pub fn anchor_uncertainty(&self) -> Option<Duration> {
        self.anchoring.uncertainty()
    }

    /// Events idle in the pool, waiting for reuse.
    pub fn idle_events(&self) -> usize {
        self.pool.idle()
    }

    fn open_window(&mut self, stream: A::Stream) -> Result<Opened<A>, DriverError> {
        let anchor = self.anchoring.for_window(stream)?;
        let start = self.event()?;
        self.record(&start, stream)?;
        Ok(Opened {
            start: Point::Own(start),
            anchor,
        })
    }

    /// Record a window's `event` on `stream`, on the caller's word that
    /// the context is current where it gave it.
    #[inline]
    fn record(&self, event: &OwnedEvent<A>, stream: A::Stream) -> Result<(), DriverError> {
        if self.context_current {
            A::event_record_in_current(event.raw(), stream)
        } else {
            A::event_record(event.raw(), stream)
        }
    }

    /// An event for a window, of the profiler's context (its anchor
    /// stream's), whatever context is current on this thread: a window on
    /// a stream of another context is then refused at its record.
    #[inline]
    fn event(&mut self) -> Result<OwnedEvent<A>, DriverError> {
        let anchoring = &self.anchoring;
        self.pool.take_from(&mut self.spare, || {
            let stream = anchoring.stream().ok_or_else(|| {
                DriverError::refused(
                    A::BACKEND,
                    "EventProfiler::start",
                    ErrorKind::Other,
                    "no anchor stream: the profiler has no context yet",
                )
            })?;
            A::in_context_of(stream, OwnedEvent::create)?
        })
    }

    /// The token of this profiler's window whose [`key`](ProfileToken::key)
    /// is `key`. Any word makes a token: one that names no open window
    /// (spent, or never this profiler's) is refused where it is used, as
    /// a stale token.
    ///
    /// ```
    /// use device_events_core::{EventProfiler, OwnedStream, ProfileError, sim::Sim};
    ///
    /// let stream = OwnedStream::<Sim>::new()?;
    /// let mut profiler = EventProfiler::<Sim>::new();
    /// let token = profiler.start(stream.get());
    /// assert_eq!(profiler.token(token.key()), token);
    /// // A word that names no open window is refused where it is used.
    /// let never = profiler.token(token.key() ^ 1);
    /// assert!(matches!(profiler.abandon(never), Err(ProfileError::StaleToken)));
    /// # profiler.abandon(token)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn token(&self, key: u64) -> ProfileToken {
        ProfileToken {
            profiler: self.id,
            key: crate::arena::Key::from_bits(key),
        }
    }

    /// The tokens of every window open now, for a caller that keeps a
    /// state of its own beside some of them (CubeCL's, which marks each
    /// open window failed when a launch fails).
    ///
    /// ```
    /// use device_events_core::{EventProfiler, OwnedStream, sim::Sim};
    ///
    /// let stream = OwnedStream::<Sim>::new()?;
    /// let mut profiler = EventProfiler::<Sim>::new();
    /// let (a, b) = (profiler.start(stream.get()), profiler.start(stream.get()));
    /// let open: Vec<_> = profiler.open_tokens().collect();
    /// assert!(open.contains(&a) && open.contains(&b) && open.len() == 2);
    /// # for token in open { profiler.abandon(token)?; }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_tokens(&self) -> impl Iterator<Item = ProfileToken> + '_ {
        self.windows.keys().map(|key| ProfileToken {
            profiler: self.id,
            key,
        })
    }

    #[inline]
    fn take(&mut self, token: ProfileToken) -> Result<Window<A>, ProfileError> {
        let key = self.key_of(token)?;
        self.windows.take(key).ok_or(ProfileError::StaleToken)
    }

    /// `token`'s key in this profiler's windows; refused when it is
    /// another profiler's.
    #[inline]
    fn key_of(&self, token: ProfileToken) -> Result<Key, ProfileError> {
        if token.profiler != self.id {
            return Err(ProfileError::ForeignToken);
        }
        Ok(token.key)
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
        for window in self.windows.values_mut() {
            if let Err(err) = window {
                log::warn!("{}: dropped with a failed window open: {err}", A::BACKEND);
            }
        }
    }
}

impl<A: AnchorApi> std::fmt::Debug for EventProfiler<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventProfiler")
            .field("backend", &A::BACKEND)
            .field("open_windows", &self.windows.len())
            .field("anchor_uncertainty", &self.anchor_uncertainty())
            .finish_non_exhaustive()
    }
}
