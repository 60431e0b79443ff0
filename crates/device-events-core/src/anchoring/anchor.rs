//! The anchor: one device event whose time on the host clock is known, from
//! which every window's placement is measured.
//!
//! # Why a calibrated bracket
//!
//! The device stamps the anchor event at some instant between the host clock
//! read just before the record is queued and the read just after the wait for
//! it returns; nothing narrower is observable from the host. Reading the host
//! clock only after the wait (the common shortcut) places the anchor at the
//! late edge of that bracket, so every window built on it lands late by the
//! wait's wake-up latency: several microseconds when the wait spins, tens to
//! hundreds when the thread was descheduled, and a different amount each
//! refresh. Taking the bracket several times, keeping the tightest and placing
//! the anchor at its midpoint removes that bias, and its half-width is a
//! bound on the error that callers can check placements against.

use std::sync::Arc;

use std::time::{Duration, Instant};

use crate::EventApi;
use crate::anchoring::drift::AnchorPlacement;
use crate::anchoring::line::HostLine;
use crate::anchoring::polling::{self, Polled};
use crate::anchoring::{AnchorApi, Closed, Gate};
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

/// One calibration: the anchor event and the host-clock interval that
/// holds the instant the device stamped it.
pub(crate) struct Bracket<A: EventApi> {
    pub(crate) event: PooledEvent<A>,
    pub(crate) before: Instant,
    pub(crate) width: Duration,
}

/// How a calibration takes its brackets.
pub(crate) struct Calibration<'a> {
    pub(crate) samples: usize,
    pub(crate) clock: fn() -> Instant,
    /// Where the stream waits behind a host-written value.
    pub(crate) gate: Option<&'a mut (dyn Gate + 'static)>,
    /// The longest the host waits for the stream to reach the closed gate
    /// before it opens it; `None`: as long as the gate says.
    pub(crate) settle: Option<Duration>,
    /// Ask the driver for its own host-clock stamp first.
    pub(crate) driver_clock: bool,
}

impl<A: AnchorApi> Bracket<A> {
    /// Record and wait for an anchor event `samples` times on `stream`,
    /// keeping the reading with the tightest host bracket. A driver that
    /// stamps on a host clock it names needs one sample and no bracket.
    ///
    /// Also says whether the gate refused to close (a driver that exports
    /// the call but cannot serve it): the calibration went on without it,
    /// and the caller should drop it.
    pub(crate) fn take(
        pool: &Arc<EventPool<A>>,
        stream: A::Stream,
        mut how: Calibration<'_>,
    ) -> Result<(Self, bool), DriverError> {
        let mut best: Option<Self> = None;
        let gated = how.gate.is_some();
        for _ in 0..how.samples.max(1) {
            if crate::threads::stopping() {
                return Err(exiting::<A>());
            }
            // No lock is held between samples: a fork under way goes
            // first, rather than wait for every sample of a long
            // calibration.
            outside_library_work(|| ());
            let event = pool.take()?;
            let sample = Self::sample(pool, &event, stream, &mut how);
            let (before, width) = match sample {
                Ok(sample) => sample,
                Err(err) => {
                    // Released, never pooled: a record refused because the
                    // event is of another context would otherwise be handed
                    // to a window unchecked.
                    event.discard();
                    return Err(err);
                }
            };
            if how.driver_clock
                && let Some(stamp) = A::host_stamp(event.raw())?
            {
                let stamped = Self {
                    event,
                    before: stamp.at - stamp.uncertainty,
                    width: stamp.uncertainty * 2,
                };
                return Ok((stamped, gated && how.gate.is_none()));
            }
            if best.as_ref().is_none_or(|best| width < best.width) {
                // The previous best, if any, goes back to the pool here.
                best = Some(Self {
                    event,
                    before,
                    width,
                });
            }
        }
        let best = best.ok_or_else(|| {
            DriverError::refused(
                A::BACKEND,
                "anchor calibration",
                crate::ErrorKind::Other,
                "no sample taken",
            )
        })?;
        Ok((best, gated && how.gate.is_none()))
    }

    /// One bracket around `event`: gated where the gate serves, else plain;
    /// a gate that refuses is dropped from `how`.
    fn sample(
        pool: &Arc<EventPool<A>>,
        event: &PooledEvent<A>,
        stream: A::Stream,
        how: &mut Calibration<'_>,
    ) -> Result<(Instant, Duration), DriverError> {
        if let Some(gate) = how.gate.as_deref_mut() {
            let gated = Self::gated(pool, event, stream, gate, how.clock, how.settle)?;
            if let Some(bracket) = gated {
                return Ok(bracket);
            }
            how.gate = None;
        }
        let before = (how.clock)();
        A::event_record(event.raw(), stream)?;
        reach(event)?;
        Ok((before, (how.clock)().saturating_duration_since(before)))
    }

