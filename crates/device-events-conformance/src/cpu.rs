//! What a wait costs the waiting thread.

use std::time::Duration;

/// CPU time (user and system) the calling thread has used.
pub fn thread_cpu() -> Duration {
    // SAFETY: `usage` is writable; RUSAGE_THREAD reads the calling thread.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.unsigned_abs())
            + Duration::from_micros(t.tv_usec.unsigned_abs())
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}
