//! The handle of an open window.

/// A window opened by [`EventProfiler::start`](crate::EventProfiler::start); single-use.
///
/// `Copy` so that a caller's bookkeeping can hold it freely; a second use is
/// refused with [`ProfileError::StaleToken`](crate::ProfileError::StaleToken) rather than trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProfileToken {
    pub(crate) profiler: u64,
    pub(crate) key: crate::arena::Key,
}

impl ProfileToken {
    /// The window's key within its profiler, as one word, for a caller
    /// whose own handle is a word (CubeCL's `ProfilingToken`): its
    /// profiler turns it back into the token
    /// ([`EventProfiler::token`](crate::EventProfiler::token)), so the
    /// caller keeps no map of its own from one to the other.
    ///
    /// ```
    /// use device_events_core::{EventProfiler, OwnedStream, sim::Sim};
    ///
    /// let stream = OwnedStream::<Sim>::new()?;
    /// let mut profiler = EventProfiler::<Sim>::new();
    /// let key = profiler.start(stream.get()).key();
    /// let window = profiler.stop(stream.get(), profiler.token(key))?;
    /// assert!(pollster::block_on(window).is_some());
    /// // Spent: the same key is refused from now on.
    /// assert!(profiler.stop(stream.get(), profiler.token(key)).is_err());
    /// # drop(profiler);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key(self) -> u64 {
        self.key.to_bits()
    }
}
