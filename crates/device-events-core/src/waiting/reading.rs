//! Reading a closed window: its device times, placed on the host clock
//! through its anchor, and a bound on the placement's error.

use std::sync::Arc;

use std::time::Duration;

use crate::anchoring::AnchorApi;
use crate::anchoring::refresh::WindowAnchor;
use crate::driver::DriverError;
use crate::events::point::Point;
use crate::events::pool::EventPool;
use crate::placement::{Placement, TooFar, place_window};
use crate::waiting::resolver::{Lane, LaneId};

/// Why a window resolved to `None`, or is not read yet. Failures are
/// boxed: rare, and a reading's result stays small.
pub(crate) enum Unread {
    /// The device has not reached the window's end (or start) yet.
    NotReady,
    Driver(Box<DriverError>),
    /// The anchor it is placed on is still being taken.
    NoAnchorYet,
    /// Its chain's boundary is out for the reading of the window beside it.
    Busy,
    NoAnchor(Box<DriverError>),
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
    pub(crate) fn is_not_ready(&self) -> bool {
        matches!(self, Self::NotReady | Self::NoAnchorYet | Self::Busy)
    }
}

impl From<DriverError> for Unread {
    fn from(err: DriverError) -> Self {
        if err.is_not_ready() {
            // The driver's own words, logged here: `NotReady` keeps none.
            log::trace!("not ready: {err}");
            Self::NotReady
        } else {
            Self::Driver(Box::new(err))
        }
    }
}

impl std::fmt::Display for Unread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotReady => f.write_str("the device has not reached it yet"),
            Self::Driver(err) => err.fmt(f),
            Self::NoAnchorYet => f.write_str("its anchor is still being taken"),
            Self::Busy => f.write_str("its chain's boundary is being read for the next window"),
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
pub(crate) fn read_window<A: AnchorApi>(inputs: &Inputs<A>) -> Result<Placement, Unread> {
    let Inputs {
        anchor,
        start,
        end,
        pool,
        ..
    } = inputs;
    let limits = &pool.limits;
    let anchor = match anchor.get() {
        None => return Err(Unread::NoAnchorYet),
        Some(Err(err)) => return Err(Unread::NoAnchor(Box::new(err.clone()))),
        Some(Ok(anchor)) => anchor,
    };
    let (Some(start), Some(end)) = (start.lend(), end.lend()) else {
        return Err(Unread::Busy);
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
    place_window(anchor.line(), span, after, before, limits)
        .map_err(|TooFar { distance, bound }| Unread::TooFar { distance, bound })
}

/// Whether the device has reached the window's end, asked without waiting
/// once its reading said "not ready": `false` when its end is ahead (and so
/// are the later ends of its lane), `true` when only its start is (it
/// started on another stream, or after its end): the lane's later windows
/// can be read. Read against the window's anchor, which the device has
/// reached (a reading's only way to ask one event alone); `false` without
/// one, or on any failure (logged), as for an end ahead.
///
/// Its start is asked first, once: a start once reached stays reached, so
/// `start_reached` remembers it and each later "not ready" reading means
/// its end is ahead, with no second driver call (a busy stream's every
/// ask but the first). Only a start not reached asks the end as well.
pub(crate) fn end_reached<A: AnchorApi>(inputs: &Inputs<A>, start_reached: &mut bool) -> bool {
    let Some(Ok(anchor)) = inputs.anchor.get() else {
        return false;
    };
    let reached = |point: &Point<A>| {
        // Out for the next window's reading: asked again later.
        let event = point.lend()?;
        match A::event_elapsed(anchor.event(), event.raw()) {
            Ok(_) => Some(true),
            Err(err) if err.is_not_ready() => Some(false),
            Err(err) => {
                // Not the window's reading: asked again, it says its own.
                log::warn!(
                    "{}: could not ask whether a window's end was reached: {err}",
                    A::BACKEND
                );
                None
            }
        }
    };
    if !*start_reached {
        match reached(&inputs.start) {
            Some(true) => *start_reached = true,
            Some(false) => {}
            None => return false,
        }
    }
    // With its start reached, the reading's "not ready" was its end's.
    !*start_reached && reached(&inputs.end) == Some(true)
}

/// What a window's reading needs.
pub(crate) struct Inputs<A: AnchorApi> {
    pub(crate) anchor: WindowAnchor<A>,
    pub(crate) start: Point<A>,
    pub(crate) end: Point<A>,
    /// Where the window's own events go back, both with one lock.
    pub(crate) pool: Arc<EventPool<A>>,
    /// Its end's place among its profiler's on that stream.
    pub(crate) lane: LaneOf,
}

/// A window's [`Lane`] less its profiler, which its pool names: a window
/// is moved on every close, and this keeps it 16 bytes smaller.
#[derive(Clone, Copy)]
pub(crate) struct LaneOf {
    pub(crate) stream: u64,
    pub(crate) thread: u64,
    /// From 1; 0 for a window on a stream its backend cannot name, which
    /// has no lane.
    pub(crate) seq: u64,
}

impl LaneOf {
    pub(crate) const NONE: Self = Self {
        stream: 0,
        thread: 0,
        seq: 0,
    };
}

impl<A: AnchorApi> Inputs<A> {
    /// Its end's place among its profiler's on that stream, if it has one.
    pub(crate) fn lane(&self) -> Option<Lane> {
        let LaneOf {
            stream,
            thread,
            seq,
        } = self.lane;
        (seq != 0).then_some(Lane {
            key: LaneId {
                profiler: self.pool.profiler,
                stream,
                thread,
            },
            seq,
        })
    }
}

impl<A: AnchorApi> Drop for Inputs<A> {
    #[inline]
    fn drop(&mut self) {
        self.pool
            .give_back([self.start.take_own(), self.end.take_own()]);
    }
}

/// The reading, or `None` with the reason logged.
#[inline]
pub(crate) fn placement_or_none<A: AnchorApi>(
    read: Result<Placement, Unread>,
) -> Option<Placement> {
    read.inspect_err(|why| {
        log::warn!(
            "{}: profiling window unreadable, reporting no measurement: {why}",
            A::BACKEND
        );
    })
    .ok()
}
