//! A thread per device that takes its anchors, so that no caller's thread
//! waits for a calibration: `start()` only hands one over.
//!
//! Calibrations are rare (every few milliseconds until a profiler's drift
//! fit is trusted, then every second) and short on an idle device, so one
//! thread serves every profiler of a device, one calibration at a time. A
//! calibration stuck behind a long kernel on a shared hardware queue (or a
//! hung device) delays only the ones of its own device: each device's are
//! taken on a thread of its own, started on demand and gone once idle.
//!
//! Apart from the resolver thread: a calibration waits (after a short
//! poll), and the resolver must not.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::tunables::calibrator::{STAY_IDLE_AT_MOST, STAY_IDLE_FOR};

/// Work for a device's calibrator thread (a calibration, or a dropped
/// profiler's release), bound to whatever it needs.
pub(crate) type DeviceTask = Box<dyn FnOnce() + Send>;

/// A device's calibrations: its context's key, as the backend gives it
/// (`None` where it gives none: one thread for all such).
type Device = Option<u64>;

struct CalibrationQueue {
    /// Each device's queued calibrations, whether its thread is up, and
    /// how long it stays idle for the next.
    devices: Vec<(Device, VecDeque<DeviceTask>, bool, Duration)>,
    /// Queued or running, on every device.
    busy: usize,
    /// The process whose threads are up: a child made by `fork` inherits
    /// this memory but not the threads.
    process: Option<u32>,
}

static CALIBRATION_QUEUE: Mutex<CalibrationQueue> = Mutex::new(CalibrationQueue {
    devices: Vec::new(),
    busy: 0,
    process: None,
});
static CALIBRATION_HANDED: Condvar = Condvar::new();
static CALIBRATIONS_DONE: Condvar = Condvar::new();

fn calibration_queue() -> MutexGuard<'static, CalibrationQueue> {
    CALIBRATION_QUEUE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

impl CalibrationQueue {
    fn device(&mut self, device: Device) -> &mut (Device, VecDeque<DeviceTask>, bool, Duration) {
        let at = match self.devices.iter().position(|(d, ..)| *d == device) {
            Some(at) => at,
            None => {
                self.devices
                    .push((device, VecDeque::new(), false, STAY_IDLE_FOR));
                self.devices.len() - 1
            }
        };
        &mut self.devices[at]
    }
}

