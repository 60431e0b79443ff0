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
//! The source, by folder; each imports only from those above it in this
//! list, and from the files beside `lib.rs` (the user's API: `api`,
//! `driver`, `errors`, `config`, `owned_stream`; `arena` and `threads`):
//!
//! - `fence/`: fences, fence pools, owned and pooled events, the points a
//!   window records, and [`FenceApi`], a backend's event reuse.
//! - `placement/`: the anchor, its refresh, the calibrator thread, the
//!   drift fit, and [`AnchorApi`], a backend's gate and host stamps.
//! - `waiting/`: reading a closed window, and the resolver thread that
//!   answers a window's future.
//! - `profiler/`: the profiler, its chains and tokens.
//! - `backend/`: the raw seam a backend implements and the checked layer
//!   over it: the only folder a backend author reads.
//! - `testing/`: the simulated and counting backends (feature `sim`).
//!
//! `cargo xtask layers` checks that no import runs the other way.
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

mod api;
mod arena;
mod backend;
mod config;
pub mod driver;
mod errors;
mod fence;
mod owned_stream;
mod placement;
mod profiler;
#[cfg(feature = "sim")]
mod testing;
mod threads;
mod waiting;

pub use api::{EventApi, EventQuery};
pub use backend::checked::release_idle_events;
pub use config::ProfilerConfig;
pub use driver::{CaptureStatus, DriverError, ErrorKind};
pub use errors::ProfileError;
pub use fence::FenceApi;
pub use fence::event_fence::{EventFence, FencePool};
pub use owned_stream::OwnedStream;
pub use placement::calibrator::wait_for_calibrations;
pub use placement::{AnchorApi, Gate, HostStamp};
pub use profiler::EventProfiler;
pub use profiler::token::ProfileToken;
#[cfg(feature = "sim")]
pub use testing::{sim, tally};
#[cfg(feature = "sim")]
pub use threads::refuse_thread_starts;
pub use threads::{
    ThreadApi, after_fork_in_child, after_fork_in_parent, before_fork, stop_driver_calls,
};
pub use waiting::placed_window::PlacedWindow;
pub use waiting::reading::Placement;
pub use waiting::resolver::resolver_running;

/// The seam a backend implements: its driver calls, each turning a status
/// into a [`DriverError`], and nothing else. Liveness, binding, refusals and
/// capture modes are the checked layer's, written once.
pub mod raw {
    pub use crate::backend::checked::IDLE_EVENTS;
    pub use crate::backend::raw::{
        CallNames, CheckedEvent, CheckedStream, HostWord, Live, Permit, RawApi, State,
    };
}

/// The `cubecl-common` profiling types windows resolve to, re-exported so a
/// user need not match its version.
pub mod profile {
    pub use cubecl_common::profile::{Duration, Instant, ProfileDuration, ProfileTicks};
}

/// Whether any of the library's threads is up in this process: a few
/// seconds after the last profiler is dropped and its work is done, none
/// is.
///
/// ```
/// // No profiler yet, so no thread.
/// assert!(!device_events_core::library_threads_running());
/// ```
pub fn library_threads_running() -> bool {
    placement::calibrator::running() || waiting::resolver::resolver_running()
}
