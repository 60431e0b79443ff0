//! The one bracket loop, for event backends and stamp clocks alike, and
//! the one policy for a driver's own pairing of its clock with the host's.
//!
//! The device writes a stamp between the host clock read just before it is
//! queued (or its gate opened) and the read just after the host saw it
//! written; nothing narrower is observable from the host. Reading only
//! after the wait places the anchor late by the wait's wake-up latency, a
//! different amount each time; the tightest of several brackets, placed at
//! its midpoint, removes that bias, and its half-width bounds the error.

use std::time::{Duration, Instant};

use crate::anchoring::polling::{self, Polled};
use crate::anchoring::{Gate, HostStamp};
use crate::config::{DriverPairing, ProfilerConfig};
use crate::driver::DriverError;
use crate::fork_gate::outside_library_work;

/// One stamp in a device's queue: an event recorded on a stream, or a
/// stamp clock's.
pub(crate) trait Probe {
    /// A stamp queued, and once read, written.
    type Stamp;
    /// Who refuses, in errors.
    const BACKEND: &'static str;
    /// Whether a stamp of its own marks the gate, not [`Gate::reached`].
    const MARKS: bool;

    /// The gate the stamps wait behind, while one is kept.
    fn gate(&mut self) -> Option<&mut (dyn Gate + 'static)>;
    /// Go on without the gate: it would not close.
    fn drop_gate(&mut self);
    /// Queue one stamp, behind the gate while it is closed.
    fn queue(&mut self) -> Result<Self::Stamp, DriverError>;
    /// Whether the device has written `stamp`; `None`: cannot ask.
    fn written(&mut self, stamp: &Self::Stamp) -> Option<Result<bool, DriverError>>;
    /// How long the loop asks [`written`](Self::written) before it gives
    /// the anchor up.
    const GIVE_UP: Duration;
    /// Wait in the driver until `stamp` is written, for a probe that cannot
    /// ask; by default it always can.
    fn wait(&mut self, _: &Self::Stamp) -> Result<(), DriverError> {
        Err(refused(
            Self::BACKEND,
            "cannot ask whether the stamp is written",
        ))
    }
    /// Read `stamp` back, once written and the host clock read.
    fn read(&mut self, _: &mut Self::Stamp) -> Result<(), DriverError> {
        Ok(())
    }
    /// Let go of a stamp the driver failed on: never used again.
    fn discard(&mut self, _: Self::Stamp) {}
}

/// A stamp, and the host-clock interval that holds where it was written.
pub(crate) struct Bracket<S> {
    pub(crate) stamp: S,
    pub(crate) before: Instant,
    pub(crate) width: Duration,
}

/// Where an anchor lies on the host clock: within `bound` of `at`, and at
/// `paired` where a driver's pairing chose the point inside that interval.
#[derive(Clone, Copy)]
pub(crate) struct Point {
    pub(crate) at: Instant,
    pub(crate) bound: Duration,
    pub(crate) paired: Option<Instant>,
}

impl<S> Bracket<S> {
    /// The bracket's midpoint, bound by its half-width.
    pub(crate) fn midpoint(&self) -> Point {
        Point {
            at: self.before + self.width / 2,
            bound: self.width / 2,
            paired: None,
        }
    }

