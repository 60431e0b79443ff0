//! The checked layer over a [`RawApi`], written once: streams as checked
//! handles, events that know their context, bind-and-restore around every
//! call, refusals before the driver, capture modes and the blocking-sync
//! choice. A backend's driver calls see only live handles of the bound
//! context.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use cubecl_common::profile::Duration;

use crate::backend::capture;
use crate::backend::handle_table::Handle;
use crate::backend::raw::{CheckedEvent, CheckedStream, Permit, RawApi};
use crate::driver::{CaptureStatus, DriverError, ErrorKind};
use crate::fence::FenceApi;
use crate::placement::{Gate, HostStamp};
use crate::threads::ThreadApi;
use crate::{AnchorApi, EventApi, EventQuery};

mod binding;
mod idle;
mod stream;
mod word_gate;

use binding::{bound, dead, on_stream, releasing, same_context};
pub use idle::{IDLE_EVENTS, release_idle_events};

impl<R: RawApi> CheckedEvent<R> {
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
    fn create(held: R::Held) -> Result<Self, DriverError> {
        let blocking = R::state().blocking_sync.load(Ordering::Relaxed);
        let raw = R::create_event(Permit::new(), &held, blocking)?;
        Ok(Self {
            raw: Some(raw),
            held,
            recorded_on: AtomicU64::new(u64::MAX),
        })
    }

    fn live(&self, call: &'static str) -> Result<&R::Event, DriverError> {
        self.raw.as_ref().ok_or_else(|| dead::<R>(call, "event"))
    }

