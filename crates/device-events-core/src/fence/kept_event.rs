//! A fence's own event, kept for reuse by its backend when the fence is
//! dropped.

use crate::EventApi;
use crate::driver::DriverError;
use crate::events::owned::OwnedEvent;
use crate::fence::FenceApi;

/// A fence's event: when dropped it goes back to its backend's idle
/// events ([`FenceApi::keep_event`]) or, where the backend keeps none, is
/// destroyed.
pub(crate) struct KeptEvent<A: EventApi> {
    /// Taken only by `Drop`.
    raw: Option<A::Event>,
    keep: fn(A::Event) -> Option<A::Event>,
}

impl<A: EventApi> KeptEvent<A> {
    /// A fence's event recorded on `stream`, with the record's outcome.
    pub(crate) fn recorded(
        stream: A::Stream,
    ) -> Result<(Self, Result<(), DriverError>), DriverError>
    where
        A: FenceApi,
    {
        Self::kept(A::fence_recorded(stream))
    }

    /// As [`recorded`](Self::recorded), on the caller's word that the
    /// stream's context is current ([`FenceApi::fence_recorded_in_current`]).
    pub(crate) fn recorded_in_current(
        stream: A::Stream,
    ) -> Result<(Self, Result<(), DriverError>), DriverError>
    where
        A: FenceApi,
    {
        Self::kept(A::fence_recorded_in_current(stream))
    }

    fn kept(
        made: Result<(A::Event, Result<(), DriverError>), DriverError>,
    ) -> Result<(Self, Result<(), DriverError>), DriverError>
    where
        A: FenceApi,
    {
        made.map(|(raw, recorded)| {
            (
                Self {
                    raw: Some(raw),
                    keep: A::keep_event,
                },
                recorded,
            )
        })
    }

    pub(crate) fn raw(&self) -> &A::Event {
        match &self.raw {
            Some(raw) => raw,
            None => unreachable!("a kept event is only emptied by its own Drop"),
        }
    }
}

impl<A: EventApi> Drop for KeptEvent<A> {
    #[inline]
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take()
            && let Some(raw) = (self.keep)(raw)
        {
            drop(OwnedEvent::<A>::adopt(raw));
        }
    }
}
