//! CubeCL's profiling and fence contract, as `cubecl-runtime` 0.12 defines
//! it in its `server::Server` trait, over any device-events backend (`Cuda`,
//! `Hip`, `OpenCl`): a server forwards its calls and returns what it gets.
//!
//! - [`CubeProfiler`]: the methods of CubeCL's own `EventProfiler`
//!   (`start`, `start_at_launch`, `launching`, `stop`, `abandon`,
//!   `failure`) with its signatures, and the server's failure path: a
//!   refused start is an `Err` at `start`, a window the server failed inside (or whose events
//!   the driver refused) is
//!   [`ProfileError::Server`](cubecl_runtime::server::ProfileError::Server),
//!   and one with no device timing a `ProfileDuration` whose future yields
//!   `None`, never a zero.
//! - [`CubeFence`]: the fence behind `flush` and `sync`, with
//!   [`ServerError`](cubecl_runtime::server::ServerError)s, never a panic,
//!   and CubeCL's fallbacks where they are sound.
//! - [`CubeStreams`]: a server's raw streams (`CUstream`, `hipStream_t`)
//!   as it keeps them, each admitted once as it makes it, found by handle
//!   after (features `cuda`, `hip`).
//! - [`server_error`]: a poisoning fault is `ServerError::DevicePoisoned`,
//!   as CubeCL's own backends report it.
//!
//! The `ProfileDuration` is `cubecl-common` 0.12's, the one a CubeCL 0.12
//! server returns: this crate alone makes it, boxing the core's window once
//! (the core itself depends on no CubeCL crate).
//!
//! How a server forwards its calls, and what it still writes itself: the
//! repository's `docs/design.md`; the whole change for CubeCL's own CUDA and
//! HIP backends: `ci/cubecl/`, checked by `cargo xtask cubecl`.
//!
//! ```
//! use device_events_core::{EventApi, OwnedStream, sim::Sim};
//! use device_events_cubecl::{CubeFence, CubeProfiler};
//! use std::time::Duration;
//!
//! let (a, b) = (OwnedStream::<Sim>::new()?, OwnedStream::<Sim>::new()?);
//! let mut profiler = CubeProfiler::<Sim>::new();
//!
//! // The server's `start_profile_at_launch`: the window opens at the next launch.
//! let token = profiler.start_at_launch(a.get())?;
//! // ... the server prepares the launch on the host ...
//! profiler.launching(a.get()); // right before it enqueues the kernel
//! Sim::enqueue_work(a.get(), Duration::from_micros(100));
//! let duration = profiler.stop(a.get(), token)?;
//!
//! // `flush` / `sync`: the consumer stream waits on the device.
//! CubeFence::<Sim>::new(a.get()).wait_async(b.get())?;
//!
//! let ticks = pollster::block_on(duration.resolve()).expect("measured");
//! assert!(ticks.duration() >= Duration::from_micros(100));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod errors;
mod fence;
mod profiler;
mod streams;
mod ticks;

pub use errors::server_error;
pub use fence::CubeFence;
pub use profiler::CubeProfiler;
pub use streams::{Admitted, CubeStreams, RawStreams, StreamOf};
