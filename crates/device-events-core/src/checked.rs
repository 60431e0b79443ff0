//! The checked layer over a [`RawApi`], written once: streams as checked
//! handles, events that know their context, bind-and-restore around every
//! call, refusals before the driver, capture modes and the blocking-sync
//! choice. A backend's driver calls see only live handles of the bound
//! context.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};

use cubecl_common::profile::Duration;

use crate::driver::{CaptureStatus, DriverError, ErrorKind, with_bound};
use crate::gate::{Gate, HostStamp};
use crate::handles::{Handle, HandleTable};
use crate::raw::{HostWord, Permit, RawApi};
use crate::{AnchorApi, EventApi, EventQuery, capture};

/// A backend's live streams and settings, kept in a `static` of its own
/// ([`RawApi::state`]).
pub struct State<R: RawApi> {
    streams: HandleTable<Live<R>>,
    blocking_sync: AtomicBool,
}

impl<R: RawApi> State<R> {
    /// No streams yet; events spin while they wait.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Self {
            streams: HandleTable::new(),
            blocking_sync: AtomicBool::new(false),
        }
    }

    /// Whether events made from now on wait by sleeping rather than
    /// spinning: a sleeping wait costs no core and wakes tens of
    /// microseconds late. Events made before keep their mode.
    pub fn set_blocking_sync(&self, blocking: bool) {
        self.blocking_sync.store(blocking, Ordering::Relaxed);
    }

    /// How many streams are live (made or admitted, not yet destroyed).
    pub fn live_streams(&self) -> usize {
        self.streams.len()
    }
}

/// A live stream: the driver's, its context (held), and whether the
/// backend made it and so destroys it.
pub struct Live<R: RawApi> {
    raw: R::Stream,
    held: R::Held,
    owned: bool,
}

/// A stream: a checked handle into its backend's table of live streams.
///
/// `Copy`, as [`EventApi`] requires. Once `stream_destroy` has run on it,
/// every copy is refused with [`ErrorKind::InvalidHandle`] before any
/// driver call; its context is held while it lives.
pub struct CheckedStream<R: RawApi> {
    handle: Handle,
    backend: PhantomData<fn() -> R>,
}

impl<R: RawApi> Clone for CheckedStream<R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R: RawApi> Copy for CheckedStream<R> {}

impl<R: RawApi> PartialEq for CheckedStream<R> {
    fn eq(&self, other: &Self) -> bool {
        self.handle == other.handle
    }
}

impl<R: RawApi> Eq for CheckedStream<R> {}

impl<R: RawApi> std::hash::Hash for CheckedStream<R> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.handle.hash(state);
    }
}

impl<R: RawApi> fmt::Debug for CheckedStream<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CheckedStream")
            .field("backend", &R::BACKEND)
            .field("handle", &self.handle)
            .finish()
    }
}

impl<R: RawApi> CheckedStream<R> {
    fn admit(raw: R::Stream, held: R::Held, owned: bool) -> Self {
        Self {
            handle: R::state().streams.insert(Live { raw, held, owned }),
            backend: PhantomData,
        }
    }

    /// Admit a stream made elsewhere, of the context `held`. Destroying the
    /// handle forgets it and leaves the stream itself to its owner. Raw
    /// streams come only from their backend's own (unsafe) admission call.
    pub fn admit_foreign(raw: R::Stream, held: R::Held) -> Self {
        Self::admit(raw, held, false)
    }

    /// Run `f` with the driver's handle, for calls this crate does not wrap
    /// (a launch, a memset); the stream cannot be destroyed meanwhile.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidHandle`] when the stream was destroyed.
    pub fn with_raw<T>(self, f: impl FnOnce(R::Handle) -> T) -> Result<T, DriverError> {
        self.with_live("with_raw", |raw, _| f(R::stream_handle(raw)))
    }

    /// Run `f` on the live stream and its held context, unbound.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidHandle`] when the stream was destroyed.
    pub fn with_live<T>(
        self,
        call: &'static str,
        f: impl FnOnce(&R::Stream, &R::Held) -> T,
    ) -> Result<T, DriverError> {
        R::state()
            .streams
            .with(self.handle, |live| f(&live.raw, &live.held))
            .ok_or_else(|| dead::<R>(call, "stream"))
    }

    /// The stream's context, while the stream lives.
    pub fn context(self) -> Option<R::Context> {
        R::state()
            .streams
            .with(self.handle, |live| R::context_of(&live.held))
    }

