//! Fences' events kept for reuse: a fence dropped gives its event back to
//! the backend, and the next fence on a stream of that context records it
//! again instead of creating one. Up to [`IDLE_EVENTS`] per backend; each
//! keeps its context alive (a CUDA event retains its primary context), so
//! they are released beyond the cap, when the wait mode changes, and by
//! [`release_idle_events`], which a server calls before it tears a context
//! down and leak checks call before they count.

use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::binding::{bound, dead};
use crate::backend::raw::{CheckedEvent, CheckedStream, RawApi, State};
use crate::driver::DriverError;
use crate::fence::owned_event::OwnedEvent;

/// Idle fence events a backend keeps, at most.
pub const IDLE_EVENTS: usize = 64;

/// Every backend that has kept an event: how to release its idle ones.
static RELEASERS: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// Destroy every fence event kept for reuse, in every backend. Call it
/// before tearing a context down by hand (an idle CUDA event holds its
/// primary context), or before counting live handles.
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

impl<R: RawApi> State<R> {
    fn idle(&self) -> MutexGuard<'_, Vec<CheckedEvent<R>>> {
        // A push or a pop either happened or did not.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Destroy this backend's idle fence events.
    pub fn release_idle(&self) {
        let idle = std::mem::take(&mut *self.idle());
        idle.into_iter()
            .for_each(|event| drop(OwnedEvent::<R>::adopt(event)));
    }
}

/// An idle event of `stream`'s context, else a new one made in it.
pub(super) fn fence_event<R: RawApi>(
    stream: CheckedStream<R>,
) -> Result<CheckedEvent<R>, DriverError> {
    let state = R::state();
    // A dead stream is refused as the fence's record on it would be.
    let context = stream
        .context()
        .ok_or_else(|| dead::<R>(R::CALLS.record_event, "stream"))?;
    {
        let mut idle = state.idle();
        if let Some(at) = idle.iter().rposition(|e| e.context() == context) {
            return Ok(idle.swap_remove(at));
        }
    }
    let held = stream.held(R::CALLS.record_event)?;
    bound::<R, _>(&held.clone(), || CheckedEvent::create(held))
}

/// Keep `event` while there is room; else give it back.
pub(super) fn keep_event<R: RawApi>(event: CheckedEvent<R>) -> Option<CheckedEvent<R>> {
    let state = R::state();
    if event.raw().is_none() {
        return Some(event);
    }
    if !state.registered.load(Ordering::Relaxed) && !state.registered.swap(true, Ordering::Relaxed)
    {
        RELEASERS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(|| R::state().release_idle());
    }
    let mut idle = state.idle();
    if idle.len() >= IDLE_EVENTS {
        return Some(event);
    }
    idle.push(event);
    None
}
