//! The anchor's gate over a backend's host word, written once.

use cubecl_common::profile::Duration;

use super::binding::{bound, releasing};
use crate::EventApi;
use crate::backend::capture;
use crate::backend::raw::{CheckedStream, HostWord, Permit, RawApi};
use crate::driver::DriverError;
use crate::placement::Gate;

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
    let held = stream.held(R::CALLS.bind)?;
    let Some(word) = bound::<R, _>(&held, || R::host_word(permit, &held))? else {
        return Ok(None);
    };
    // Not always zero: ROCm's signal memory starts at 1.
    let count = word.word().load(std::sync::atomic::Ordering::Acquire);
    Ok(Some(Box::new(WordGate {
        stream,
        held,
        word: Some(word),
        count,
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
        // Freeing is among the calls another thread's GLOBAL capture
        // forbids: in RELAXED mode.
        let freed = releasing::<R, _>(&self.held, || {
            capture::relaxed::<R, _>(|| word.free(Permit::new()))
        });
        if let Err(err) = freed {
            log::error!("{}: could not free a gate's host word: {err}", R::BACKEND);
        }
    }
}
