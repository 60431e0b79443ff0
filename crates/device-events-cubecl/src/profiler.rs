//! CubeCL's profiling calls over an [`EventProfiler`].

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use cubecl_common::profile::ProfileDuration;
use cubecl_runtime::server::{ProfileError, ProfilingToken, ServerError};
use device_events_core::backend::AnchorApi;
use device_events_core::profile::ProfileToken;
use device_events_core::{EventProfiler, ProfilerConfig};

use crate::StreamOf;
use crate::errors::{not_registered, profile_error, server_error};
use crate::ticks::profile_duration;

/// The windows' hasher: their ids are this profiler's own count, never an
/// adversary's, so a multiply spreads them for the map, where SipHash cost
/// a window more than the rest of its bookkeeping.
#[derive(Default)]
struct Ids(u64);

impl Hasher for Ids {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, id: u64) {
        // Fibonacci hashing: the high bits, which the map's tags take, vary.
        self.0 = (self.0 ^ id).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A window, by CubeCL token.
enum Window<S> {
    /// Opened where its stream was.
    Open(ProfileToken),
    /// Opens at its stream's next launch.
    AtLaunch(S),
    /// The server failed while it was open (or the driver refused its
    /// opening at a launch): [`stop`](CubeProfiler::stop) reports that.
    Failed(ServerError),
}

/// A CubeCL server's profiling, on any backend: tokens are
/// [`ProfilingToken`]s, errors CubeCL's, and durations the
/// `ProfileDuration` a CubeCL 0.12 server returns as it is.
///
/// The methods are CubeCL's own profiler's, so a server keeps its call
/// sites: its `start_profile`, `start_profile_at_launch`, `end_profile` and
/// `abandon_profile` call [`start`](Self::start),
/// [`start_at_launch`](Self::start_at_launch), [`stop`](Self::stop) and
/// [`abandon`](Self::abandon) with the stream it resolves the `StreamId`
/// to, and it calls [`launching`](Self::launching) right before it
/// enqueues a kernel, and [`failure`](Self::failure) when a launch fails.
///
/// It takes CubeCL's contract: a server calls it on its thread with the
/// stream's context current (a CubeCL server's every command makes its
/// context current first), so a window's records skip asking the driver
/// which context is current where the backend allows it, and a window on
/// CUDA costs the driver calls of CubeCL's own profiler, its two records
/// ([`ProfilerConfig::context_current`], set whatever the configuration
/// passed says).
///
/// ```
/// use cubecl_runtime::server::ProfileError;
/// use device_events_core::{OwnedStream, sim::Sim};
/// use device_events_cubecl::CubeProfiler;
///
/// let s = OwnedStream::<Sim>::new()?;
/// let mut profiler = CubeProfiler::<Sim>::new();
/// let token = profiler.start(s.get())?;
/// // A launch failed inside the window: it reads as that failure.
/// let err = cubecl_runtime::server::ServerError::Skipped;
/// profiler.failure(&err);
/// let read = profiler.stop(s.get(), token);
/// assert!(matches!(read, Err(ProfileError::Server(_))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CubeProfiler<A: AnchorApi> {
    profiler: EventProfiler<A>,
    windows: HashMap<u64, Window<A::Stream>, BuildHasherDefault<Ids>>,
    /// Tokens waiting for a launch; usually none, so a launch costs a check.
    at_launch: Vec<u64>,
    next: u64,
}

impl<A: AnchorApi> Default for CubeProfiler<A>
where
    A::Stream: PartialEq,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<A: AnchorApi> CubeProfiler<A>
