//! The checked layer over a [`RawApi`], written once: streams as checked
//! handles, events that know their context, bind-and-restore around every
//! call, refusals before the driver, capture modes and the blocking-sync
//! choice. A backend's driver calls see only live handles of the bound
//! context.

use std::sync::atomic::Ordering;

use std::time::Duration;

use crate::anchoring::{AnchorApi, Gate, HostStamp};
use crate::api::{EventApi, EventQuery};
use crate::backend::capture;
use crate::backend::handle_table::{Handle, Pinned, inside_any};
use crate::backend::raw::{Permit, RawApi};
use crate::driver::{CaptureStatus, DriverError, ErrorKind};
use crate::fence::FenceApi;
use crate::threads::ThreadApi;

mod binding;
mod event;
mod idle;
mod state;
mod stream;
mod word_gate;

pub use event::CheckedEvent;
use event::Recorded;
pub use state::State;
pub use stream::CheckedStream;
use stream::Live;

use binding::{bound, dead, releasing};
pub use idle::release_idle_events;

impl<R: RawApi> EventApi for R {
    type Event = CheckedEvent<R>;
    type Stream = CheckedStream<R>;
    const BACKEND: &'static str = R::BACKEND;

    fn event_create() -> Result<CheckedEvent<R>, DriverError> {
        // The current context is `held`'s: nothing to bind.
        CheckedEvent::create(R::hold_current(Permit::new(), R::CALLS.create_event)?, true)
    }

    fn event_destroy(event: &mut CheckedEvent<R>) -> Result<(), DriverError> {
        let call = R::CALLS.destroy_event;
        let raw = event.raw.take().ok_or_else(|| dead::<R>(call, "event"))?;
        let destroy = |raw| releasing::<R, _>(&event.held, || R::destroy_event(Permit::new(), raw));
        // Where the driver reads the stream of the event's last record as
        // it destroys the event, that stream is held meanwhile; while it is
        // being destroyed, its destroy destroys the event after, so no
        // thread here waits for the stream's work.
        let Some(stream) = event.recorded_stream() else {
            return destroy(raw);
        };
        let state = R::state();
        match state.streams.pin(stream) {
            Pinned::Live(_held) => destroy(raw),
            Pinned::Gone => destroy(raw),
            Pinned::Closing => {
                let mut after_close = state.after_close.lock();
                // Asked again under the list's lock, which the destroy
                // takes once its entry is gone.
                if matches!(state.streams.pin(stream), Pinned::Closing) {
                    after_close.push((stream, raw, event.held.clone()));
                    return Ok(());
                }
                drop(after_close);
                destroy(raw)
            }
        }
    }

    fn event_record(event: &CheckedEvent<R>, stream: CheckedStream<R>) -> Result<(), DriverError> {
        let call = R::CALLS.record_event;
        let raw = event.live(call)?;
        stream.on_live(call, |live| record(event, raw, stream, live))
    }