/// Tasks no thread will run: each fills its anchor with a failure as it
/// drops, which takes its profiler's locks, so the caller drops them once
/// it holds none.
#[must_use = "dropped only where no profiler lock is held"]
pub(crate) struct Unrun(#[allow(dead_code)] VecDeque<DeviceTask>);

/// Hand `task` to `device`'s calibrator thread, starting it if needed;
/// `every`: how often its profiler calibrates at most (its
/// `anchor_max_age`), which the thread stays idle for, and
/// [`STAY_IDLE_FOR`] more, up to [`STAY_IDLE_AT_MOST`].
///
/// # Errors
///
/// When no thread could be started: the reason, and every task queued for
/// the device (this one among them), unrun.
pub(crate) fn run_for_device(
    device: Device,
    task: DeviceTask,
    every: Duration,
) -> Result<(), (std::io::Error, Unrun)> {
    if crate::threads::stopping() {
        // The process is exiting: never run, and nothing released.
        std::mem::forget(task);
        return Ok(());
    }
    let mut q = calibration_queue();
    forget_the_parents(&mut q);
    q.busy += 1;
    q.process = Some(std::process::id());
    let (_, tasks, running, stay) = q.device(device);
    tasks.push_back(task);
    *stay = (*stay).max(every.saturating_add(STAY_IDLE_FOR).min(STAY_IDLE_AT_MOST));
    if *running {
        drop(q);
        CALIBRATION_HANDED.notify_all();
        return Ok(());
    }
    *running = true;
    drop(q);
    if let Err(err) =
        crate::threads::start("device-events-calibrator", move || run_device_tasks(device))
    {
        let mut q = calibration_queue();
        let (_, tasks, running, _) = q.device(device);
        *running = false;
        let unrun = std::mem::take(tasks);
        q.busy -= unrun.len();
        drop(q);
        CALIBRATIONS_DONE.notify_all();
        return Err((err, Unrun(unrun)));
    }
    Ok(())
}

/// In a child made by `fork`, the queue is the parent's: its threads are
/// not here, and its calibrations (running or queued) will never end. They
/// are forgotten, not dropped: a lock they would take may have been held
/// by a parent's thread at the fork.
fn forget_the_parents(q: &mut CalibrationQueue) {
    if q.process.is_some_and(|pid| pid != std::process::id()) {
        q.process = None;
        q.busy = 0;
        std::mem::forget(std::mem::take(&mut q.devices));
    }
}

/// The queue, locked, for [`crate::process::before_fork`]: no calibrator thread
/// holds it as the process forks.
pub(crate) fn lock_for_fork() -> Box<dyn std::any::Any> {
    Box::new(calibration_queue())
}

/// [`forget_the_parents`], at once: in a child made by `fork`.
pub(crate) fn forget_the_parents_now() {
    forget_the_parents(&mut calibration_queue());
}

/// Whether a calibrator thread is up in this process.
pub(crate) fn running() -> bool {
    let q = calibration_queue();
    q.process == Some(std::process::id()) && q.devices.iter().any(|(_, _, running, _)| *running)
}

fn run_device_tasks(device: Device) {
    let mut q = calibration_queue();
    // When this device last had nothing to do: one condvar serves every
    // device's thread, so a wake-up for another device must not restart
    // this one's idle spell.
    let mut idle_since: Option<Instant> = None;
    loop {
        if let Some(task) = q.device(device).1.pop_front() {
            idle_since = None;
            drop(q);
            // Every lock the task takes is taken inside it: a fork waits
            // for the task to sleep between asks, or to end (`fork_gate`).
            let work = crate::fork_gate::library_work();
            if let Some(_working) = crate::threads::working() {
                // A task never panics by design; one that did must not take
                // the thread, and the device's calibrations, with it.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(task)).is_err() {
                    log::warn!("device-events: a calibration panicked; its windows read None");
                }
            } else {
                // The process is exiting: the task neither runs nor drops
                // (dropping could release driver handles).
                std::mem::forget(task);
            }
            drop(work);
            q = calibration_queue();
            q.busy -= 1;
            if q.busy == 0 {
                CALIBRATIONS_DONE.notify_all();
            }
            continue;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        let left = q.device(device).3.saturating_sub(since.elapsed());
        if left.is_zero() {
            q.devices.retain(|(d, ..)| *d != device);
            return;
        }
        q = CALIBRATION_HANDED
            .wait_timeout(q, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

/// Wait, at most `timeout`, until no calibration is queued or running;
/// whether none is.
///
/// A dropped profiler's anchor stream, gate and anchor events are released
/// on the calibrator thread, after any calibration in flight: wait here
/// before counting what a driver still holds, or before tearing down a
/// context by hand.
///
/// ```
/// use std::time::Duration;
///
/// assert!(device_events_core::process::wait_for_calibrations(Duration::from_secs(1)));
/// ```
pub fn wait_for_calibrations(timeout: Duration) -> bool {
    let mut q = calibration_queue();
    forget_the_parents(&mut q);
    let (q, _) = CALIBRATIONS_DONE
        .wait_timeout_while(q, timeout, |q| q.busy > 0)
        .unwrap_or_else(PoisonError::into_inner);
    q.busy == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `device`'s calibrator thread is up.
    fn up(device: Device) -> bool {
        calibration_queue()
            .devices
            .iter()
            .any(|(d, _, running, _)| *d == device && *running)
    }

    /// A device's thread waits out the refresh period of the profilers it
    /// calibrates, so that a refresh less frequent than [`STAY_IDLE_FOR`]
    /// finds it up: starting it again would allocate on the caller.
    #[test]
    fn a_devices_thread_stays_idle_through_its_profilers_refresh_period() {
        let device = Some(u64::MAX - 3);
        let (ran, done) = std::sync::mpsc::channel();
        let handed = Instant::now();
        let task = Box::new(move || {
            let _ = ran.send(());
        });
        assert!(run_for_device(device, task, Duration::from_secs(30)).is_ok());
        assert!(done.recv_timeout(Duration::from_secs(10)).is_ok());
        let seen = STAY_IDLE_FOR + Duration::from_secs(1);
        std::thread::sleep(seen.saturating_sub(handed.elapsed()));
        assert!(
            up(device),
            "the thread left within {seen:?} of a calibration refreshed every 30 s"
        );
    }

    /// A device's thread leaves once idle for [`STAY_IDLE_FOR`], however
    /// often another device calibrates meanwhile.
    #[test]
    fn an_idle_devices_thread_leaves_while_another_device_calibrates() {
        // Keys no backend gives in these tests.
        let (idle, busy) = (Some(u64::MAX - 1), Some(u64::MAX - 2));
        assert!(run_for_device(idle, Box::new(|| {}), Duration::ZERO).is_ok());
        assert!(wait_for_calibrations(Duration::from_secs(10)));
        assert!(up(idle), "the thread stays for the next calibration");
        // Another device calibrates every 100 ms, for twice the idle spell
        // and a second more.
        let until = Instant::now() + STAY_IDLE_FOR * 2 + Duration::from_secs(1);
        while Instant::now() < until {
            assert!(run_for_device(busy, Box::new(|| {}), Duration::ZERO).is_ok());
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(
            !up(idle),
            "an idle device's calibrator thread stayed {:?} while another device calibrated",
            STAY_IDLE_FOR * 2 + Duration::from_secs(1)
        );
    }
}
