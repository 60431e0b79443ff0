//! Owned driver handles: each is released exactly once, from `Drop`, with a
//! failure logged rather than raised.

use crate::EventApi;
use crate::driver::DriverError;

/// An event this crate created and will destroy.
pub(crate) struct OwnedEvent<A: EventApi> {
    raw: A::Event,
}

impl<A: EventApi> OwnedEvent<A> {
    pub(crate) fn create() -> Result<Self, DriverError> {
        A::event_create().map(|raw| Self { raw })
    }

    pub(crate) fn raw(&self) -> &A::Event {
        &self.raw
    }
}

impl<A: EventApi> Drop for OwnedEvent<A> {
    fn drop(&mut self) {
        if let Err(err) = A::event_destroy(&mut self.raw) {
            log::error!(
                "{}: leaking an event the driver would not release: {err}",
                A::BACKEND
            );
        }
    }
}

/// A stream this crate created and will destroy.
pub(crate) struct OwnedStream<A: EventApi> {
    raw: A::Stream,
}

impl<A: EventApi> OwnedStream<A> {
    pub(crate) fn create() -> Result<Self, DriverError> {
        A::stream_create_non_blocking().map(|raw| Self { raw })
    }

    pub(crate) fn raw(&self) -> A::Stream {
        self.raw
    }
}

impl<A: EventApi> Drop for OwnedStream<A> {
    fn drop(&mut self) {
        if let Err(err) = A::stream_destroy(self.raw) {
            log::error!(
                "{}: leaking a stream the driver would not release: {err}",
                A::BACKEND
            );
        }
    }
}
