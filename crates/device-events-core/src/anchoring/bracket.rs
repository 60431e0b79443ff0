//! The one bracket loop, for event backends and stamp clocks alike: a
//! stamp queued on the device, held behind the gate where there is one,
//! and the host clock read around it, the tightest of several kept; and
//! the one policy for a driver's own pairing of its clock with the host's.
//!
//! # Why a calibrated bracket
//!
//! The device writes the stamp at some instant between the host clock read
//! just before it is queued (or its gate opened) and the read just after
//! the host saw it written; nothing narrower is observable from the host.
//! Reading the host clock only after the wait (the common shortcut) places
//! the anchor at the late edge of that bracket, so every window built on
//! it lands late by the wait's wake-up latency: several microseconds when
//! the wait spins, tens to hundreds when the thread was descheduled, and a
//! different amount each refresh. Taking the bracket several times,
//! keeping the tightest and placing the anchor at its midpoint removes
//! that bias, and its half-width is a bound on the error that callers can
//! check placements against.

use std::time::{Duration, Instant};

use crate::anchoring::Gate;
use crate::anchoring::polling::{self, Polled};
use crate::config::DriverPairing;
use crate::driver::DriverError;
use crate::fork_gate::outside_library_work;

/// A device's way of putting one stamp in its queue and seeing it written,
/// which [`tightest`] drives: an event recorded on a stream, or a stamp
/// clock's command buffer.
pub(crate) trait Probe {
    /// A stamp queued, not yet seen written.
    type Queued;
    /// A stamp seen written, as the caller keeps it.
    type Stamp;
    /// What the device queues ahead of the gate to say it got there.
    type Mark;

    /// Who refuses, in errors.
    fn backend(&self) -> &'static str;

    /// The gate the stamps wait behind, if one is kept.
    fn gate(&mut self) -> Option<&mut (dyn Gate + 'static)>;

    /// Go on without the gate: it would not close.
    fn drop_gate(&mut self);

    /// Queue a mark ahead of the gate (`settle` is not zero).
    fn mark(&mut self) -> Result<Self::Mark, DriverError>;

    /// Whether the device has reached `mark`; `None`: cannot ask.
    fn at_mark(&mut self, mark: &Self::Mark) -> Option<Result<bool, DriverError>>;

    /// Let a mark go: `reached` says whether the driver served it.
    fn end_mark(&mut self, mark: Self::Mark, served: bool);

    /// Queue one stamp, behind the gate where it is closed.
    fn queue(&mut self) -> Result<Self::Queued, DriverError>;

    /// Return once the device has written `queued`.
    fn reach(&mut self, queued: &Self::Queued) -> Result<(), DriverError>;

    /// The stamp, read back once written; or, on `Err` from the steps
    /// before, `queued` let go as one the driver failed on.
    fn read(&mut self, queued: Self::Queued, failed: bool) -> Result<Self::Stamp, DriverError>;
}

/// How a calibration takes its brackets: of the user's settings, those the
/// loop reads.
#[derive(Clone, Copy)]
pub(crate) struct Calibration {
    pub(crate) samples: usize,
    pub(crate) clock: fn() -> Instant,
    /// The longest the host waits for the stream to reach the closed gate
    /// before it opens it; `None`: as long as the gate says.
    pub(crate) settle: Option<Duration>,
}

impl Calibration {
    pub(crate) fn of(config: &crate::ProfilerConfig) -> Self {
        Self {
            samples: config.calibration_samples,
            clock: config.host_clock,
            settle: config.gate_settle,
        }
    }
}

/// One calibration: the stamp and the host-clock interval that holds the
/// instant the device wrote it.
pub(crate) struct Bracket<S> {
    pub(crate) stamp: S,
    pub(crate) before: Instant,
    pub(crate) width: Duration,
}

/// Where an anchor is placed on the host clock, and how far the truth can
/// be from it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Point {
    pub(crate) at: Instant,
    pub(crate) bound: Duration,
}

impl<S> Bracket<S> {
    /// The bracket's midpoint, bound by its half-width.
    pub(crate) fn midpoint(&self) -> Point {
        Point {
            at: self.before + self.width / 2,
            bound: self.width / 2,
        }
    }

    /// Where a driver's pairing puts the stamp: `at`, which carrying it to
    /// this bracket's stamp may have moved by up to `carry`, with the
    /// driver's stated deviation `stated`. `None` (refused) when it lies
    /// outside the bracket by more than `carry`.
    ///
    /// Checked ([`DriverPairing::Bracketed`]): the point inside the
    /// bracket nearest `at`, bound by its distance to the bracket's farther
    /// edge, the most the bracket leaves the truth from it. Unchecked
    /// ([`DriverPairing::Unchecked`]): `at` bound by the driver's word,
    /// where its stated interval lies inside the bracket and is the
    /// narrower; the midpoint otherwise.
    pub(crate) fn paired(
        &self,
        at: Instant,
        stated: Duration,
        carry: Duration,
        policy: DriverPairing,
    ) -> Option<Point> {
        let after = self.before + self.width;
        let low = self.before.checked_sub(carry)?;
        if at < low || at > after + carry {
            return None;
        }
        if policy == DriverPairing::Unchecked {
            let claim = stated + carry;
            let inside = at.checked_sub(claim).is_some_and(|early| early >= low)
                && at + claim <= after + carry;
            if !inside {
                return None;
            }
            return Some(if claim < self.width / 2 {
                Point { at, bound: claim }
            } else {
                self.midpoint()
            });
        }
        let at = at.clamp(self.before, after);
        Some(Point {
            at,
            bound: (at - self.before).max(after - at),
        })
    }
}

