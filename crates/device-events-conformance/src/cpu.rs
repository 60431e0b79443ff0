//! What a wait costs the waiting thread.

use std::time::Duration;

/// CPU time (user and system) the calling thread has used.
pub fn thread_cpu() -> Duration {
    cpu(libc::RUSAGE_THREAD)
}

/// CPU time (user and system) every thread of the process has used.
pub fn process_cpu() -> Duration {
    cpu(libc::RUSAGE_SELF)
}

fn cpu(who: libc::c_int) -> Duration {
    // SAFETY: `usage` is writable; `who` is RUSAGE_THREAD or RUSAGE_SELF.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(who, &mut usage);
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.unsigned_abs())
            + Duration::from_micros(t.tv_usec.unsigned_abs())
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}
