//! Events as checked handles: each knows the context it was made in, and
//! holds it until the event is dropped, so no call reaches the driver with
//! an event of a torn-down context.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use super::binding::dead;
use crate::EventApi;
use crate::backend::capture;
use crate::backend::handle_table::Handle;
use crate::backend::raw::{Permit, RawApi};
use crate::driver::{CaptureStatus, DriverError, ErrorKind};

/// An event, and the context it was made in, held until it is dropped.
pub struct CheckedEvent<R: RawApi> {
    /// `None` once destroyed.
    pub(crate) raw: Option<R::Event>,
    pub(crate) held: R::Held,
    /// The stream of the last record, where asking the event reads it
    /// ([`RawApi::asking_reads_stream_of`]), as [`Handle::to_bits`];
    /// `u64::MAX` otherwise.
    pub(crate) recorded_on: AtomicU64,
}

impl<R: RawApi> CheckedEvent<R> {
    /// Refused unless the event is of `stream`'s context, `held`.
    pub(super) fn same_context(
        &self,
        call: &'static str,
        stream: &R::Held,
    ) -> Result<(), DriverError> {
        let (event, stream) = (self.context(), R::context_of(stream));
        if event == stream {
            return Ok(());
        }
        Err(DriverError::refused(
            R::BACKEND,
            call,
            ErrorKind::InvalidHandle,
            format!(
                "the event and the stream belong to different contexts (event: {event:?}, stream: \
                 {stream:?}); a fence pool's events are of the context current when it made them, \
                 a profiler's of its first window's stream"
            ),
        ))
    }

    /// The driver's event, for calls this crate does not wrap; `None` once
    /// destroyed.
    pub fn raw(&self) -> Option<&R::Event> {
        self.raw.as_ref()
    }

    /// The context the event was made in.
    pub fn context(&self) -> R::Context {
        R::context_of(&self.held)
    }

    /// A new event in `held`, which the caller has current.
    pub(super) fn create(held: R::Held) -> Result<Self, DriverError> {
        let blocking = R::state().blocking_sync.load(Ordering::Relaxed);
        let raw = R::create_event(Permit::new(), &held, blocking)?;
        Ok(Self {
            raw: Some(raw),
            held,
            recorded_on: AtomicU64::new(u64::MAX),
        })
    }

    pub(super) fn live(&self, call: &'static str) -> Result<&R::Event, DriverError> {
        self.raw.as_ref().ok_or_else(|| dead::<R>(call, "event"))
    }

    /// Ask the event (`ask`, a query or a wait), where the driver reads
    /// the stream of its last record as it answers
    /// ([`RawApi::asking_reads_stream_of`]): with that stream held live
    /// across the look and the call, so no destroy lands between them.
    /// `gone` when the stream was destroyed or forgotten: such a driver's
    /// destroy waits for the stream's work, and a forget drains it first,
    /// so the event is reached and the driver is not asked about a stream
    /// it freed. `capturing` while the stream captures, where asking would
    /// break that capture ([`RawApi::asking_breaks_capture_of`]). The
    /// caller has the event's context bound.
    pub(super) fn ask<T>(
        &self,
        raw: &R::Event,
        gone: T,
        capturing: impl FnOnce() -> Result<T, DriverError>,
        ask: impl FnOnce(&R::Event) -> Result<T, DriverError>,
    ) -> Result<T, DriverError> {
        let Some(stream) = Handle::from_bits(self.recorded_on.load(Ordering::Relaxed)) else {
            return capture::relaxed::<R, _>(|| ask(raw));
        };
        R::state()
            .streams
            .with(stream, |live| {
                if R::asking_breaks_capture_of(&live.raw)
                    && matches!(
                        R::capture_status(Permit::new(), &live.raw)?,
                        Some(CaptureStatus::Active)
                    )
                {
                    return capturing();
                }
                capture::relaxed::<R, _>(|| ask(raw))
            })
            .unwrap_or(Ok(gone))
    }
}

impl<R: RawApi> Drop for CheckedEvent<R> {
    /// An event not destroyed by hand is released here, once: a user's
    /// `event_create` leaks nothing.
    fn drop(&mut self) {
        if self.raw.is_some()
            && let Err(err) = <R as EventApi>::event_destroy(self)
        {
            log::warn!("{}: an event could not be released: {err}", R::BACKEND);
        }
    }
}

impl<R: RawApi> fmt::Debug for CheckedEvent<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckedEvent")
            .field("backend", &R::BACKEND)
            .field("context", &self.context())
            .field("live", &self.raw.is_some())
            .finish()
    }
}
