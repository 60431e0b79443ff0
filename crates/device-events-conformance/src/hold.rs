//! Device work held back until the host lets it go, whatever the host does
//! meanwhile: for checks that must ask the device while it has not yet
//! passed a point, on a machine whose host may stall at any moment.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use device_events_core::Backend;
use device_events_core::backend::Gate;

/// How long a hold lasts at most: then a watchdog lets the stream go, so
/// that a call that waits for the held work fails its test instead of
/// hanging it. Far past any host stall: a check never meets it unless a
/// call waited for the device.
pub const HOLD_LIMIT: Duration = Duration::from_secs(60);

/// How long the checks that hold a stream stall the host on purpose before
/// they ask, as a descheduled thread on a loaded machine would: longer
/// than the work a check without a hold queues.
pub const HOST_STALL: Duration = Duration::from_millis(100);

/// A stream's queue held where it ends: the backend's anchor gate
/// ([`AnchorApi::gate`](device_events_core::backend::AnchorApi::gate))
/// closed on it. Work queued behind it runs once [`release`](Self::release)
/// opens it (or a drop, or the watchdog after [`HOLD_LIMIT`]).
pub struct Hold {
    gate: Arc<Mutex<Option<Box<dyn Gate>>>>,
    /// Dropped to tell the watchdog the hold was released.
    released: Option<mpsc::Sender<()>>,
    watchdog: Option<JoinHandle<()>>,
}

/// Open the gate, if nobody has: true for the one that did.
fn open(gate: &Mutex<Option<Box<dyn Gate>>>) -> bool {
    let taken = gate.lock().unwrap_or_else(PoisonError::into_inner).take();
    let Some(mut gate) = taken else {
        return false;
    };
    if let Err(err) = gate.open() {
        eprintln!("a held stream's gate did not open: {err}");
    }
    // Dropped open: it lets its stream past every wait and keeps its word.
    drop(gate);
    true
}

impl Hold {
    /// Hold `stream` where its queue now ends; `None` where the backend
    /// has no gate for it (the device lacks stream memory operations).
    pub fn on<A: Backend>(stream: A::Stream) -> Option<Self> {
        let mut gate = A::gate(stream).ok().flatten()?;
        gate.close().ok()?;
        let gate = Arc::new(Mutex::new(Some(gate)));
        let (released, told) = mpsc::channel::<()>();
        let watchdog = {
            let gate = Arc::clone(&gate);
            std::thread::spawn(move || {
                if told.recv_timeout(HOLD_LIMIT) == Err(mpsc::RecvTimeoutError::Timeout) {
                    open(&gate);
                }
            })
        };
        Some(Self {
            gate,
            released: Some(released),
            watchdog: Some(watchdog),
        })
    }

    /// Let the held work run. False when the watchdog had let it go
    /// already, [`HOLD_LIMIT`] after the hold began: something waited for
    /// the held work meanwhile.
    #[must_use]
    pub fn release(mut self) -> bool {
        self.let_go()
    }

    fn let_go(&mut self) -> bool {
        let opened = open(&self.gate);
        drop(self.released.take());
        if let Some(watchdog) = self.watchdog.take() {
            let _ = watchdog.join();
        }
        opened
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let _ = self.let_go();
    }
}

/// Without a hold: `asked_ahead` with work of 30 ms, doubled until the
/// host asked before the device was done, 8 times at most (3.8 s of work),
/// so that a stall of the host's is outlasted rather than failed. It says
/// whether it asked in time, and asserts the rest itself.
pub fn ahead_of_the_device(mut asked_ahead: impl FnMut(Duration) -> bool) {
    let mut work = Duration::from_millis(30);
    for _ in 0..8 {
        if asked_ahead(work) {
            return;
        }
        work *= 2;
    }
    panic!("never asked ahead of the device, with up to {work:?} of work queued");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_doubles_until_the_host_asks_ahead_of_it() {
        let mut tried = Vec::new();
        ahead_of_the_device(|work| {
            tried.push(work);
            tried.len() == 3
        });
        assert_eq!(
            tried,
            [30, 60, 120].map(Duration::from_millis),
            "each try doubles the work"
        );
    }

    #[test]
    #[should_panic(expected = "never asked ahead of the device")]
    fn a_check_never_ahead_of_the_device_fails() {
        ahead_of_the_device(|_| false);
    }
}