    /// The anchor's point, and whether a pairing was refused: as
    /// [`DriverPairing`] says, by the driver's `pairing` (where it puts this
    /// bracket's stamp, the driver's stated deviation, and how far carrying
    /// it to the stamp may have moved it) where it lies inside the bracket
    /// give or take that carry; else the midpoint.
    pub(crate) fn point(
        &self,
        policy: DriverPairing,
        pairing: impl FnOnce(&Self) -> Result<Option<(HostStamp, Duration)>, DriverError>,
        backend: &str,
    ) -> (Point, bool) {
        if policy == DriverPairing::Off {
            return (self.midpoint(), false);
        }
        let (paired, carry) = match pairing(self) {
            Ok(Some(paired)) => paired,
            Ok(None) => return (self.midpoint(), false),
            Err(err) => {
                log::warn!("{backend}: the driver's clock pairing failed: {err}");
                return (self.midpoint(), false);
            }
        };
        let after = self.before + self.width;
        let claim = match policy {
            DriverPairing::Unchecked => paired.uncertainty + carry,
            _ => Duration::ZERO,
        };
        let low = self.before.checked_sub(carry);
        let inside = low
            .zip(paired.at.checked_sub(claim))
            .is_some_and(|(low, early)| early >= low)
            && paired.at + claim <= after + carry;
        if !inside {
            log::warn!(
                "{backend}: the driver's pairing of its clock with the host's lies outside \
                 a bracket beside it: anchoring by the bracket"
            );
            return (self.midpoint(), true);
        }
        let point = match policy {
            DriverPairing::Unchecked if claim < self.width / 2 => Point {
                at: paired.at,
                bound: claim,
                paired: None,
            },
            DriverPairing::Unchecked => self.midpoint(),
            _ => Point {
                paired: Some(paired.at.clamp(self.before, after)),
                ..self.midpoint()
            },
        };
        (point, false)
    }
}

/// The tightest of `calibration_samples` brackets, each gated while the
/// probe keeps a gate (one that will not close is dropped). Between samples
/// a fork under way goes first, and an exiting process stops the loop.
pub(crate) fn tightest<P: Probe>(
    probe: &mut P,
    config: &ProfilerConfig,
) -> Result<Bracket<P::Stamp>, DriverError> {
    let mut best: Option<Bracket<P::Stamp>> = None;
    for _ in 0..config.calibration_samples.max(1) {
        if crate::threads::stopping() {
            return Err(exiting(P::BACKEND));
        }
        outside_library_work(|| ());
        let sample = sample(probe, config)?;
        if best.as_ref().is_none_or(|best| sample.width < best.width) {
            best = Some(sample);
        }
    }
    best.ok_or_else(|| refused(P::BACKEND, "no sample taken"))
}

/// One bracket: gated where the gate serves, else plain.
///
/// Gated, the stamp is queued behind the closed gate; once the queue has
/// reached the gate (a mark ahead of it says so), the host reads its clock,
/// opens the gate and waits: the queueing and the launch latency fall
/// before the bracket opens. The gate holds the queue only until the host
/// sees the mark, at most `settle` (a queue that far behind other work
/// holds nobody at the gate), plus this thread's scheduling latency: a
/// soft bound. It opens on every path, errors included.
fn sample<P: Probe>(
    probe: &mut P,
    config: &ProfilerConfig,
) -> Result<Bracket<P::Stamp>, DriverError> {
    let clock = config.host_clock;
    let Some(settle) = probe
        .gate()
        .map(|gate| config.gate_settle.unwrap_or_else(|| gate.settle()))
    else {
        let before = clock();
        let stamp = probe.queue()?;
        return finish(probe, stamp, before, clock);
    };
    let marks = P::MARKS && !settle.is_zero();
    let mark = marks.then(|| probe.queue()).transpose()?;
    if let Some(Err(err)) = probe.gate().map(Gate::close) {
        log::warn!(
            "{}: the anchor's gate is refused, anchoring without: {err}",
            P::BACKEND
        );
        probe.drop_gate();
        return sample(probe, config);
    }
    let closed = Closed {
        probe: &mut *probe,
        shut: true,
    };
    let stamp = closed.probe.queue()?;
    let arrived = polling::arrive(
        || match &mark {
            Some(mark) => closed.probe.written(mark),
            None => closed.probe.gate().and_then(Gate::reached),
        },
        settle,
    );
    let arrived = match arrived {
        Ok(Polled::Stopping) => Err(exiting(P::BACKEND)),
        Ok(_) => Ok(()),
        Err(err) => Err(err),
    };
    if let (Some(mark), Err(_)) = (mark, &arrived) {
        closed.probe.discard(mark);
    }
    let before = clock();
    let opened = arrived.and_then(|()| closed.open());
    if let Err(err) = opened {
        probe.discard(stamp);
        return Err(err);
    }
    finish(probe, stamp, before, clock)
}

/// Wait for `stamp` (polling, [`polling::reach`]; between asks the loop
/// leaves with an error once the process began exiting, so that a stamp
/// behind a long kernel does not keep the thread in the driver through its
/// exit handlers), close the bracket and read the stamp back.
fn finish<P: Probe>(
    probe: &mut P,
    mut stamp: P::Stamp,
    before: Instant,
    clock: fn() -> Instant,
) -> Result<Bracket<P::Stamp>, DriverError> {
    let reached = match polling::reach(|| probe.written(&stamp), P::GIVE_UP) {
        Ok(Polled::Reached) => Ok(()),
        Ok(Polled::Stopping) => Err(exiting(P::BACKEND)),
        Ok(Polled::GaveUp) => Err(refused(P::BACKEND, "the stamp was not written in time")),
        Ok(Polled::CannotAsk) => probe.wait(&stamp),
        Err(err) => Err(err),
    };
    let width = clock().saturating_duration_since(before);
    match reached.and_then(|()| probe.read(&mut stamp)) {
        Ok(()) => Ok(Bracket {
            stamp,
            before,
            width,
        }),
        Err(err) => {
            probe.discard(stamp);
            Err(err)
        }
    }
}

/// A probe whose gate is closed, and opens when dropped, on every path: a
/// wait the host never satisfies would hold the queue, and all work behind
/// it, forever.
struct Closed<'a, P: Probe> {
    probe: &'a mut P,
    shut: bool,
}

impl<P: Probe> Closed<'_, P> {
    fn open(mut self) -> Result<(), DriverError> {
        self.shut = false;
        self.probe.gate().map_or(Ok(()), Gate::open)
    }
}

impl<P: Probe> Drop for Closed<'_, P> {
    fn drop(&mut self) {
        if self.shut
            && let Some(Err(err)) = self.probe.gate().map(Gate::open)
        {
            log::error!(
                "{}: an anchor gate could not be opened; its queue may wait: {err}",
                P::BACKEND
            );
        }
    }
}

/// A calibration left because the process is exiting.
fn exiting(backend: &'static str) -> DriverError {
    refused(
        backend,
        "the process is exiting (stop_driver_calls): the calibration was left",
    )
}

fn refused(backend: &'static str, what: &'static str) -> DriverError {
    DriverError::refused(backend, "anchor calibration", crate::ErrorKind::Other, what)
}