    fn event_wait(event: &CheckedEvent<R>) -> Result<(), DriverError> {
        let call = R::CALLS.synchronize_event;
        let raw = event.live(call)?;
        bound::<R, _>(&event.held, || {
            // A wait on an event whose stream is being destroyed ends once
            // the destroy has (it waits for the stream's work).
            event.ask(
                raw,
                (),
                |can_wait| (!can_wait).then(|| Err(closing_inside_with_raw::<R>(call))),
                || {
                    Err(DriverError::refused(
                        R::BACKEND,
                        call,
                        ErrorKind::Capture,
                        "the event's stream is capturing a graph, and waiting now would \
                         invalidate that capture; wait once the capture has ended",
                    ))
                },
                |raw| R::synchronize_event(Permit::new(), raw),
            )
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
        // Where the driver reads the stream of the event's last record as
        // it adds the wait, that stream is held meanwhile. Such a driver
        // (HIP's) would drop a wait on an event of a stream being
        // destroyed (it takes the event as reached once the stream is not
        // valid): the destroy's end is waited for instead, when the
        // stream's work is done and nothing is left to wait for. Waited
        // for holding no stream: the destroy of the stream held could be
        // waiting for this call, and this call for it.
        loop {
            if let Some(recorded) = event.recorded_stream()
                && recorded != stream.handle
                && matches!(R::state().streams.pin(recorded), Pinned::Closing)
            {
                if inside_any() {
                    return Err(closing_inside_with_raw::<R>(call));
                }
                R::state().streams.wait_closed(recorded);
            }
            let added = stream.on_live(call, |live| {
                if !R::WAITS_ACROSS_CONTEXTS {
                    event.same_context(call, &live.held)?;
                }
                event.with_recorded(
                    Some((stream.handle, live)),
                    // Closing since the look above: again, unheld.
                    |_| Some(Ok(false)),
                    |recorded| match recorded {
                        Recorded::Gone => Ok(true),
                        Recorded::On(_) | Recorded::Unread => {
                            R::wait_event(Permit::new(), &live.raw, raw).map(|()| true)
                        }
                    },
                )
            })?;
            if added {
                return Ok(());
            }
        }
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
        if R::state().streams.inside_here(stream.handle) {
            // From inside `with_raw` on this very stream: waiting for that
            // call to return would wait for ourselves.
            return Err(DriverError::refused(
                R::BACKEND,
                call,
                ErrorKind::Other,
                "the stream is in use on this thread (inside with_raw): destroy it after",
            ));
        }
        let streams = &R::state().streams;
        let drained = streams
            .with(stream.handle, |live| drain_first(live, call))
            .transpose()?;
        // Out of the table, once calls in flight on it have returned: no
        // copy of the handle can reach the driver after this. Until the
        // destroy (or the forget's drain) returns, the entry is closing:
        // an event recorded there is not yet reached, and is not asked of
        // the driver either, which may be freeing the stream.
        let closed = drained.and_then(|drained| {
            streams
                .remove_with(stream.handle, |live| {
                    if !live.owned {
                        return forget(live);
                    }
                    releasing::<R, _>(&live.held, || R::destroy_stream(Permit::new(), live.raw))
                })
                .map(|closed| closed.and(drained))
        });
        let Some(closed) = closed else {
            // Destroyed, or being destroyed by another thread: answered
            // once that destroy has returned, so that a second destroy
            // (or forget) never returns while the first still waits for
            // the stream's work.
            if !inside_any() {
                streams.wait_closed(stream.handle);
            }
            return Err(dead::<R>(call, "stream"));
        };
        release_after_close::<R>(stream.handle);
        closed
    }
}

/// Record `event` (live as `raw`) on `stream`, `live`, its context
/// current.
#[inline]
fn record<R: RawApi>(
    event: &CheckedEvent<R>,
    raw: &R::Event,
    stream: CheckedStream<R>,
    live: &Live<R>,
) -> Result<(), DriverError> {
    let call = R::CALLS.record_event;
    event.same_context(call, &live.held)?;
    // Before the call: the driver ties the event to the stream even
    // when the record then fails.
    let on = if R::asking_reads_stream_of(&live.raw) {
        stream.handle.to_bits()
    } else {
        u64::MAX
    };
    event.recorded_on.store(on, Ordering::Relaxed);
    R::record_event(Permit::new(), raw, &live.raw)
}

/// Where the driver reads an event's stream as it takes the event, drain
/// `live` while it is still live, before its destroy (or forget): its
/// fences are asked of the driver, and waited on by other streams, as
/// usual while its work runs, and the destroy that follows (its entry
/// closing, when such fences can only be answered "not yet") has little or
/// nothing left to wait for. The stream's capture is asked once: a
/// stream of this crate's that captures is not drained (a synchronize
/// would invalidate the capture; its destroy ends it); one admitted from
/// elsewhere is not forgotten while it captures, since forgetting drains
/// it. The outer error refuses the destroy (a stream admitted from
/// elsewhere only); the inner one is the stream's work's, reported after
/// the destroy, which goes ahead.
fn drain_first<R: RawApi>(
    live: &Live<R>,
    call: &'static str,
) -> Result<Result<(), DriverError>, DriverError> {
    if !R::asking_reads_stream_of(&live.raw) {
        return Ok(Ok(()));
    }
    let drained = bound::<R, _>(&live.held, || {
        let capturing = matches!(
            R::capture_status(Permit::new(), &live.raw)?,
            Some(CaptureStatus::Active | CaptureStatus::Invalidated)
        );
        if capturing && !live.owned {
            return Ok(Err(DriverError::refused(
                R::BACKEND,
                call,
                ErrorKind::Capture,
                "the stream is capturing a graph, and forgetting it drains it, which would \
                 invalidate that capture; forget it once the capture has ended",
            )));
        }
        if capturing {
            return Ok(Ok(Ok(())));
        }
        Ok(Ok(capture::relaxed::<R, _>(|| {
            R::synchronize_stream(Permit::new(), &live.raw)
        })))
    });
    match drained {
        // Refused: the stream stays admitted.
        Ok(Err(refused)) => Err(refused),
        Ok(Ok(drained)) => Ok(drained),
        // The binding or the capture's status failed: a stream of this
        // crate's is destroyed all the same; one admitted from elsewhere
        // stays, as it would have for a capture.
        Err(err) if live.owned => Ok(Err(err)),
        Err(err) => Err(err),
    }
}

/// Destroy the events dropped while `stream` was being destroyed
/// ([`State::after_close`]), now that the driver has let it go.
fn release_after_close<R: RawApi>(stream: Handle) {
    let mine: Vec<_> = {
        let mut after_close = R::state().after_close.lock();
        if after_close.is_empty() {
            return;
        }
        let (mine, rest) = std::mem::take(&mut *after_close)
            .into_iter()
            .partition(|(of, _, _)| *of == stream);
        *after_close = rest;
        mine
    };
    for (_, raw, held) in mine {
        if let Err(err) = releasing::<R, _>(&held, || R::destroy_event(Permit::new(), raw)) {
            log::warn!("{}: an event could not be released: {err}", R::BACKEND);
        }
    }
}

/// The refusal of a wait for a stream being destroyed, from a thread inside
/// `with_raw`: the destroy may be waiting for a call on the stream this
/// thread holds, which would wait for this one.
fn closing_inside_with_raw<R: RawApi>(call: &'static str) -> DriverError {
    DriverError::refused(
        R::BACKEND,
        call,
        ErrorKind::Other,
        "the event's stream is being destroyed, and this thread is inside with_raw, \
         which a destroy may be waiting for: wait outside with_raw",
    )
}

/// Forget a stream admitted from elsewhere, taken out of the table. Where
/// the driver reads an event's stream as it answers, the stream is drained
/// before the entry is gone: the events recorded on it are then reached,
/// and are answered so without asking the driver about a stream its owner
/// may destroy next.
fn forget<R: RawApi>(live: Live<R>) -> Result<(), DriverError> {
    if !R::asking_reads_stream_of(&live.raw) {
        return Ok(());
    }
    bound::<R, _>(&live.held, || {
        capture::relaxed::<R, _>(|| R::synchronize_stream(Permit::new(), &live.raw))
    })
}

impl<R: RawApi> EventQuery for R {
    fn event_query(event: &CheckedEvent<R>) -> Result<bool, DriverError> {
        let raw = event.live(R::CALLS.query_event)?;
        bound::<R, _>(&event.held, || {
            // Not knowable without breaking the capture: not yet.
            // Not knowable while the event's stream is being destroyed, nor
            // without breaking the capture: not yet.
            event.ask(
                raw,
                true,
                |_| Some(Ok(false)),
                || Ok(false),
                |raw| R::query_event(Permit::new(), raw),
            )
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

    fn pairing(event: &CheckedEvent<R>) -> Result<Option<HostStamp>, DriverError> {
        let Some(raw) = event.raw() else {
            return Ok(None);
        };
        <R as RawApi>::pairing(Permit::new(), raw, &event.held)
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

    fn event_record_in_current(
        event: &CheckedEvent<R>,
        stream: CheckedStream<R>,
    ) -> Result<(), DriverError> {
        let call = R::CALLS.record_event;
        let raw = event.live(call)?;
        R::state()
            .streams
            .with(stream.handle, |live| {
                if R::records_in_own_context(&live.raw) {
                    // The caller's word that the context is current, on a
                    // stream that is not the current context's by name.
                    record(event, raw, stream, live)
                } else {
                    bound::<R, _>(&live.held, || record(event, raw, stream, live))
                }
            })
            .ok_or_else(|| dead::<R>(call, "stream"))?
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

    fn fence_recorded(
        stream: CheckedStream<R>,
    ) -> Result<(CheckedEvent<R>, Result<(), DriverError>), DriverError> {
        let call = R::CALLS.record_event;
        // One lookup for the event's context and the record: the stream
        // is held live, its context bound, throughout.
        stream.on_live(call, |live| {
            let event = idle::fence_event_of(live)?;
            let recorded = event
                .live(call)
                .and_then(|raw| record(&event, raw, stream, live));
            Ok((event, recorded))
        })
    }

    fn fence_recorded_in_current(
        stream: CheckedStream<R>,
    ) -> Result<(CheckedEvent<R>, Result<(), DriverError>), DriverError> {
        let call = R::CALLS.record_event;
        R::state()
            .streams
            .with(stream.handle, |live| {
                if !R::records_in_own_context(&live.raw) {
                    // A handle the current context resolves: bound, as
                    // without the word.
                    return bound::<R, _>(&live.held, || {
                        let event = idle::fence_event_of(live)?;
                        let recorded = event
                            .live(call)
                            .and_then(|raw| record(&event, raw, stream, live));
                        Ok((event, recorded))
                    });
                }
                // An idle event of the stream's context, or a new one made
                // with that context bound: the word covers the record.
                let event = match idle::idle_event_of::<R>(R::context_of(&live.held)) {
                    Some(event) => event,
                    None => bound::<R, _>(&live.held, || {
                        CheckedEvent::create(live.held.clone(), false)
                    })?,
                };
                let record_it = || {
                    event
                        .live(call)
                        .and_then(|raw| record(&event, raw, stream, live))
                };
                let recorded = match record_it() {
                    // The word was wrong: a driver may refuse a record of
                    // one context's event and stream with another current.
                    Err(err)
                        if err.kind() == ErrorKind::InvalidHandle && err.status().is_some() =>
                    {
                        bound::<R, _>(&live.held, record_it)
                    }
                    recorded => recorded,
                };
                Ok((event, recorded))
            })
            .ok_or_else(|| dead::<R>(call, "stream"))?
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