    /// Whether the stream of the last record captures now, where asking
    /// the event would break that capture; the caller has the event's
    /// context bound. A capture begun after this look races the call that
    /// follows: the driver leaves no way to close that window.
    fn recorder_captures(&self) -> Result<bool, DriverError> {
        let Some(stream) = Handle::from_bits(self.recorded_on.load(Ordering::Relaxed)) else {
            return Ok(false);
        };
        // A destroyed stream captures nothing.
        let status = R::state()
            .streams
            .with(stream, |live| R::capture_status(Permit::new(), &live.raw));
        Ok(matches!(
            status.transpose()?,
            Some(Some(CaptureStatus::Active))
        ))
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

impl<R: RawApi> EventApi for R {
    type Event = CheckedEvent<R>;
    type Stream = CheckedStream<R>;
    const BACKEND: &'static str = R::BACKEND;

    fn event_create() -> Result<CheckedEvent<R>, DriverError> {
        // The current context is `held`'s: nothing to bind.
        CheckedEvent::create(R::hold_current(Permit::new(), R::CALLS.create_event)?)
    }

    fn event_destroy(event: &mut CheckedEvent<R>) -> Result<(), DriverError> {
        let call = R::CALLS.destroy_event;
        let raw = event.raw.take().ok_or_else(|| dead::<R>(call, "event"))?;
        releasing::<R, _>(&event.held, || R::destroy_event(Permit::new(), raw))
    }

    fn event_record(event: &CheckedEvent<R>, stream: CheckedStream<R>) -> Result<(), DriverError> {
        let call = R::CALLS.record_event;
        let raw = event.live(call)?;
        on_stream(stream, call, |live| {
            same_context(call, event, &live.held)?;
            // Before the call: the driver ties the event to the stream even
            // when the record then fails.
            let on = if R::asking_breaks_capture_of(&live.raw) {
                stream.handle.to_bits()
            } else {
                u64::MAX
            };
            event.recorded_on.store(on, Ordering::Relaxed);
            R::record_event(Permit::new(), raw, &live.raw)
        })
    }

    fn event_wait(event: &CheckedEvent<R>) -> Result<(), DriverError> {
        let call = R::CALLS.synchronize_event;
        let raw = event.live(call)?;
        bound::<R, _>(&event.held, || {
            if event.recorder_captures()? {
                return Err(DriverError::refused(
                    R::BACKEND,
                    call,
                    ErrorKind::Capture,
                    "the event's stream is capturing a graph, and waiting now would invalidate \
                     that capture; wait once the capture has ended",
                ));
            }
            capture::relaxed::<R, _>(|| R::synchronize_event(Permit::new(), raw))
        })
    }

    fn event_elapsed(
        start: &CheckedEvent<R>,
        end: &CheckedEvent<R>,
    ) -> Result<Duration, DriverError> {
        let call = R::CALLS.elapsed;
        let (from, to) = (start.live(call)?, end.live(call)?);
        if start.context() != end.context() {
            return Err(DriverError::refused(
                R::BACKEND,
                call,
                ErrorKind::Other,
                "elapsed time across contexts is undefined",
            ));
        }
        // A read of events that may lie in another thread's capture: as
        // the queries, in RELAXED mode.
        bound::<R, _>(&start.held, || {
            capture::relaxed::<R, _>(|| R::elapsed(Permit::new(), from, to))
        })
    }

    fn stream_wait_event(
        stream: CheckedStream<R>,
        event: &CheckedEvent<R>,
    ) -> Result<(), DriverError> {
        let call = R::CALLS.wait_event;
        let raw = event.live(call)?;
        on_stream(stream, call, |live| {
            if !R::WAITS_ACROSS_CONTEXTS {
                same_context(call, event, &live.held)?;
            }
            R::wait_event(Permit::new(), &live.raw, raw)
        })
    }

    fn stream_synchronize(stream: CheckedStream<R>) -> Result<(), DriverError> {
        let call = R::CALLS.synchronize_stream;
        stream.on(call, |raw| {
            // The driver refuses to synchronize a capturing stream, and
            // invalidates its capture as it does.
            if matches!(
                R::capture_status(Permit::new(), raw)?,
                Some(CaptureStatus::Active | CaptureStatus::Invalidated)
            ) {
                return Err(DriverError::refused(
                    R::BACKEND,
                    call,
                    ErrorKind::Capture,
                    "the stream is capturing a graph, and synchronizing it would invalidate that \
                     capture; synchronize once the capture has ended",
                ));
            }
            capture::relaxed::<R, _>(|| R::synchronize_stream(Permit::new(), raw))
        })
    }

    fn stream_create_non_blocking() -> Result<CheckedStream<R>, DriverError> {
        let permit = Permit::new();
        let held = R::hold_current(permit, R::CALLS.create_stream)?;
        let raw = R::create_stream(permit, &held)?;
        Ok(CheckedStream::admit(raw, held, true))
    }

    fn stream_destroy(stream: CheckedStream<R>) -> Result<(), DriverError> {
        let call = R::CALLS.destroy_stream;
        if R::state().streams.held_here(stream.handle) {
            // From inside `with_raw` on this very stream: waiting for that
            // call to return would wait for ourselves.
            return Err(DriverError::refused(
                R::BACKEND,
                call,
                ErrorKind::Other,
                "the stream is in use on this thread (inside with_raw): destroy it after",
            ));
        }
        // Out of the table first, once calls in flight on it have returned:
        // no copy of the handle can reach the driver after this.
        let live = R::state()
            .streams
            .remove(stream.handle)
            .ok_or_else(|| dead::<R>(call, "stream"))?;
        if !live.owned {
            return Ok(());
        }
        releasing::<R, _>(&live.held, || R::destroy_stream(Permit::new(), live.raw))
    }
}

impl<R: RawApi> EventQuery for R {
    fn event_query(event: &CheckedEvent<R>) -> Result<bool, DriverError> {
        let raw = event.live(R::CALLS.query_event)?;
        bound::<R, _>(&event.held, || {
            // Not knowable without breaking the capture: not yet.
            if event.recorder_captures()? {
                return Ok(false);
            }
            capture::relaxed::<R, _>(|| R::query_event(Permit::new(), raw))
        })
    }
}

impl<R: RawApi> AnchorApi for R {
    fn gate(stream: CheckedStream<R>) -> Result<Option<Box<dyn Gate>>, DriverError> {
        match R::anchor_gate(Permit::new(), stream)? {
            Some(gate) => Ok(Some(gate)),
            None => word_gate::word_gate(Permit::new(), stream),
        }
    }

    fn poll(event: &CheckedEvent<R>) -> Option<Result<bool, DriverError>> {
        R::POLLS_ANCHORS.then(|| <R as EventQuery>::event_query(event))
    }

    fn host_stamp(event: &CheckedEvent<R>) -> Result<Option<HostStamp>, DriverError> {
        let Some(raw) = event.raw() else {
            return Ok(None);
        };
        R::stamp_on_host(Permit::new(), raw, &event.held)
    }

    fn same_context(event: &CheckedEvent<R>, stream: CheckedStream<R>) -> Option<bool> {
        stream.context().map(|context| context == event.context())
    }
}

impl<R: RawApi> ThreadApi for R {
    fn in_context_of<T>(
        stream: CheckedStream<R>,
        call: impl FnOnce() -> T,
    ) -> Result<T, DriverError> {
        // Out of the table first: `call` uses the stream too.
        let held = stream.held(R::CALLS.bind)?;
        bound::<R, _>(&held, || Ok(call()))
    }

    fn own_thread() {
        capture::own_thread::<R>();
    }

    fn stream_key(stream: CheckedStream<R>) -> Option<u64> {
        Some(stream.handle.to_bits())
    }

    fn context_key(stream: CheckedStream<R>) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        let context = stream.context()?;
        let mut hasher = std::hash::DefaultHasher::new();
        std::any::TypeId::of::<R>().hash(&mut hasher);
        context.hash(&mut hasher);
        Some(hasher.finish())
    }
}

impl<R: RawApi> FenceApi for R {
    fn fence_event(stream: CheckedStream<R>) -> Result<CheckedEvent<R>, DriverError> {
        idle::fence_event(stream)
    }

    fn keep_event(event: CheckedEvent<R>) -> Option<CheckedEvent<R>> {
        idle::keep_event(event)
    }

    fn stream_captures(stream: CheckedStream<R>) -> Result<bool, DriverError> {
        stream.on("capture status", |raw| {
            Ok(matches!(
                R::capture_status(Permit::new(), raw)?,
                Some(CaptureStatus::Active | CaptureStatus::Invalidated)
            ))
        })
    }
}
