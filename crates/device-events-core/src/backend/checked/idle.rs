//! Fences' events kept for reuse: a fence dropped gives its event back to
//! the backend, and the next fence on a stream of that context records it
//! again instead of creating one. Up to [`IDLE_EVENTS`] per backend; each
//! keeps its context alive (a CUDA event retains its primary context), so
//! they are released beyond the cap, when the wait mode changes, and by
//! [`release_idle_events`], which a server calls before it tears a context
//! down and leak checks call before they count.
//!
//! Gates' words too: a dropped profiler's gate gives its word back for the
//! next gate of that context, since freeing it can wait for the whole
//! device (`hipFree`), which the calibrator thread must not do (it could
//! still be waiting as the process exits). As many as gates were ever live
//! at once; freed by [`release_idle_events`], on the caller's thread. Until
//! then each kept word holds its context as a live gate does (a CUDA word
//! keeps its primary context retained), even after every profiler of that
//! device is gone: a server that tears a context down calls it first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::binding::{bound, dead, releasing};
use super::event::CheckedEvent;
use super::stream::{CheckedStream, Live};
use crate::backend::capture;
use crate::backend::raw::{HostWord, Permit, RawApi};
use crate::driver::DriverError;
use crate::events::owned::OwnedEvent;

/// Idle fence events a backend keeps, at most.
pub const IDLE_EVENTS: usize = 64;

/// Every backend that has kept an event: how to release its idle ones.
static RELEASERS: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// Destroy every fence event, and free every gate's word, kept for reuse,
/// in every backend. Call it before tearing a context down by hand (an idle
/// CUDA event, and a kept word, hold its primary context until this call),
/// or before counting live handles. A word's free may wait for its device's
/// work (`hipFree`).
///
/// ```
/// device_events_core::process::release_idle_events();
/// ```
pub fn release_idle_events() {
    let releasers = RELEASERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    for release in releasers {
        release();
    }
}

/// What a backend keeps for reuse: fences' events, each of its own
/// context, and gates' words, each with its context (held), on which no
/// stream waits any more.
pub(crate) struct Idle<R: RawApi> {
    /// `parking_lot`'s: every fence takes it twice (its event, then the
    /// event back), with no poisoning to check.
    events: parking_lot::Mutex<Vec<CheckedEvent<R>>>,
    #[allow(clippy::type_complexity)]
    words: Mutex<Vec<(R::Held, Box<dyn HostWord<R>>)>>,
    /// Whether [`release_idle_events`] knows this backend.
    registered: AtomicBool,
}

impl<R: RawApi> Idle<R> {
    pub(super) const fn new() -> Self {
        Self {
            events: parking_lot::Mutex::new(Vec::new()),
            words: Mutex::new(Vec::new()),
            registered: AtomicBool::new(false),
        }
    }

    /// A push or a pop either happened or did not: the list is valid
    /// whatever a panicking holder was doing.
    #[inline]
    fn events(&self) -> parking_lot::MutexGuard<'_, Vec<CheckedEvent<R>>> {
        self.events.lock()
    }

    #[allow(clippy::type_complexity)]
    fn words(&self) -> MutexGuard<'_, Vec<(R::Held, Box<dyn HostWord<R>>)>> {
        // A push or a pop either happened or did not.
        self.words.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Destroy the idle fence events.
    pub(super) fn release_events(&self) {
        let idle = std::mem::take(&mut *self.events());
        idle.into_iter()
            .for_each(|event| drop(OwnedEvent::<R>::adopt(event)));
    }

    /// Free the idle gate words.
    pub(super) fn release_words(&self) {
        let words = std::mem::take(&mut *self.words());
        for (held, word) in words {
            // Freeing is among the calls another thread's GLOBAL capture
            // forbids: in RELAXED mode.
            let freed = releasing::<R, _>(&held, || {
                capture::relaxed::<R, _>(|| word.free(Permit::new()))
            });
            if let Err(err) = freed {
                log::error!("{}: could not free a gate's host word: {err}", R::BACKEND);
            }
        }
    }
}

/// A gate's word kept for `context`, if there is one.
pub(super) fn take_word<R: RawApi>(context: R::Context) -> Option<Box<dyn HostWord<R>>> {
    let mut words = R::state().idle.words();
    let at = words
        .iter()
        .rposition(|(held, _)| R::context_of(held) == context)?;
    Some(words.swap_remove(at).1)
}

/// Keep a gate's word, which no stream waits on any more, for the next
/// gate of its context.
pub(super) fn keep_word<R: RawApi>(held: R::Held, word: Box<dyn HostWord<R>>) {
    register::<R>();
    R::state().idle.words().push((held, word));
}

/// Have [`release_idle_events`] know this backend: a load, once it does.
#[inline]
fn register<R: RawApi>() {
    if !R::state().idle.registered.load(Ordering::Acquire) {
        register_now::<R>();
    }
}

/// Known once in the list: a thread that reads the flag set keeps an event
/// only after [`release_idle_events`] can find it.
#[inline(never)]
fn register_now<R: RawApi>() {
    let mut releasers = RELEASERS.lock().unwrap_or_else(PoisonError::into_inner);
    if !R::state().idle.registered.load(Ordering::Acquire) {
        releasers.push(|| R::state().release_idle());
        R::state().idle.registered.store(true, Ordering::Release);
    }
}

/// An idle event of `stream`'s context, else a new one made in it.
pub(super) fn fence_event<R: RawApi>(
    stream: CheckedStream<R>,
) -> Result<CheckedEvent<R>, DriverError> {
    // A dead stream is refused as the fence's record on it would be.
    let context = stream
        .context()
        .ok_or_else(|| dead::<R>(R::CALLS.record_event, "stream"))?;
    if let Some(event) = idle_event_of::<R>(context) {
        return Ok(event);
    }
    let held = stream.held(R::CALLS.record_event)?;
    // Without timing: a fence's event is only recorded, asked and waited on.
    bound::<R, _>(&held.clone(), || CheckedEvent::create(held, false))
}

/// An idle event of `live`'s context, else a new one made in it; the
/// caller has that context bound.
pub(super) fn fence_event_of<R: RawApi>(live: &Live<R>) -> Result<CheckedEvent<R>, DriverError> {
    match idle_event_of::<R>(R::context_of(&live.held)) {
        Some(event) => Ok(event),
        None => CheckedEvent::create(live.held.clone(), false),
    }
}

/// An idle event of `context`, if one is kept.
pub(super) fn idle_event_of<R: RawApi>(context: R::Context) -> Option<CheckedEvent<R>> {
    let mut idle = R::state().idle.events();
    let at = idle.iter().rposition(|e| e.context() == context)?;
    Some(idle.swap_remove(at))
}

/// Keep `event` while there is room; else give it back.
pub(super) fn keep_event<R: RawApi>(event: CheckedEvent<R>) -> Option<CheckedEvent<R>> {
    let state = R::state();
    if event.raw().is_none() {
        return Some(event);
    }
    register::<R>();
    let mut idle = state.idle.events();
    if idle.len() >= IDLE_EVENTS {
        return Some(event);
    }
    idle.push(event);
    None
}
