//! The one bracket loop, for event backends and stamp clocks alike, and the
//! one policy for a driver's own pairing of its clock with the host's. The
//! device writes a stamp between the host's clock reads before it is queued
//! (or its gate opened) and after it is seen written; reading only after
//! the wait places it late by the wait's wake-up, a different amount each
//! time: the tightest of several brackets' midpoint removes that bias.

use std::time::{Duration, Instant};

use crate::anchoring::polling::{self, Polled};
use crate::anchoring::{Gate, HostStamp};
use crate::config::{AnchorConfig, DriverPairing};
use crate::driver::DriverError;
use crate::fork_gate::outside_library_work;

/// Stamps in a device's queue: events recorded on a stream, or a clock's.
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
    /// Close the gate, while one is kept.
    fn close_gate(&mut self) -> Option<Result<(), DriverError>> {
        self.gate().map(Gate::close)
    }
    /// Queue one stamp, behind the gate while it is closed.
    fn queue(&mut self) -> Result<Self::Stamp, DriverError>;
    /// Whether the device has written `stamp`; `None`: cannot ask.
    fn written(&mut self, stamp: &Self::Stamp) -> Option<Result<bool, DriverError>>;
    /// How long [`written`](Self::written) is asked before the anchor is given up.
    const GIVE_UP: Duration;
    /// Wait in the driver until `stamp` is written, where it cannot ask.
    fn wait(&mut self, _: &Self::Stamp) -> Result<(), DriverError> {
        Err(refused(Self::BACKEND, "cannot wait"))
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

/// An anchor within `bound` of `at`; at `paired`, where a pairing chose it.
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

    /// The anchor's point as [`DriverPairing`] says, by the driver's
    /// `pairing` (its stamp, stated deviation and carry to this stamp) where
    /// it lies inside the bracket, else the midpoint; and whether refused.
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
    config: &AnchorConfig,
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

/// One bracket, gated where the gate serves: the stamp queued behind it,
/// the host reads its clock once a mark says the queue is there (or after
/// `settle`: a queue that far behind holds nobody there), then opens it, so
/// queueing and launch latency fall before the bracket. It opens on every
/// path; it holds the queue that long plus this thread's scheduling delay.
fn sample<P: Probe>(
    probe: &mut P,
    config: &AnchorConfig,
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
    if let Some(Err(err)) = probe.close_gate() {
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

/// Wait for `stamp` (polling; left once the process is exiting, rather than
/// wait in the driver through its exit handlers), then close the bracket.
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

/// A probe whose gate is closed, opened when dropped: a wait never satisfied
/// would hold the queue, and all work behind it, forever.
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
    refused(backend, "the process is exiting")
}

fn refused(backend: &'static str, what: &'static str) -> DriverError {
    DriverError::refused(backend, "anchor calibration", crate::ErrorKind::Other, what)
}
