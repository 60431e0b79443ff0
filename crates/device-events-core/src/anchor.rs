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

use cubecl_common::profile::{Duration, Instant};

use crate::EventApi;
use crate::driver::DriverError;
use crate::pool::{EventPool, PooledEvent};

/// A device event together with where it sits on the host clock.
pub(crate) struct Anchor<A: EventApi> {
    event: PooledEvent<A>,
    /// Midpoint of the tightest bracket: the best estimate of when the device
    /// reached `event`, on the host clock.
    instant: Instant,
    /// Half-width of that bracket.
    uncertainty: Duration,
}

impl<A: EventApi> Anchor<A> {
    /// Record and wait for an anchor event `samples` times on `stream`,
    /// keeping the reading with the tightest host bracket.
    pub(crate) fn calibrate(
        pool: &Arc<EventPool<A>>,
        stream: A::Stream,
        samples: usize,
        clock: fn() -> Instant,
    ) -> Result<Self, DriverError> {
        let mut best: Option<(PooledEvent<A>, Instant, Duration)> = None;
        for _ in 0..samples.max(1) {
            let event = pool.take()?;
            let before = clock();
            A::event_record(event.raw(), stream)?;
            A::event_wait(event.raw())?;
            let width = clock().saturating_duration_since(before);
            if best.as_ref().is_none_or(|(_, _, best)| width < *best) {
                // The previous best, if any, goes back to the pool here.
                best = Some((event, before, width));
            }
        }
        let (event, before, width) = best.ok_or_else(|| {
            DriverError::refused(
                A::BACKEND,
                "anchor calibration",
                crate::ErrorKind::Other,
                "no sample taken",
            )
        })?;
        Ok(Self {
            event,
            instant: before + width / 2,
            uncertainty: width / 2,
        })
    }

    pub(crate) fn event(&self) -> &A::Event {
        self.event.raw()
    }

    /// The host-clock instant at which the device reached the anchor.
    pub(crate) fn instant(&self) -> Instant {
        self.instant
    }

    /// How far [`instant`](Self::instant) can be from the truth.
    pub(crate) fn uncertainty(&self) -> Duration {
        self.uncertainty
    }

    /// Host-clock instant of a device point `offset` after the anchor.
    pub(crate) fn place(&self, offset: Duration) -> Instant {
        self.instant + offset
    }
}
