//! What a process does around the library's threads: before a context is
//! torn down by hand, around a `fork`, and at its exit. The CUDA, HIP and
//! OpenCL backends call [`stop_driver_calls`] from an exit handler of their
//! own.

mod fork;

pub use crate::anchoring::calibrator::wait_for_calibrations;
pub use crate::backend::checked::release_idle_events;
#[cfg(feature = "sim")]
pub use crate::threads::refuse_thread_starts;
pub use crate::threads::stop_driver_calls;
#[cfg(feature = "sim")]
pub use crate::waiting::resolver::resolver_running;
pub use fork::{after_fork_in_child, after_fork_in_parent, before_fork};

/// Whether any of the library's threads is up in this process: a few
/// seconds after the last profiler is dropped and its work is done,
/// none is.
///
/// ```
/// // No profiler yet, so no thread.
/// assert!(!device_events_core::process::library_threads_running());
/// ```
pub fn library_threads_running() -> bool {
    crate::anchoring::calibrator::running() || crate::waiting::resolver::resolver_running()
}
