//! Fences and device-timed profiling windows over the C-family device event
//! APIs, written once.
//!
//! A backend crate (`device-events-cuda`, `device-events-hip`) implements
//! [`EventApi`]: the nine driver calls for events and streams, each turning a
//! status into a [`DriverError`]. Everything above them lives here:
//!
//! - [`EventFence`]: a point on a stream that another stream or the host can
//!   wait for; it never panics, and releases its event exactly once.
//! - [`FencePool`]: fences whose events are reused, for a server that makes
//!   many.
//! - [`EventProfiler`]: timing windows on streams whose device-measured
//!   durations are placed on the host clock through a calibrated anchor and
//!   an estimate of the device clock's drift.
//!
//! ```
//! use device_events_core::{EventApi, EventFence, EventProfiler, sim::Sim};
//! use std::time::Duration;
//!
//! let a = Sim::stream_create_non_blocking()?;
//! let b = Sim::stream_create_non_blocking()?;
//! let mut profiler = EventProfiler::<Sim>::new();
//!
//! let window = profiler.start(a);
//! Sim::enqueue_work(a, Duration::from_micros(100));
//! let fence = EventFence::<Sim>::new(a);
//! fence.wait_async(b)?;
//! let timing = profiler.stop(a, window)?;
//!
//! let ticks = pollster::block_on(timing.resolve()).expect("the window was read");
//! assert!(ticks.duration() >= Duration::from_micros(100));
//! # drop((fence, profiler));
//! # Sim::stream_destroy(a)?;
//! # Sim::stream_destroy(b)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

mod anchor;
mod anchoring;
mod api;
mod arena;
mod calibrator;
mod capture;
mod checked;
mod config;
mod drift;
pub mod driver;
mod errors;
mod event;
mod fence;
mod gate;
mod handles;
mod point;
mod pool;
mod profiler;
pub mod raw;
mod reading;
mod resolver;
mod resolving;
#[cfg(feature = "sim")]
pub mod sim;
mod stream;
mod symbols;
#[cfg(feature = "sim")]
pub mod tally;
mod threads;
mod token;

pub use api::{EventApi, EventQuery};
pub use calibrator::wait_for_calibrations;
pub use checked::release_idle_events;
pub use config::ProfilerConfig;
pub use driver::{CaptureStatus, DriverError, ErrorKind};
pub use errors::ProfileError;
pub use fence::{EventFence, FencePool};
pub use gate::{AnchorApi, Gate, HostStamp};
pub use profiler::EventProfiler;
pub use reading::Placement;
pub use resolver::resolver_running;
pub use resolving::PlacedWindow;
pub use stream::OwnedStream;
#[cfg(feature = "sim")]
pub use threads::refuse_thread_starts;
pub use threads::{library_threads_running, stop_driver_calls};
pub use token::ProfileToken;

/// The `cubecl-common` profiling types windows resolve to, re-exported so a
/// user need not match its version.
pub mod profile {
    pub use cubecl_common::profile::{Duration, Instant, ProfileDuration, ProfileTicks};
}
