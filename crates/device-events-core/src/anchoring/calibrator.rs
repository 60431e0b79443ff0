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

use crate::tunables::calibrator::STAY_IDLE_FOR;

/// Work for a device's calibrator thread (a calibration, or a dropped
/// profiler's release), bound to whatever it needs.
pub(crate) type DeviceTask = Box<dyn FnOnce() + Send>;

/// A device's calibrations: its context's key, as the backend gives it
/// (`None` where it gives none: one thread for all such).
type Device = Option<u64>;

/// One device's calibrations and thread.
struct DeviceQueue {
    device: Device,
    /// Queued, not yet running.
    tasks: VecDeque<DeviceTask>,
    /// Whether its thread is up.
    running: bool,
    /// Profilers of it alive: its thread stays while any is.
    profilers: usize,
}

struct CalibrationQueue {
    devices: Vec<DeviceQueue>,
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
    fn device(&mut self, device: Device) -> &mut DeviceQueue {
        let at = match self.devices.iter().position(|d| d.device == device) {
            Some(at) => at,
            None => {
                self.devices.push(DeviceQueue {
                    device,
                    tasks: VecDeque::new(),
                    running: false,
                    profilers: 0,
                });
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

/// Hand `task` to `device`'s calibrator thread, starting it if needed.
///
/// # Errors
///
/// When no thread could be started: the reason, and every task queued for
/// the device (this one among them), unrun.
pub(crate) fn run_for_device(
    device: Device,
    task: DeviceTask,
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
    let DeviceQueue { tasks, running, .. } = q.device(device);
    tasks.push_back(task);
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
        let DeviceQueue { tasks, running, .. } = q.device(device);
        *running = false;
        let unrun = std::mem::take(tasks);
        q.busy -= unrun.len();
        drop(q);
        CALIBRATIONS_DONE.notify_all();
        return Err((err, Unrun(unrun)));
    }
    Ok(())
}

/// A profiler of `device` made its anchor stream: the device's thread
/// stays up, idle between its refreshes, until it is dropped
/// ([`profiler_left`]), however far apart its refreshes are. A thread
/// started again for each would allocate on the `start` that hands the
/// refresh over.
pub(crate) fn profiler_joined(device: Device) {
    let mut q = calibration_queue();
    forget_the_parents(&mut q);
    q.process = Some(std::process::id());
    q.device(device).profilers += 1;
}

/// A profiler of `device` that [joined](profiler_joined) is dropped: once
/// none is left, its thread leaves after [`STAY_IDLE_FOR`] idle.
pub(crate) fn profiler_left(device: Device) {
    let mut q = calibration_queue();
    forget_the_parents(&mut q);
    let profilers = &mut q.device(device).profilers;
    *profilers = profilers.saturating_sub(1);
    drop(q);
    CALIBRATION_HANDED.notify_all();
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
    q.process == Some(std::process::id()) && q.devices.iter().any(|d| d.running)
}

fn run_device_tasks(device: Device) {
    let mut q = calibration_queue();
    // When this device last had nothing to do: one condvar serves every
    // device's thread, so a wake-up for another device must not restart
    // this one's idle spell.
    let mut idle_since: Option<Instant> = None;
    loop {
        if let Some(task) = q.device(device).tasks.pop_front() {
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
        let left = if q.device(device).profilers > 0 {
            // A profiler of the device is alive: its next refresh finds
            // the thread up.
            STAY_IDLE_FOR
        } else {
            STAY_IDLE_FOR.saturating_sub(since.elapsed())
        };
        if left.is_zero() {
            q.devices.retain(|d| d.device != device);
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
            .any(|d| d.device == device && d.running)
    }

    /// A device's thread stays up while a profiler of it is alive, however
    /// long it idles (a refresh seconds apart finds it up: starting it
    /// again would allocate on the caller), and leaves once none is.
    #[test]
    fn a_devices_thread_stays_while_a_profiler_of_it_is_alive() {
        let device = Some(u64::MAX - 3);
        profiler_joined(device);
        let (ran, done) = std::sync::mpsc::channel();
        let task = Box::new(move || {
            let _ = ran.send(());
        });
        assert!(run_for_device(device, task).is_ok());
        assert!(done.recv_timeout(Duration::from_secs(10)).is_ok());
        std::thread::sleep(STAY_IDLE_FOR + Duration::from_secs(1));
        assert!(up(device), "the thread left while its profiler lives");
        profiler_left(device);
        let deadline = Instant::now() + STAY_IDLE_FOR + Duration::from_secs(10);
        while up(device) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !up(device),
            "the thread stayed once its profiler was dropped"
        );
    }

    /// A device's thread leaves once idle for [`STAY_IDLE_FOR`], however
    /// often another device calibrates meanwhile.
    #[test]
    fn an_idle_devices_thread_leaves_while_another_device_calibrates() {
        // Keys no backend gives in these tests.
        let (idle, busy) = (Some(u64::MAX - 1), Some(u64::MAX - 2));
        assert!(run_for_device(idle, Box::new(|| {})).is_ok());
        assert!(wait_for_calibrations(Duration::from_secs(10)));
        assert!(up(idle), "the thread stays for the next calibration");
        // Another device calibrates every 100 ms, for twice the idle spell
        // and a second more.
        let until = Instant::now() + STAY_IDLE_FOR * 2 + Duration::from_secs(1);
        while Instant::now() < until {
            assert!(run_for_device(busy, Box::new(|| {})).is_ok());
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(
            !up(idle),
            "an idle device's calibrator thread stayed {:?} while another device calibrated",
            STAY_IDLE_FOR * 2 + Duration::from_secs(1)
        );
    }
}
