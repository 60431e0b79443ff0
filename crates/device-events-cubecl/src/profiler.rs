//! CubeCL's profiling calls over an [`EventProfiler`].

use cubecl_common::profile::ProfileDuration;
use cubecl_runtime::server::{ProfileError, ProfilingToken, ServerError};
use device_events_core::backend::AnchorApi;
use device_events_core::profile::ProfileToken;
use device_events_core::{EventProfiler, ProfilerConfig};

use crate::StreamOf;
use crate::errors::{not_registered, profile_error, server_error};
use crate::ticks::profile_duration;

/// Set in the id of a window kept beside the core's (the profiler's
/// `beside`); an open window's id is the core's key, whose
/// index would need 2^31 windows open to reach it (such a key is kept
/// beside too).
const BESIDE: u64 = 1 << 63;

/// A window that is not simply open in the core, by CubeCL token.
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
    /// Windows the core's key does not stand for alone: waiting for a
    /// launch, failed, or of a key with [`BESIDE`] set; each under an id
    /// with [`BESIDE`]. Usually none: an open window's CubeCL token is its
    /// core token's key, so a window costs no map of its own.
    beside: Vec<(u64, Window<A::Stream>)>,
    /// How many of `beside` wait for a launch; usually none, so a launch
    /// costs a check.
    at_launch: usize,
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
            beside: Vec::new(),
            at_launch: 0,
            next: 0,
        }
    }

    /// Keep `window` beside the core's, under an id of its own.
    fn keep_beside(&mut self, window: Window<A::Stream>) -> ProfilingToken {
        self.next += 1;
        let id = BESIDE | self.next;
        self.beside.push((id, window));
        ProfilingToken { id }
    }

    /// The CubeCL token of a window open in the core: its key, or where
    /// that key has [`BESIDE`] set, an id beside.
    fn open(&mut self, token: ProfileToken) -> ProfilingToken {
        match token.key() {
            key if key & BESIDE == 0 => ProfilingToken { id: key },
            _ => self.keep_beside(Window::Open(token)),
        }
    }

    /// The window `id` names, taken out; `None` for one this profiler does
    /// not hold (a spent core key is refused where it is used).
    fn take(&mut self, id: u64) -> Option<Window<A::Stream>> {
        if let Some(at) = self.beside.iter().position(|(kept, _)| *kept == id) {
            let (_, window) = self.beside.swap_remove(at);
            if matches!(window, Window::AtLaunch(_)) {
                self.at_launch -= 1;
            }
            return Some(window);
        }
        (id & BESIDE == 0).then(|| Window::Open(self.profiler.token(id)))
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
        Ok(self.open(token))
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
        self.at_launch += 1;
        Ok(self.keep_beside(Window::AtLaunch(stream)))
    }

    /// The server is about to enqueue a kernel on `stream`: windows waiting
    /// for its next launch open here.
    pub fn launching(&mut self, stream: impl StreamOf<A>) {
        if self.at_launch == 0 {
            return;
        }
        // Not admitted: no window waits for it.
        let Ok(stream) = stream.stream() else {
            return;
        };
        for (_, window) in &mut self.beside {
            if matches!(window, Window::AtLaunch(s) if *s == stream) {
                *window = match self.profiler.try_start(stream) {
                    Ok(token) => Window::Open(token),
                    Err(err) => Window::Failed(server_error(&err)),
                };
                self.at_launch -= 1;
            }
        }
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
        if self.beside.is_empty() && token.id & BESIDE == 0 {
            // The usual case, a window open in the core under its key, as
            // `take` finds it, with no window of another kind moved.
            let open = self.profiler.token(token.id);
            return match stream.stream() {
                Ok(stream) => self.stop_open(stream, open),
                Err(err) => {
                    let _ = self.profiler.abandon(open);
                    Err(ProfileError::from(&err))
                }
            };
        }
        self.stop_beside(stream, token)
    }

    /// [`stop`](Self::stop) of a window that may be kept beside the core's.
    fn stop_beside(
        &mut self,
        stream: impl StreamOf<A>,
        token: ProfilingToken,
    ) -> Result<ProfileDuration, ProfileError> {
        let window = self.take(token.id).ok_or_else(not_registered)?;
        let stream = match stream.stream() {
            Ok(stream) => stream,
            Err(err) => {
                if let Window::Open(open) = window {
                    let _ = self.profiler.abandon(open);
                }
                return Err(ProfileError::from(&err));
            }
        };
        let open = match window {
            Window::Open(open) => open,
            Window::AtLaunch(_) => self
                .profiler
                .try_start(stream)
                .map_err(|err| profile_error(&err))?,
            Window::Failed(err) => return Err(ProfileError::from(&err)),
        };
        self.stop_open(stream, open)
    }

    /// Close `open`, a window open in the core, on `stream`.
    fn stop_open(
        &mut self,
        stream: A::Stream,
        open: ProfileToken,
    ) -> Result<ProfileDuration, ProfileError> {
        match self.profiler.stop(stream, open) {
            Ok(window) => Ok(profile_duration(window)),
            Err(device_events_core::ProfileError::Driver(err)) => Err(profile_error(&err)),
            Err(_) => Err(not_registered()),
        }
    }

    /// Drop the window `token` opened, unmeasured: no driver wait, and its
    /// events go back to the pool.
    pub fn abandon(&mut self, token: ProfilingToken) {
        if let Some(Window::Open(open)) = self.take(token.id) {
            // A spent or foreign token: nothing to abandon, and nothing to
            // report, as before.
            let _ = self.profiler.abandon(open);
        }
    }

    /// The server failed (a launch, a write): every open window reads as
    /// `error` at [`stop`](Self::stop) ([`ProfileError::Server`]), as CubeCL's
    /// servers report it. Logged once.
    pub fn failure(&mut self, error: &ServerError) {
        let mut failed = 0;
        for (_, window) in &mut self.beside {
            match std::mem::replace(window, Window::Failed(error.clone())) {
                // Opened at its launch: abandoned here, so that the core's
                // open windows below are only those with no id beside.
                Window::Open(open) => {
                    let _ = self.profiler.abandon(open);
                    failed += 1;
                }
                Window::AtLaunch(_) => failed += 1,
                // The latest failure stands, as in CubeCL's own profiler.
                Window::Failed(_) => {}
            }
        }
        self.at_launch = 0;
        // Every window open in the core, each kept beside as failed under
        // its id: the key for one that had no id beside.
        let open: Vec<ProfileToken> = self.profiler.open_tokens().collect();
        for token in open {
            let _ = self.profiler.abandon(token);
            if token.key() & BESIDE == 0 {
                self.beside
                    .push((token.key(), Window::Failed(error.clone())));
                failed += 1;
            }
        }
        if failed > 0 {
            log::warn!(
                "{}: {failed} profiling window(s) not measured: {error}",
                <A as device_events_core::EventApi>::BACKEND
            );
        }
    }

    /// Windows open now, waiting for a launch included.
    pub fn open_windows(&self) -> usize {
        let beside_only = self
            .beside
            .iter()
            .filter(|(_, window)| !matches!(window, Window::Open(_)))
            .count();
        self.profiler.open_windows() + beside_only
    }
}

impl<A: AnchorApi> std::fmt::Debug for CubeProfiler<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CubeProfiler")
            .field("profiler", &self.profiler)
            .field("beside", &self.beside.len())
            .finish_non_exhaustive()
    }
}
