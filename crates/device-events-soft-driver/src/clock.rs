//! The device clock and the device's speed, configured from the environment
//! or, in tests, through the control API.
//!
//! The device clock is the host's monotonic clock plus an offset, running at
//! a drift in parts per million, so that placing device time on the host
//! clock can be checked against the truth.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

/// `SOFT_DRIVER_BANDWIDTH_GBPS`: memset speed in GB/s (default 10).
pub const BANDWIDTH_VAR: &str = "SOFT_DRIVER_BANDWIDTH_GBPS";
/// `SOFT_DRIVER_CLOCK_OFFSET_NS`: device clock minus host clock, in ns at the
/// start (default 10^12: about 17 minutes, so a mix-up of the clocks shows).
pub const OFFSET_VAR: &str = "SOFT_DRIVER_CLOCK_OFFSET_NS";
/// `SOFT_DRIVER_DRIFT_PPM`: how much faster the device clock runs, in parts
/// per million (default 0).
pub const DRIFT_VAR: &str = "SOFT_DRIVER_DRIFT_PPM";
/// `SOFT_DRIVER_DEVICES`: how many devices the driver reports (default 2).
pub const DEVICES_VAR: &str = "SOFT_DRIVER_DEVICES";

static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

struct Settings {
    offset_ns: AtomicI64,
    /// Drift in parts per trillion, to keep it an integer.
    drift_ppt: AtomicI64,
    bytes_per_second: AtomicU64,
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok()?.trim().parse().ok()
}

static SETTINGS: LazyLock<Settings> = LazyLock::new(|| {
    let gbps: f64 = env(BANDWIDTH_VAR)
        .filter(|v: &f64| *v > 0.0)
        .unwrap_or(10.0);
    let drift_ppm: f64 = env(DRIFT_VAR).unwrap_or(0.0);
    Settings {
        offset_ns: AtomicI64::new(env(OFFSET_VAR).unwrap_or(1_000_000_000_000)),
        drift_ppt: AtomicI64::new(ppm_to_ppt(drift_ppm)),
        bytes_per_second: AtomicU64::new(to_u64(gbps * 1e9)),
    }
});

#[allow(clippy::cast_possible_truncation)]
fn ppm_to_ppt(ppm: f64) -> i64 {
    (ppm * 1e6).round() as i64
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn to_u64(value: f64) -> u64 {
    value.max(1.0) as u64
}

/// Devices the driver reports: read once, since tables are sized by it and
/// a count that grew later would index past them.
pub(crate) fn devices() -> usize {
    static DEVICES: std::sync::LazyLock<usize> =
        std::sync::LazyLock::new(|| env(DEVICES_VAR).unwrap_or(2));
    *DEVICES
}

/// Host-clock nanoseconds since the driver loaded.
pub(crate) fn host_now_ns() -> u64 {
    u64::try_from(BASE.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The device clock at host time `host_ns`.
pub(crate) fn device_at(host_ns: u64) -> i128 {
    let settings = &*SETTINGS;
    let drift = i128::from(settings.drift_ppt.load(Ordering::Relaxed));
    let host = i128::from(host_ns);
    host + host * drift / 1_000_000_000_000 + i128::from(settings.offset_ns.load(Ordering::Relaxed))
}

/// Nanoseconds a memset of `bytes` occupies its stream.
pub(crate) fn transfer_time(bytes: usize) -> u64 {
    let rate = SETTINGS.bytes_per_second.load(Ordering::Relaxed).max(1);
    let nanos = (bytes as u128 * 1_000_000_000) / u128::from(rate);
    u64::try_from(nanos).unwrap_or(u64::MAX)
}

pub(crate) fn set_clock(offset_ns: i64, drift_ppm: f64) {
    SETTINGS.offset_ns.store(offset_ns, Ordering::Relaxed);
    SETTINGS
        .drift_ppt
        .store(ppm_to_ppt(drift_ppm), Ordering::Relaxed);
}

pub(crate) fn set_bandwidth(bytes_per_second: f64) {
    SETTINGS
        .bytes_per_second
        .store(to_u64(bytes_per_second), Ordering::Relaxed);
}