/// The tightest of `how.samples` brackets of `probe`'s stamps, each gated
/// where the probe keeps a gate. A gate that refuses to close is dropped
/// from the probe and the calibration goes on without it. Between samples
/// the loop leaves any fork under way to go first, and stops with an
/// error once the process is exiting.
pub(crate) fn tightest<P: Probe>(
    probe: &mut P,
    how: Calibration,
) -> Result<Bracket<P::Stamp>, DriverError> {
    let mut best: Option<Bracket<P::Stamp>> = None;
    for _ in 0..how.samples.max(1) {
        if crate::threads::stopping() {
            return Err(exiting(probe.backend()));
        }
        // No lock is held between samples: a fork under way goes first,
        // rather than wait for every sample of a long calibration.
        outside_library_work(|| ());
        let sample = sample(probe, how)?;
        if best.as_ref().is_none_or(|best| sample.width < best.width) {
            // The previous best, if any, is let go here.
            best = Some(sample);
        }
    }
    best.ok_or_else(|| refused(probe.backend(), "no sample taken"))
}

/// One bracket: gated where the gate serves, else plain.
fn sample<P: Probe>(probe: &mut P, how: Calibration) -> Result<Bracket<P::Stamp>, DriverError> {
    if let Some(gate) = probe.gate() {
        let settle = how.settle.unwrap_or_else(|| gate.settle());
        if let Some(bracket) = gated(probe, how.clock, settle)? {
            return Ok(bracket);
        }
        probe.drop_gate();
    }
    let before = (how.clock)();
    let queued = probe.queue()?;
    let reached = probe.reach(&queued);
    let width = (how.clock)().saturating_duration_since(before);
    let stamp = probe.read(queued, reached.is_err());
    reached?;
    Ok(Bracket {
        stamp: stamp?,
        before,
        width,
    })
}

/// The stamp queued behind the closed gate; once the queue has reached
/// the gate, the host reads its clock, opens the gate and waits. The gate
/// opens on every path, errors included. `None` when the gate refused to
/// close: nothing was queued.
///
/// A mark queued just ahead of the gate says when the queue reached it,
/// so the gate is closed on the device only as long as the host takes to
/// see the mark and open it: any work sharing the queue waits that long,
/// not a fixed settle time. The host waits for the mark at most `settle`,
/// after which the queue is behind other work, holds nobody, and the gate
/// opens. The hold is a soft bound: it lasts until this thread, polling,
/// is scheduled to see the mark and open the gate, so a loaded machine's
/// scheduling latency adds to it.
fn gated<P: Probe>(
    probe: &mut P,
    clock: fn() -> Instant,
    settle: Duration,
) -> Result<Option<Bracket<P::Stamp>>, DriverError> {
    let mark = if settle.is_zero() {
        None
    } else {
        Some(probe.mark()?)
    };
    if let Some(gate) = probe.gate()
        && let Err(err) = gate.close()
    {
        log::warn!(
            "{}: the anchor's gate is refused, anchoring without: {err}",
            probe.backend()
        );
        if let Some(mark) = mark {
            probe.end_mark(mark, true);
        }
        return Ok(None);
    }
    // Closed: opened on every path from here.
    let closed = Closed { probe, shut: true };
    let queued = closed.probe.queue()?;
    if let Some(mark) = mark {
        let arrived = match polling::arrive(|| closed.probe.at_mark(&mark), settle) {
            Ok(Polled::Stopping) => Err(exiting(closed.probe.backend())),
            Ok(_) => Ok(()),
            Err(err) => Err(err),
        };
        closed.probe.end_mark(mark, arrived.is_ok());
        if let Err(err) = arrived {
            drop(closed);
            probe.read(queued, true).ok();
            return Err(err);
        }
    }
    let before = clock();
    let opened = closed.open();
    let reached = opened.and_then(|()| probe.reach(&queued));
    let width = clock().saturating_duration_since(before);
    let stamp = probe.read(queued, reached.is_err());
    reached?;
    Ok(Some(Bracket {
        stamp: stamp?,
        before,
        width,
    }))
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
        let backend = self.probe.backend();
        if self.shut
            && let Some(gate) = self.probe.gate()
            && let Err(err) = gate.open()
        {
            log::error!("{backend}: an anchor gate could not be opened; its queue may wait: {err}");
        }
    }
}

/// A calibration left because the process is exiting.
pub(crate) fn exiting(backend: &'static str) -> DriverError {
    refused(
        backend,
        "the process is exiting (stop_driver_calls): the calibration was left",
    )
}

pub(crate) fn refused(backend: &'static str, what: &'static str) -> DriverError {
    DriverError::refused(backend, "anchor calibration", crate::ErrorKind::Other, what)
}
