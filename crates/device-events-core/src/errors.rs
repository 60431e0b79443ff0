//! Why a profiler refused a token.

use crate::driver::DriverError;

/// Why [`EventProfiler::stop`](crate::EventProfiler::stop) or
/// [`EventProfiler::abandon`](crate::EventProfiler::abandon) refused a token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// The token came from another profiler.
    #[error("profiling token belongs to another profiler")]
    ForeignToken,
    /// The token's window was already stopped or abandoned.
    #[error("profiling token was already stopped or abandoned")]
    StaleToken,
    /// A driver call of the window failed, or the window was marked failed
    /// after a device fault.
    #[error("profiling window failed: {0}")]
    Driver(#[from] DriverError),
}