where
    A::Stream: PartialEq,
{
    /// A profiler with the default configuration.
    pub fn new() -> Self {
        Self::with_config(ProfilerConfig::default())
    }

    /// A profiler with `config`, on CubeCL's contract
    /// ([`ProfilerConfig::context_current`] on).
    pub fn with_config(config: ProfilerConfig) -> Self {
        Self {
            profiler: EventProfiler::with_config(ProfilerConfig {
                context_current: true,
                ..config
            }),
            windows: HashMap::default(),
            at_launch: Vec::new(),
            next: 0,
        }
    }

    fn insert(&mut self, window: Window<A::Stream>) -> ProfilingToken {
        self.next += 1;
        self.windows.insert(self.next, window);
        ProfilingToken { id: self.next }
    }

    /// Open a window where `stream` is.
    ///
    /// # Errors
    ///
    /// The driver's refusal of the window (its event, its record, or the
    /// anchor it needs), as a [`ServerError`], before the server queues
    /// the work to profile; a poisoning fault is
    /// [`ServerError::DevicePoisoned`].
    pub fn start(&mut self, stream: impl StreamOf<A>) -> Result<ProfilingToken, ServerError> {
        let stream = stream.stream()?;
        let token = self
            .profiler
            .try_start(stream)
            .map_err(|err| server_error(&err))?;
        Ok(self.insert(Window::Open(token)))
    }

    /// Open a window at `stream`'s next launch ([`launching`](Self::launching)),
    /// so that the host preparing that launch on an idle device is not
    /// counted as device time. Closed before any launch, it opens where it
    /// is closed: an empty window.
    ///
    /// # Errors
    ///
    /// None: the window opens at the launch, and a refusal then is
    /// reported by [`stop`](Self::stop). CubeCL's signature
    /// keeps the `Result`.
    pub fn start_at_launch(
        &mut self,
        stream: impl StreamOf<A>,
    ) -> Result<ProfilingToken, ServerError> {
        let stream = stream.stream()?;
        let token = self.insert(Window::AtLaunch(stream));
        self.at_launch.push(token.id);
        Ok(token)
    }

    /// The server is about to enqueue a kernel on `stream`: windows waiting
    /// for its next launch open here.
    pub fn launching(&mut self, stream: impl StreamOf<A>) {
        if self.at_launch.is_empty() {
            return;
        }
        // Not admitted: no window waits for it.
        let Ok(stream) = stream.stream() else {
            return;
        };
        let (profiler, windows) = (&mut self.profiler, &mut self.windows);
        self.at_launch.retain(|id| {
            let Some(window) = windows.get_mut(id) else {
                return false;
            };
            match window {
                Window::AtLaunch(s) if *s == stream => {
                    *window = match profiler.try_start(stream) {
                        Ok(token) => Window::Open(token),
                        Err(err) => Window::Failed(server_error(&err)),
                    };
                    false
                }
                Window::AtLaunch(_) => true,
                _ => false,
            }
        });
    }

    /// Close the window `token` opened, on `stream`.
    ///
    /// # Errors
    ///
    /// [`ProfileError::NotRegistered`] for a token this profiler does not
    /// hold (closed or abandoned already, or another's);
    /// [`ProfileError::Server`] for a window the server failed inside
    /// ([`failure`](Self::failure)) or whose own events the driver refused,
    /// with that error (a poisoned device stays poisoned). A window that
    /// simply has no device timing resolves to `None`, never a zero.
    pub fn stop(
        &mut self,
        stream: impl StreamOf<A>,
        token: ProfilingToken,
    ) -> Result<ProfileDuration, ProfileError> {
        let window = self.windows.remove(&token.id).ok_or_else(not_registered)?;
        let stream = match stream.stream() {
            Ok(stream) => stream,
            Err(err) => {
                if let Window::Open(open) = window {
                    let _ = self.profiler.abandon(open);
                }
                self.at_launch.retain(|id| *id != token.id);
                return Err(ProfileError::from(&err));
            }
        };
        let open = match window {
            Window::Open(open) => open,
            Window::AtLaunch(_) => {
                self.at_launch.retain(|id| *id != token.id);
                self.profiler
                    .try_start(stream)
                    .map_err(|err| profile_error(&err))?
            }
            Window::Failed(err) => return Err(ProfileError::from(&err)),
        };
        match self.profiler.stop(stream, open) {
            Ok(window) => Ok(profile_duration(window)),
            Err(device_events_core::ProfileError::Driver(err)) => Err(profile_error(&err)),
            Err(_) => Err(not_registered()),
        }
    }

    /// Drop the window `token` opened, unmeasured: no driver wait, and its
    /// events go back to the pool.
    pub fn abandon(&mut self, token: ProfilingToken) {
        if let Some(Window::Open(open)) = self.windows.remove(&token.id) {
            // A token this profiler made and still holds: nothing to report.
            let _ = self.profiler.abandon(open);
        }
        self.at_launch.retain(|id| *id != token.id);
    }

    /// The server failed (a launch, a write): every open window reads as
    /// `error` at [`stop`](Self::stop) ([`ProfileError::Server`]), as CubeCL's
    /// servers report it. Logged once.
    pub fn failure(&mut self, error: &ServerError) {
        let mut failed = 0;
        for window in self.windows.values_mut() {
            match std::mem::replace(window, Window::Failed(error.clone())) {
                Window::Open(open) => {
                    let _ = self.profiler.abandon(open);
                    failed += 1;
                }
                Window::AtLaunch(_) => failed += 1,
                // The latest failure stands, as in CubeCL's own profiler.
                Window::Failed(_) => {}
            }
        }
        self.at_launch.clear();
        if failed > 0 {
            log::warn!(
                "{}: {failed} profiling window(s) not measured: {error}",
                <A as device_events_core::EventApi>::BACKEND
            );
        }
    }

    /// Windows open now, waiting for a launch included.
    pub fn open_windows(&self) -> usize {
        self.windows.len()
    }
}

impl<A: AnchorApi> std::fmt::Debug for CubeProfiler<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CubeProfiler")
            .field("profiler", &self.profiler)
            .field("windows", &self.windows.len())
            .finish_non_exhaustive()
    }
}
