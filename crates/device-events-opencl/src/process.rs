//! What the process does around the library's threads, as the CUDA and HIP
//! backends do: at its exit, the threads leave the runtime before its own
//! exit handlers tear it down; around a `fork`, no library thread holds one
//! of the library's locks, and the child forgets the parent's work.

use std::sync::Once;

/// At the process's exit: the library's threads leave the runtime before
/// its teardown. Each leaves within its longest sleep between asks (the
/// core's `src/tunables.rs`) of the stop; the bound covers a thread the
/// system is slow to schedule.
extern "C" fn stop_driver_calls_at_exit() {
    let _ = device_events_core::process::stop_driver_calls(std::time::Duration::from_secs(1));
}

/// Around `fork`: no library thread holds one of the library's locks as the
/// process forks (see `device_events_core::process::before_fork`).
extern "C" fn before_fork() {
    device_events_core::process::before_fork();
}

extern "C" fn after_fork_in_parent() {
    device_events_core::process::after_fork_in_parent();
}

extern "C" fn after_fork_in_child() {
    device_events_core::process::after_fork_in_child();
}

/// Register the exit and fork handlers, once per process: called once the
/// runtime has made a context, so after the ICD loader and the platform
/// (PoCL) registered their own exit handlers, and the exit handler runs
/// before theirs (the last registered runs first).
pub(crate) fn register_handlers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a function of no arguments that does not
        // unwind.
        unsafe { libc::atexit(stop_driver_calls_at_exit) };
        // SAFETY: registers three functions of no arguments that do not
        // unwind. They take and give back the library's locks and, in the
        // child, reset its counters and drop the parent's queued work: that
        // allocates and frees, which POSIX does not list as
        // async-signal-safe after a fork; glibc's fork resets its
        // allocator's locks in the child, which makes it sound there.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_in_parent),
                Some(after_fork_in_child),
            )
        };
    });
}