    /// The record queued behind the closed gate; once the stream has
    /// reached the gate, the host reads its clock, opens the gate and
    /// waits. The gate opens on every path, errors included. `None` when
    /// the gate refused to close: nothing was queued.
    ///
    /// A mark recorded just ahead of the gate says when the stream reached
    /// it, so the gate is closed on the device only as long as the host
    /// takes to see the mark and open it: any work sharing the stream's
    /// hardware queue waits that long, not a fixed settle time. The host
    /// waits for the mark at most `settle`, after which the stream is
    /// behind other work, holds nobody, and the gate opens. The hold is a
    /// soft bound: it lasts until this thread, polling, is scheduled to
    /// see the mark and open the gate, so a loaded machine's scheduling
    /// latency adds to it.
    fn gated(
        pool: &Arc<EventPool<A>>,
        event: &PooledEvent<A>,
        stream: A::Stream,
        gate: &mut (dyn Gate + 'static),
        clock: fn() -> Instant,
        settle: Option<Duration>,
    ) -> Result<Option<(Instant, Duration)>, DriverError> {
        let settle = settle.unwrap_or_else(|| gate.settle());
        let mark = if settle.is_zero() {
            None
        } else {
            let mark = pool.take()?;
            if let Err(err) = A::event_record(mark.raw(), stream) {
                mark.discard();
                return Err(err);
            }
            Some(mark)
        };
        let closed = match Closed::<A>::close(gate) {
            Ok(closed) => closed,
            Err(err) => {
                log::warn!(
                    "{}: the anchor's gate is refused, anchoring without: {err}",
                    A::BACKEND
                );
                return Ok(None);
            }
        };
        A::event_record(event.raw(), stream)?;
        if let Some(mark) = mark
            && let Err(err) = arrive(&mark, settle)
        {
            // Never pooled again: an event the driver failed on.
            mark.discard();
            return Err(err);
        }
        let before = clock();
        closed.open()?;
        reach(event)?;
        Ok(Some((before, clock().saturating_duration_since(before))))
    }
}

/// Return once the device has reached `mark`, or `bound` has passed
/// ([`polling::arrive`]).
fn arrive<A: AnchorApi>(mark: &PooledEvent<A>, bound: Duration) -> Result<(), DriverError> {
    match polling::arrive(|| A::poll(mark.raw()), bound)? {
        Polled::Stopping => Err(exiting::<A>()),
        Polled::Reached | Polled::GaveUp | Polled::CannotAsk => Ok(()),
    }
}

/// Return once the device has reached `event`: polling where the backend
/// can ([`polling::reach`]), else waiting. Left with an error between asks
/// once the process began exiting
/// ([`stop_driver_calls`](crate::process::stop_driver_calls)): an anchor stream
/// behind a long kernel must not keep this thread in the driver through
/// the driver's own exit handlers.
fn reach<A: AnchorApi>(event: &PooledEvent<A>) -> Result<(), DriverError> {
    match polling::reach(|| A::poll(event.raw()), Duration::MAX)? {
        Polled::Reached => Ok(()),
        // No give-up was asked for: only an exit ends the asking early.
        Polled::Stopping | Polled::GaveUp => Err(exiting::<A>()),
        // A wait in the driver, for a backend that cannot ask: outside the
        // calibrator's piece of work, so that a fork does not wait for the
        // device. The core holds no lock of its here; the checked layer
        // holds a stream's entry across a wait only where asking reads the
        // event's stream (HIP), and HIP polls.
        Polled::CannotAsk => outside_library_work(|| A::event_wait(event.raw())),
    }
}

/// A calibration left because the process is exiting.
fn exiting<A: EventApi>() -> DriverError {
    DriverError::refused(
        A::BACKEND,
        "anchor calibration",
        crate::ErrorKind::Other,
        "the process is exiting (stop_driver_calls): the calibration was left",
    )
}

impl<A: EventApi> Bracket<A> {
    pub(crate) fn midpoint(&self) -> Instant {
        self.before + self.width / 2
    }
}

impl<A: EventApi> Anchor<A> {
    pub(crate) fn new(bracket: Bracket<A>, placement: AnchorPlacement, chain: (f64, f64)) -> Self {
        let measured = bracket.midpoint();
        Self {
            measured,
            event: bracket.event,
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
