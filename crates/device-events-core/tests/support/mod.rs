//! Shared by the core's tests: exclusive use of the simulated device, and a
//! logger that keeps what it is given so tests can assert on it.
#![allow(dead_code, clippy::expect_used)]

use std::sync::{Mutex, Once, PoisonError};

use device_events_core::sim::{Sim, SimGuard};

static LOGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        LOGS.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(format!("{} {}", record.level(), record.args()));
    }
    fn flush(&self) {}
}

/// The simulated device, reset, with the captured log emptied.
pub fn setup() -> SimGuard {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        log::set_logger(&Capture).expect("no other logger in tests");
        log::set_max_level(log::LevelFilter::Trace);
    });
    let guard = Sim::exclusive();
    LOGS.lock().unwrap_or_else(PoisonError::into_inner).clear();
    guard
}

/// Every line logged since [`setup`].
pub fn logs() -> Vec<String> {
    LOGS.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// Whether a logged line mentions all of `parts`.
pub fn logged(parts: &[&str]) -> bool {
    logs()
        .iter()
        .any(|line| parts.iter().all(|part| line.contains(part)))
}
