//! Owned events: each is released exactly once, from `Drop`, with a failure
//! logged rather than raised.

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
