//! Owned events: each is released exactly once, from `Drop`, with a failure
//! logged rather than raised.

use super::FenceApi;
use crate::EventApi;
use crate::driver::DriverError;

/// An event this crate created and will destroy.
pub(crate) struct OwnedEvent<A: EventApi> {
    raw: A::Event,
}

impl<A: EventApi> OwnedEvent<A> {
    pub(crate) fn create() -> Result<Self, DriverError> {
        A::event_create().map(Self::adopt)
    }

    /// Take over `raw`, to release it once when dropped.
    pub(crate) fn adopt(raw: A::Event) -> Self {
        Self { raw }
    }

    pub(crate) fn raw(&self) -> &A::Event {
        &self.raw
    }
}

impl<A: EventApi> Drop for OwnedEvent<A> {
    fn drop(&mut self) {
        if let Err(err) = A::event_destroy(&mut self.raw) {
            log::error!(
                "{}: the driver refused to release an event: {err}",
                A::BACKEND
            );
        }
    }
}

/// A fence's event: when dropped it goes back to its backend's idle
/// events ([`FenceApi::keep_event`]) or, where the backend keeps none, is
/// destroyed.
pub(crate) struct KeptEvent<A: EventApi> {
    /// Taken only by `Drop`.
    raw: Option<A::Event>,
    keep: fn(A::Event) -> Option<A::Event>,
}

impl<A: EventApi> KeptEvent<A> {
    pub(crate) fn for_stream(stream: A::Stream) -> Result<Self, DriverError>
    where
        A: FenceApi,
    {
        A::fence_event(stream).map(|raw| Self {
            raw: Some(raw),
            keep: A::keep_event,
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
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take()
            && let Some(raw) = (self.keep)(raw)
        {
            drop(OwnedEvent::<A>::adopt(raw));
        }
    }
}
