//! Waiting for the device by asking it, on the schedule every calibration
//! keeps: tightly, yielding, for [`POLL_FOR`] (past a launch latency and a
//! busy machine's scheduling delays, where a sleep would stretch a bracket
//! by its own lateness), then from sleeps, outside the thread's piece of
//! library work, so that a fork need not wait for the device. The event
//! backends' anchors and the stamp clocks' both wait through here.

use std::time::{Duration, Instant};

use crate::driver::DriverError;
use crate::fork_gate::outside_library_work;
use crate::tunables::calibrator::{ARRIVE_SLEEP, POLL_FOR, REACH_FIRST_SLEEP, REACH_SLEEP_UP_TO};

/// How a wait for the device ended.
pub(crate) enum Polled {
    /// The device got there.
    Reached,
    /// The backend cannot ask without waiting (`ask` said `None`).
    CannotAsk,
    /// The process began exiting
    /// ([`stop_driver_calls`](crate::process::stop_driver_calls)).
    Stopping,
    /// The time allowed passed first.
    GaveUp,
}

/// Ask `ask` (whether the device has reached a point; `None` where the
/// backend cannot ask) until it has, from sleeps that start at
/// [`REACH_FIRST_SLEEP`] and double up to [`REACH_SLEEP_UP_TO`] once
/// [`POLL_FOR`] is past; for at most `give_up`.
///
/// # Errors
///
/// The driver's error from `ask`, for anything but "not yet".
pub(crate) fn reach(
    mut ask: impl FnMut() -> Option<Result<bool, DriverError>>,
    give_up: Duration,
) -> Result<Polled, DriverError> {
    let started = Instant::now();
    let mut interval = REACH_FIRST_SLEEP;
    loop {
        let Some(reached) = ask() else {
            return Ok(Polled::CannotAsk);
        };
        if crate::threads::stopping() {
            return Ok(Polled::Stopping);
        }
        if reached? {
            return Ok(Polled::Reached);
        }
        let waited = started.elapsed();
        if waited >= give_up {
            return Ok(Polled::GaveUp);
        }
        if waited < POLL_FOR {
            // Leaves the core to a thread that shares it, the driver's own
            // among them on a small machine.
            std::thread::yield_now();
        } else {
            outside_library_work(|| std::thread::sleep(interval));
            interval = (interval * 2).min(REACH_SLEEP_UP_TO);
        }
    }
}

/// Ask `ask` until the device has reached a point (a mark ahead of a
/// gate), for at most `bound`: from sleeps of [`ARRIVE_SLEEP`] once
/// [`POLL_FOR`] is past (a queue that far behind other work holds nobody
/// at its gate yet), and for the whole `bound` where the backend cannot
/// ask. `Reached`, `Stopping`, or `GaveUp` once `bound` has passed.
///
/// # Errors
///
/// The driver's error from `ask`, for anything but "not yet".
pub(crate) fn arrive(
    mut ask: impl FnMut() -> Option<Result<bool, DriverError>>,
    bound: Duration,
) -> Result<Polled, DriverError> {
    let started = Instant::now();
    while started.elapsed() < bound {
        if crate::threads::stopping() {
            return Ok(Polled::Stopping);
        }
        match ask() {
            Some(reached) => {
                if reached? {
                    return Ok(Polled::Reached);
                }
                if started.elapsed() < POLL_FOR {
                    std::thread::yield_now();
                } else {
                    let sleep = ARRIVE_SLEEP.min(bound.saturating_sub(started.elapsed()));
                    outside_library_work(|| std::thread::sleep(sleep));
                }
            }
            None => {
                let sleep = bound.saturating_sub(started.elapsed());
                outside_library_work(|| std::thread::sleep(sleep));
            }
        }
    }
    Ok(Polled::GaveUp)
}
