//! The anchor: one device event whose time on the host clock is known, from
//! which every window's placement is measured.
//!
//! Its bracket is taken by [`bracket`](super::bracket)'s loop, through
//! [`EventProbe`].

use std::sync::Arc;

use std::time::{Duration, Instant};

use crate::EventApi;
use crate::anchoring::bracket::Probe;
use crate::anchoring::drift::AnchorPlacement;
use crate::anchoring::line::HostLine;
use crate::anchoring::{AnchorApi, Gate};
use crate::driver::DriverError;
use crate::events::pool::{EventPool, PooledEvent};
use crate::fork_gate::outside_library_work;

/// A device event together with where it sits on the host clock.
pub(crate) struct Anchor<A: EventApi> {
    event: PooledEvent<A>,
    /// Midpoint of the tightest bracket, as measured.
    measured: Instant,
    /// Where the device reached `event` on the host clock, and the rate
    /// of the device clock against the host's: the bracket's midpoint, or
    /// the middle of what the bracket and the anchors before it leave (see
    /// the drift module).
    line: HostLine,
    /// Device time since the start of the anchor chain, in nanoseconds.
    chain_ns: f64,
    /// How far `chain_ns` can be off: the readings' error summed.
    chain_error_ns: f64,
    /// Refresh once the host clock is past this: `max_age` after it was
    /// measured, shorter while the drift is unknown.
    /// `None`: never (an age too long to add to the clock).
    stale_after: Option<Instant>,
}

/// An event backend's stamps for the bracket loop: anchor events from
/// `pool`, recorded on `stream`, behind `gate` where it is kept.
pub(crate) struct EventProbe<'a, A: EventApi> {
    pub(crate) pool: &'a Arc<EventPool<A>>,
    pub(crate) stream: A::Stream,
    pub(crate) gate: &'a mut Option<Box<dyn Gate>>,
    /// Set once anything is enqueued on `stream`: then its destroy may
    /// wait for that work.
    pub(crate) enqueued: &'a mut bool,
}

impl<A: AnchorApi> Probe for EventProbe<'_, A> {
    type Stamp = PooledEvent<A>;
    const BACKEND: &'static str = A::BACKEND;
    const MARKS: bool = true;
    /// Only an exit ends the asking early.
    const GIVE_UP: Duration = Duration::MAX;

    fn gate(&mut self) -> Option<&mut (dyn Gate + 'static)> {
        self.gate.as_deref_mut()
    }

    fn drop_gate(&mut self) {
        *self.gate = None;
    }

    /// The gate's wait is queued outside the calibrator's piece of work,
    /// as a stamp is (see [`queue`](Self::queue)).
    fn close_gate(&mut self) -> Option<Result<(), DriverError>> {
        let gate = self.gate.as_deref_mut()?;
        Some(outside_library_work(|| gate.close()))
    }

    /// Recorded outside the calibrator's piece of work: an enqueue waits in
    /// the driver while the device's queue is full, which a hung device's
    /// work can keep it, and a fork must not wait for the device. Of the
    /// library's locks the record holds the anchor stream's table entry
    /// (and, on OpenCL, the anchor event's marker), each of a stream or an
    /// event that this thread's calibration holds, which a child never
    /// releases.
    fn queue(&mut self) -> Result<PooledEvent<A>, DriverError> {
        let event = self.pool.take()?;
        *self.enqueued = true;
        match outside_library_work(|| A::event_record(event.raw(), self.stream)) {
            Ok(()) => Ok(event),
            Err(err) => {
                self.discard(event);
                Err(err)
            }
        }
    }

    fn written(&mut self, event: &PooledEvent<A>) -> Option<Result<bool, DriverError>> {
        A::poll(event.raw())
    }

    /// A wait in the driver, for a backend that cannot ask: outside the
    /// calibrator's piece of work, so that a fork does not wait for the
    /// device. The core holds no lock of its here; the checked layer holds
    /// a stream's entry across a wait only where asking reads the event's
    /// stream (HIP), and HIP polls.
    fn wait(&mut self, event: &PooledEvent<A>) -> Result<(), DriverError> {
        outside_library_work(|| A::event_wait(event.raw()))
    }

    /// Released, never pooled: a record refused because the event is of
    /// another context would otherwise be handed to a window unchecked.
    fn discard(&mut self, event: PooledEvent<A>) {
        event.discard();
    }
}

impl<A: EventApi> Anchor<A> {
    pub(crate) fn new(
        event: PooledEvent<A>,
        measured: Instant,
        placement: AnchorPlacement,
        chain: (f64, f64),
    ) -> Self {
        Self {
            measured,
            event,
            line: HostLine::of(&placement),
            chain_ns: chain.0,
            chain_error_ns: chain.1,
            stale_after: measured.checked_add(placement.max_age),
        }
    }

    pub(crate) fn event(&self) -> &A::Event {
        self.event.raw()
    }

    /// When the anchor was measured, on the host clock.
    pub(crate) fn measured(&self) -> Instant {
        self.measured
    }

    /// How far the anchor's placement can be from the truth.
    pub(crate) fn uncertainty(&self) -> Duration {
        self.line.uncertainty
    }

    /// The host-clock line the anchor's readings are placed on.
    pub(crate) fn line(&self) -> &HostLine {
        &self.line
    }

    pub(crate) fn chain_ns(&self) -> f64 {
        self.chain_ns
    }

    pub(crate) fn chain_error_ns(&self) -> f64 {
        self.chain_error_ns
    }

    /// Whether the anchor is older than its bound at `now`.
    pub(crate) fn stale(&self, now: Instant) -> bool {
        self.stale_after.is_some_and(|after| now > after)
    }
}
