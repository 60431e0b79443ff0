//! The host's `CLOCK_MONOTONIC`, which a driver's calibrated timestamps
//! name, as an [`Instant`].

use std::time::{Duration, Instant};

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
/// that can be: paired through the tightest of three clock reads between
/// two `Instant` reads.
pub(crate) fn instant_of(ns: u64) -> (Instant, Duration) {
    let (now_ns, now, half_width) = (0..3)
        .map(|_| {
            let before = Instant::now();
            let ns = monotonic_ns();
            let width = before.elapsed();
            (width, ns, before + width / 2)
        })
        .min_by_key(|(width, _, _)| *width)
        .map_or_else(
            || (monotonic_ns(), Instant::now(), Duration::ZERO),
            |(width, ns, at)| (ns, at, width / 2),
        );
    let ago = now_ns - i128::from(ns);
    let by = Duration::from_nanos(u64::try_from(ago.unsigned_abs()).unwrap_or(u64::MAX));
    let at = if ago >= 0 {
        now.checked_sub(by)
    } else {
        now.checked_add(by)
    };
    // The pairing's half-width, and 1 ns for the rounding of its middle.
    (at.unwrap_or(now), half_width + Duration::from_nanos(1))
}
