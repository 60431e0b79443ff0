//! Fences and device-timed profiling windows over the C-family device event
//! APIs, written once.
//!
//! - [`EventFence`]: a point on a stream that another stream or the host can
//!   wait for; it never panics, and releases its event exactly once.
//! - [`FencePool`]: fences whose events are reused, for a server that makes
//!   many.
//! - [`EventProfiler`]: timing windows on streams whose device-measured
//!   durations are placed on the host clock through a calibrated anchor and
//!   an estimate of the device clock's drift.
//!
//! They are generic over a backend: `device-events-cuda`,
//! `device-events-hip` or `device-events-opencl`. Code generic over one
//! bounds it by [`Backend`], the one bound a user writes. The root holds
//! what a user names; [`process`] what a process does around a context
//! torn down by hand and its exit; [`profile`] a window's token. A window
//! resolves to the crate's own [`Placement`]: the device's span, its ends
//! on the host clock ([`std::time::Instant`]) and a bound on their error. A backend author reads [`backend`]: a backend
//! implements [`backend::RawApi`], its driver calls alone, and this crate
//! makes it a [`Backend`] once, with the checked handles, the refusals, the
//! context binding and the capture modes.
//!
//! The repository's `README.md` says what has been tested where and how to
//! start; its `docs/design.md` explains the threads, graph capture, fork,
//! exit and placement, and `docs/adding-a-backend.md` lists every place a
//! new backend touches. The source is in folders by concept (`events/`:
//! the events fences, windows and anchors are made of; `fence/`;
//! `anchoring/`; `placement/`: where a reading lies on the host clock and
//! its bound; `waiting/`; `profiler/`; `backend/`; `testing/`), each
//! importing only from those before it and from the files beside `lib.rs`;
//! `cargo xtask layers` checks it. The library threads' internal timings
//! (polls, sleeps, back-offs, idle spells) are in one file beside it,
//! `src/tunables.rs`, by thread.
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
//! let placed = pollster::block_on(timing).expect("the window was read");
//! assert!(placed.duration >= Duration::from_micros(100));
//! # drop((fence, profiler));
//! # Sim::stream_destroy(a)?;
//! # Sim::stream_destroy(b)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

mod anchoring;
mod api;
mod arena;
pub mod backend;
mod config;
mod driver;
mod errors;
mod events;
mod fence;
mod fork_gate;
mod limits;
mod owned_stream;
mod placement;
pub mod process;
mod profiler;
#[cfg(feature = "sim")]
mod testing;
mod threads;
mod tunables;
mod waiting;

pub use api::EventApi;
pub use config::{AnchorConfig, DriverPairing, ProfilerConfig};
pub use driver::{CaptureStatus, DriverError, ErrorKind};
pub use errors::ProfileError;
pub use fence::event_fence::{EventFence, FencePool};
pub use owned_stream::OwnedStream;
pub use placement::Placement;
pub use placement::clock_placer::ClockPlacer;
pub use profiler::EventProfiler;
#[cfg(feature = "sim")]
pub use testing::{sim, tally};
pub use waiting::placed_window::PlacedWindow;

/// What code generic over a backend bounds it by: every backend
/// (`Cuda`, `Hip`, `OpenCl`, any [`backend::RawApi`]) is one, through the
/// blanket impl below, so a user never implements it.
///
/// [`EventProfiler`] and [`EventFence`] ask only the parts they use
/// ([`backend::AnchorApi`], [`backend::FenceApi`]), so that a type made
/// over [`EventApi`] alone, a test double or a wrapper, can stand in where
/// those suffice.
///
/// ```
/// use device_events_core::{Backend, EventFence, EventProfiler, OwnedStream, sim::Sim};
///
/// /// A window on `stream`, and a fence after it: the one bound serves both.
/// fn fenced_window<A: Backend>(
///     profiler: &mut EventProfiler<A>,
///     stream: A::Stream,
/// ) -> Result<EventFence<A>, Box<dyn std::error::Error>> {
///     let window = profiler.start(stream);
///     let fence = EventFence::new(stream);
///     let _timing = profiler.stop(stream, window)?;
///     Ok(fence)
/// }
///
/// let stream = OwnedStream::<Sim>::new()?;
/// let mut profiler = EventProfiler::new();
/// let fence = fenced_window::<Sim>(&mut profiler, stream.get())?;
/// fence.wait_sync()?;
/// assert!(fence.is_complete()?);
/// # drop((fence, profiler));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Backend: backend::EventQuery + backend::AnchorApi + backend::FenceApi {}

impl<A: backend::EventQuery + backend::AnchorApi + backend::FenceApi> Backend for A {}

/// A window's token, as [`EventProfiler::start`] hands it out.
pub mod profile {
    pub use crate::profiler::token::ProfileToken;
}
