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