    /// Whether the stream is capturing a graph: screen a stream with this
    /// before profiling on it, since records there are graph nodes, not
    /// timestamps.
    ///
    /// # Errors
    ///
    /// When the stream is not live, the driver cannot say, or refuses.
    pub fn capture_status(self) -> Result<CaptureStatus, DriverError> {
        on_stream(self, "capture status", |live| {
            R::capture_status(Permit::new(), &live.raw)
        })?
        .ok_or_else(|| {
            DriverError::refused(
                R::BACKEND,
                "capture status",
                ErrorKind::Other,
                "this driver cannot tell whether a stream captures",
            )
        })
    }

    /// Run `f` on the live stream with its context bound.
    fn on<T>(
        self,
        call: &'static str,
        f: impl FnOnce(&R::Stream) -> Result<T, DriverError>,
    ) -> Result<T, DriverError> {
        on_stream(self, call, |live| f(&live.raw))
    }
}

/// An event, and the context it was made in, held until it is dropped.
pub struct CheckedEvent<R: RawApi> {
    /// `None` once destroyed.
    raw: Option<R::Event>,
    held: R::Held,
}

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

    fn live(&self, call: &'static str) -> Result<&R::Event, DriverError> {
        self.raw.as_ref().ok_or_else(|| dead::<R>(call, "event"))
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

fn dead<R: RawApi>(call: &'static str, what: &str) -> DriverError {
    DriverError::refused(
        R::BACKEND,
        call,
        ErrorKind::InvalidHandle,
        format!("the {what} was destroyed (or never admitted); refused before the driver"),
    )
}

/// Run `call` with `held` bound, then give the thread its own context back.
fn bound<R: RawApi, T>(
    held: &R::Held,
    call: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    let permit = Permit::new();
    let restore = Cell::new(None);
    with_bound(
        R::BACKEND,
        R::context_of(held),
        || R::current(permit),
        |_| {
            restore.set(Some(R::bind(permit, held)?));
            Ok(())
        },
        |previous| {
            restore
                .take()
                .map_or(Ok(()), |token| R::unbind(permit, token, previous))
        },
        call,
    )
}

fn on_stream<R: RawApi, T>(
    stream: CheckedStream<R>,
    call: &'static str,
    f: impl FnOnce(&Live<R>) -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    R::state()
        .streams
        .with(stream.handle, |live| bound::<R, _>(&live.held, || f(live)))
        .ok_or_else(|| dead::<R>(call, "stream"))?
}

fn same_context<R: RawApi>(
    call: &'static str,
    event: &CheckedEvent<R>,
    stream: &R::Held,
) -> Result<(), DriverError> {
    let (event, stream) = (event.context(), R::context_of(stream));
    if event == stream {
        return Ok(());
    }
    Err(DriverError::refused(
        R::BACKEND,
        call,
        ErrorKind::InvalidHandle,
        format!(
            "the event and the stream belong to different contexts (event: {event:?}, stream: \
             {stream:?}); make the fence, pool or profiler with the stream's context current"
        ),
    ))
}

impl<R: RawApi> EventApi for R {
    type Event = CheckedEvent<R>;
    type Stream = CheckedStream<R>;
    const BACKEND: &'static str = R::BACKEND;

    fn event_create() -> Result<CheckedEvent<R>, DriverError> {
        let permit = Permit::new();
        let held = R::hold_current(permit, R::CALLS.create_event)?;
        let blocking = R::state().blocking_sync.load(Ordering::Relaxed);
        let raw = R::create_event(permit, &held, blocking)?;
        Ok(CheckedEvent {
            raw: Some(raw),
            held,
        })
    }

    fn event_destroy(event: &mut CheckedEvent<R>) -> Result<(), DriverError> {
        let call = R::CALLS.destroy_event;
        let raw = event.raw.take().ok_or_else(|| dead::<R>(call, "event"))?;
        bound::<R, _>(&event.held, || R::destroy_event(Permit::new(), raw))
    }

    fn event_record(event: &CheckedEvent<R>, stream: CheckedStream<R>) -> Result<(), DriverError> {
        let call = R::CALLS.record_event;
        let raw = event.live(call)?;
        on_stream(stream, call, |live| {
            same_context(call, event, &live.held)?;
            R::record_event(Permit::new(), raw, &live.raw)
        })
    }

    fn event_wait(event: &CheckedEvent<R>) -> Result<(), DriverError> {
        let raw = event.live(R::CALLS.synchronize_event)?;
        bound::<R, _>(&event.held, || {
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
        bound::<R, _>(&start.held, || R::elapsed(Permit::new(), from, to))
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
        stream.on(R::CALLS.synchronize_stream, |raw| {
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
        // Out of the table first, once calls in flight on it have returned:
        // no copy of the handle can reach the driver after this.
        let live = R::state()
            .streams
            .remove(stream.handle)
            .ok_or_else(|| dead::<R>(call, "stream"))?;
        if !live.owned {
            return Ok(());
        }
        bound::<R, _>(&live.held, || R::destroy_stream(Permit::new(), live.raw))
    }
}

impl<R: RawApi> EventQuery for R {
    fn event_query(event: &CheckedEvent<R>) -> Result<bool, DriverError> {
        let raw = event.live(R::CALLS.query_event)?;
        bound::<R, _>(&event.held, || {
            capture::relaxed::<R, _>(|| R::query_event(Permit::new(), raw))
        })
    }
}

impl<R: RawApi> AnchorApi for R {
    fn gate(stream: CheckedStream<R>) -> Result<Option<Box<dyn Gate>>, DriverError> {
        R::anchor_gate(Permit::new(), stream)
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

    fn in_context_of<T>(
        stream: CheckedStream<R>,
        call: impl FnOnce() -> T,
    ) -> Result<T, DriverError> {
        // Out of the table first: `call` uses the stream too.
        let held = stream.with_live(R::CALLS.bind, |_, held| held.clone())?;
        bound::<R, _>(&held, || Ok(call()))
    }

    fn own_thread() {
        capture::own_thread::<R>();
    }

    fn same_context(event: &CheckedEvent<R>, stream: CheckedStream<R>) -> Option<bool> {
        stream.context().map(|context| context == event.context())
    }
}

/// A gate over the backend's [`HostWord`]: each close waits for the next
/// count, each open writes the count, and dropping it opens it, drains the
/// stream and only then frees the word. (The count wraps after 2³² closes:
/// at five a second, after 27 years.)
struct WordGate<R: RawApi> {
    stream: CheckedStream<R>,
    held: R::Held,
    word: Option<Box<dyn HostWord<R>>>,
    /// The count the last `close` waits for.
    count: u32,
}

pub(crate) fn word_gate<R: RawApi>(
    permit: Permit<R>,
    stream: CheckedStream<R>,
) -> Result<Option<Box<dyn Gate>>, DriverError> {
    let held = stream.with_live(R::CALLS.bind, |_, held| held.clone())?;
    let Some(word) = bound::<R, _>(&held, || R::host_word(permit, &held))? else {
        return Ok(None);
    };
    Ok(Some(Box::new(WordGate {
        stream,
        held,
        word: Some(word),
        count: 0,
    })))
}

impl<R: RawApi> Gate for WordGate<R> {
    fn close(&mut self) -> Result<(), DriverError> {
        let next = self.count.wrapping_add(1);
        if let Some(word) = &self.word {
            self.stream.on(R::CALLS.wait_event, |raw| {
                word.wait_at_least(Permit::new(), raw, next)
            })?;
        }
        self.count = next;
        Ok(())
    }

    fn open(&mut self) -> Result<(), DriverError> {
        if let Some(word) = &self.word {
            word.word()
                .store(self.count, std::sync::atomic::Ordering::Release);
        }
        Ok(())
    }

    fn settle(&self) -> Duration {
        self.word.as_ref().map_or(Duration::ZERO, |w| w.settle())
    }
}

impl<R: RawApi> Drop for WordGate<R> {
    /// Open, let the stream pass every wait, then free the word: the device
    /// must not read it after it is freed.
    fn drop(&mut self) {
        let _ = self.open();
        let Some(word) = self.word.take() else { return };
        if let Err(err) = <R as EventApi>::stream_synchronize(self.stream) {
            // The stream is gone or failed: its waits are satisfied or will
            // never run; keeping four bytes is the safe side.
            log::warn!(
                "{}: a gate's word is kept, its stream could not be drained: {err}",
                R::BACKEND
            );
            std::mem::forget(word);
            return;
        }
        if let Err(err) = bound::<R, _>(&self.held, || word.free(Permit::new())) {
            log::error!("{}: could not free a gate's host word: {err}", R::BACKEND);
        }
    }
}
