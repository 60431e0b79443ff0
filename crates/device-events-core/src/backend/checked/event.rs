//! Events as checked handles: each knows the context it was made in, and
//! holds it until the event is dropped, so no call reaches the driver with
//! an event of a torn-down context.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use super::binding::dead;
use super::stream::Live;
use crate::EventApi;
use crate::backend::capture;
use crate::backend::handle_table::{Handle, Pinned, inside_any};
use crate::backend::raw::{Permit, RawApi};
use crate::driver::{CaptureStatus, DriverError, ErrorKind};

/// A record of an event on a stream of another context, refused.
#[cold]
#[inline(never)]
fn different_contexts<R: RawApi>(
    call: &'static str,
    event: R::Context,
    stream: R::Context,
) -> DriverError {
    DriverError::refused(
        R::BACKEND,
        call,
        ErrorKind::InvalidHandle,
        format!(
            "the event and the stream belong to different contexts (event: {event:?}, stream: \
             {stream:?}); a fence pool's events are of the context current when it made them, \
             a profiler's of its first window's stream"
        ),
    )
}

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
    /// Refused unless the event is of `stream`'s context, `held`: on every
    /// record, a compare; the refusal's words are made apart.
    #[inline]
    pub(super) fn same_context(
        &self,
        call: &'static str,
        stream: &R::Held,
    ) -> Result<(), DriverError> {
        let (event, stream) = (self.context(), R::context_of(stream));
        if event == stream {
            return Ok(());
        }
        Err(different_contexts::<R>(call, event, stream))
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

    /// A new event in `held`, which the caller has current; with timing
    /// for a window or an anchor, without for a fence.
    pub(super) fn create(held: R::Held, timing: bool) -> Result<Self, DriverError> {
        let blocking = R::state().blocking_sync.load(Ordering::Relaxed);
        let raw = R::create_event(Permit::new(), &held, blocking, timing)?;
        Ok(Self {
            raw: Some(raw),
            held,
            recorded_on: AtomicU64::new(u64::MAX),
        })
    }

    pub(super) fn live(&self, call: &'static str) -> Result<&R::Event, DriverError> {
        self.raw.as_ref().ok_or_else(|| dead::<R>(call, "event"))
    }

    /// Run `f` with the stream of the event's last record held live, where
    /// the driver reads that stream as it takes the event
    /// ([`RawApi::asking_reads_stream_of`]: HIP's runtime checks it, then
    /// uses it with no lock held), so no destroy lands between the two.
    /// `held` is a stream the caller holds already, which is not looked up
    /// again. While that stream is being destroyed or forgotten, `f` waits
    /// for the destroy's end (it waits for the stream's work, and a forget
    /// drains it first) and then runs with [`Recorded::Gone`], unless
    /// `not_yet` answers for now; it is told whether this thread may wait
    /// (not while it is inside `with_raw` on any stream: the destroy may be
    /// waiting for that stream's call, which would wait for this one). A
    /// thread inside `with_raw` on the stream itself holds it, and runs `f`
    /// on it at once.
    pub(super) fn with_recorded<T>(
        &self,
        held: Option<(Handle, &Live<R>)>,
        not_yet: impl FnOnce(bool) -> Option<T>,
        f: impl FnOnce(Recorded<'_, R>) -> T,
    ) -> T {
        let Some(stream) = self.recorded_stream() else {
            return f(Recorded::Unread);
        };
        if let Some((handle, live)) = held
            && handle == stream
        {
            return f(Recorded::On(live));
        }
        let streams = &R::state().streams;
        match streams.pin(stream) {
            Pinned::Live(live) => f(Recorded::On(&live)),
            Pinned::Closing => {
                if let Some(answer) = not_yet(!inside_any()) {
                    return answer;
                }
                streams.wait_closed(stream);
                f(Recorded::Gone)
            }
            Pinned::Gone => f(Recorded::Gone),
        }
    }

    /// The stream of the event's last record, where the driver reads it as
    /// it takes the event ([`RawApi::asking_reads_stream_of`]).
    pub(super) fn recorded_stream(&self) -> Option<Handle> {
        Handle::from_bits(self.recorded_on.load(Ordering::Relaxed))
    }

    /// Ask the event (`ask`, a query or a wait) with the stream of its
    /// last record held ([`with_recorded`](Self::with_recorded)). `gone`
    /// once that stream was destroyed or forgotten: the event is reached,
    /// and the driver is not asked about a stream it freed; `not_yet` while
    /// it is being destroyed (told whether this thread may wait, as
    /// [`with_recorded`](Self::with_recorded) says), or, when that is
    /// `None`, `gone` once the destroy has returned. `capturing` while the
    /// stream captures, where
    /// asking would break that capture
    /// ([`RawApi::asking_breaks_capture_of`]). The caller has the event's
    /// context bound.
    pub(super) fn ask<T>(
        &self,
        raw: &R::Event,
        gone: T,
        not_yet: impl FnOnce(bool) -> Option<Result<T, DriverError>>,
        capturing: impl FnOnce() -> Result<T, DriverError>,
        ask: impl FnOnce(&R::Event) -> Result<T, DriverError>,
    ) -> Result<T, DriverError> {
        self.with_recorded(None, not_yet, |recorded| match recorded {
            Recorded::Unread => capture::relaxed::<R, _>(|| ask(raw)),
            Recorded::Gone => Ok(gone),
            Recorded::On(live) => {
                if R::asking_breaks_capture_of(&live.raw)
                    && matches!(
                        R::capture_status(Permit::new(), &live.raw)?,
                        Some(CaptureStatus::Active)
                    )
                {
                    return capturing();
                }
                capture::relaxed::<R, _>(|| ask(raw))
            }
        })
    }
}

/// Where an event was last recorded, as a call that takes it finds it
/// ([`CheckedEvent::with_recorded`]).
pub(super) enum Recorded<'a, R: RawApi> {
    /// Nowhere the driver reads: never recorded, on the null stream, or on
    /// a driver that reads no stream as it takes an event.
    Unread,
    /// On this stream, held live for the call.
    On(&'a Live<R>),
    /// On a stream destroyed or forgotten since, whose work is done: the
    /// destroy waited for it, and a forget drained it.
    Gone,
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
