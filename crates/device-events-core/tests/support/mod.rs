//! Shared by the core's tests: exclusive use of the simulated device, and a
//! logger that keeps what it is given so tests can assert on it.
#![allow(dead_code, clippy::expect_used)]

use std::sync::{Mutex, Once, PoisonError};

use std::time::Duration;

use device_events_core::sim::{Sim, SimGuard, SimStream};
use device_events_core::{DriverError, EventApi};

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

/// `EventApi` for `$backend`, every call the simulated backend's: for a
/// test backend that changes only its other traits' calls.
#[allow(unused_macros)]
macro_rules! events_of_sim {
    ($backend:ty) => {
        impl device_events_core::EventApi for $backend {
            type Event = <device_events_core::sim::Sim as device_events_core::EventApi>::Event;
            type Stream = device_events_core::sim::SimStream;
            const BACKEND: &'static str = "sim";

            fn event_create() -> Result<Self::Event, device_events_core::DriverError> {
                <device_events_core::sim::Sim as device_events_core::EventApi>::event_create()
            }
            fn event_destroy(
                event: &mut Self::Event,
            ) -> Result<(), device_events_core::DriverError> {
                <device_events_core::sim::Sim as device_events_core::EventApi>::event_destroy(event)
            }
            fn event_record(
                event: &Self::Event,
                stream: Self::Stream,
            ) -> Result<(), device_events_core::DriverError> {
                <device_events_core::sim::Sim as device_events_core::EventApi>::event_record(
                    event, stream,
                )
            }
            fn event_wait(event: &Self::Event) -> Result<(), device_events_core::DriverError> {
                <device_events_core::sim::Sim as device_events_core::EventApi>::event_wait(event)
            }
            fn event_elapsed(
                start: &Self::Event,
                end: &Self::Event,
            ) -> Result<std::time::Duration, device_events_core::DriverError> {
                <device_events_core::sim::Sim as device_events_core::EventApi>::event_elapsed(
                    start, end,
                )
            }
            fn stream_wait_event(
                stream: Self::Stream,
                event: &Self::Event,
            ) -> Result<(), device_events_core::DriverError> {
                <device_events_core::sim::Sim as device_events_core::EventApi>::stream_wait_event(
                    stream, event,
                )
            }
            fn stream_synchronize(
                stream: Self::Stream,
            ) -> Result<(), device_events_core::DriverError> {
                <device_events_core::sim::Sim as device_events_core::EventApi>::stream_synchronize(
                    stream,
                )
            }
            fn stream_create_non_blocking()
            -> Result<Self::Stream, device_events_core::DriverError> {
                <device_events_core::sim::Sim as device_events_core::EventApi>::stream_create_non_blocking()
            }
            fn stream_destroy(stream: Self::Stream) -> Result<(), device_events_core::DriverError> {
                <device_events_core::sim::Sim as device_events_core::EventApi>::stream_destroy(
                    stream,
                )
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use events_of_sim;

/// What happens at each wait in the driver, for [`OnWait`].
pub trait WaitHook: Send + Sync + 'static {
    /// Called on entering each wait.
    fn waited();
}

/// The simulated backend, with a hook at each wait in the driver.
pub struct OnWait<H>(std::marker::PhantomData<fn() -> H>);

impl<H: WaitHook> EventApi for OnWait<H> {
    type Event = <Sim as EventApi>::Event;
    type Stream = SimStream;
    const BACKEND: &'static str = "sim";

    fn event_create() -> Result<Self::Event, DriverError> {
        Sim::event_create()
    }
    fn event_destroy(event: &mut Self::Event) -> Result<(), DriverError> {
        Sim::event_destroy(event)
    }
    fn event_record(event: &Self::Event, stream: SimStream) -> Result<(), DriverError> {
        Sim::event_record(event, stream)
    }
    fn event_wait(event: &Self::Event) -> Result<(), DriverError> {
        H::waited();
        Sim::event_wait(event)
    }
    fn event_elapsed(start: &Self::Event, end: &Self::Event) -> Result<Duration, DriverError> {
        Sim::event_elapsed(start, end)
    }
    fn stream_wait_event(stream: SimStream, event: &Self::Event) -> Result<(), DriverError> {
        Sim::stream_wait_event(stream, event)
    }
    fn stream_synchronize(stream: SimStream) -> Result<(), DriverError> {
        H::waited();
        Sim::stream_synchronize(stream)
    }
    fn stream_create_non_blocking() -> Result<SimStream, DriverError> {
        Sim::stream_create_non_blocking()
    }
    fn stream_destroy(stream: SimStream) -> Result<(), DriverError> {
        Sim::stream_destroy(stream)
    }
}

impl<H: WaitHook> device_events_core::backend::AnchorApi for OnWait<H> {}
impl<H: WaitHook> device_events_core::backend::ThreadApi for OnWait<H> {}
impl<H: WaitHook> device_events_core::backend::FenceApi for OnWait<H> {}
