//! The host's `CLOCK_MONOTONIC`, which a driver's calibrated timestamps
//! name, as an [`Instant`](std::time::Instant).

use device_events_core::backend::HostStamp;

fn monotonic_ns() -> i128 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is writable, and the clock exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut t) };
    i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec)
}

/// Where `CLOCK_MONOTONIC`'s `ns` lies as an [`Instant`], and how far off
/// that can be; `None` outside `Instant`'s range.
pub(crate) fn instant_of(ns: u64) -> Option<HostStamp> {
    HostStamp::on_clock(i128::from(ns), monotonic_ns)
}
