//! Device work of a known length, timed by the device itself: the truth a
//! window is checked against on a real driver, at any device speed, with
//! nothing calibrated. On CUDA, the spin kernel: it spins on the device's
//! own nanosecond timer for the length asked and stamps its start and end.

use std::time::Duration;

use device_events_core::{Backend, DriverError};

/// Work of a known length that the device stamps itself.
pub trait TimedWork<A: Backend> {
    /// Queue work on `stream` that lasts at least `length` by the device's
    /// own clock; the ticket reads its stamps ([`span`](Self::span)).
    ///
    /// # Errors
    ///
    /// The driver's error.
    fn enqueue_for(&self, stream: A::Stream, length: Duration) -> Result<usize, DriverError>;

    /// How long the work of `ticket` ran, by its own stamps, once it is
    /// done; `None` before, or once the ticket's room was taken again.
    fn span(&self, ticket: usize) -> Option<Duration>;
}
