//! The anchor's gate over a backend's host word, written once.

use std::time::Duration;

use super::binding::bound;
use super::idle;
use super::stream::CheckedStream;
use crate::EventApi;
use crate::anchoring::Gate;
use crate::backend::raw::{HostWord, Permit, RawApi};
use crate::driver::DriverError;
use crate::events::owned::OwnedEvent;

/// A gate over the backend's [`HostWord`]: each close waits for the next
/// count, each open writes the count, and dropping it opens it, drains the
/// stream (polling) and only then gives the word back to its context's
/// idle words, for the next gate there. (The count wraps after 2³² closes:
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
    let word = match idle::take_word::<R>(R::context_of(&held)) {
        Some(word) => word,
        None => match bound::<R, _>(&held, || R::host_word(permit, &held))? {
            Some(word) => word,
            None => return Ok(None),
        },
    };
    // Not always zero: ROCm's signal memory starts at 1, and a word kept
    // from an earlier gate holds that gate's last count, which every wait
    // queued on it before is satisfied by.
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
    /// Open, let the stream pass every wait, then keep the word for the
    /// next gate of its context: the device must not read a word once it
    /// is freed, and a free is never made on the library's threads, since
    /// it can wait for the whole device (`hipFree`) past the process's
    /// exit. The stream is drained by polling; once the process is exiting
    /// ([`stop_driver_calls`](crate::process::stop_driver_calls)) the word is left
    /// to the process's end.
    fn drop(&mut self) {
        let _ = self.open();
        let Some(word) = self.word.take() else { return };
        let drained = bound::<R, _>(&self.held, || {
            let event = OwnedEvent::<R>::create()?;
            crate::anchoring::drained::<R>(event.raw(), self.stream)
        });
        let drained = match drained {
            Ok(Some(drained)) => drained,
            // No polling here: a synchronize, as the only way.
            Ok(None) => <R as EventApi>::stream_synchronize(self.stream).is_ok(),
            Err(err) => {
                // The stream is gone or failed: its waits are satisfied or
                // will never run; keeping eight bytes is the safe side.
                log::warn!(
                    "{}: a gate's word is kept, its stream could not be drained: {err}",
                    R::BACKEND
                );
                false
            }
        };
        if drained {
            idle::keep_word::<R>(self.held.clone(), word);
        } else {
            std::mem::forget(word);
        }
    }
}
