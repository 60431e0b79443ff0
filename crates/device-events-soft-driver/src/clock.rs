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
/// `SOFT_DRIVER_LAUNCH_LATENCY`: how long an operation takes to reach the
/// device after the call that queues it, as four numbers separated by
/// commas: the least latency in ns, a uniform jitter above it in ns, and
/// the percentage of operations that take a tail of up to the last number
/// of ns more. Default `2000,3000,1,40000`: 2–5 µs, one in a hundred up to
/// 40 µs later (a real OpenCL runtime on a 2-core machine took ~0.5 µs once
/// warm and ~32 µs for its first marker; GPU launch latencies are a few µs).
pub const LAUNCH_VAR: &str = "SOFT_DRIVER_LAUNCH_LATENCY";

/// `SOFT_DRIVER_HIP_VERSION`: the version the HIP ABI reports
/// (`hipRuntimeGetVersion`, `hipDriverGetVersion`), as major × 10⁷ +
/// minor × 10⁵ + patch (default 60850000: ROCm 6.8.5), so a test can play
/// an older runtime.
pub const HIP_VERSION_VAR: &str = "SOFT_DRIVER_HIP_VERSION";

/// The version [`HIP_VERSION_VAR`] asks for.
pub(crate) fn hip_version() -> i32 {
    env(HIP_VERSION_VAR).unwrap_or(60_850_000)
}

/// `CUDA_DEVICE_MAX_CONNECTIONS`: the hardware queues a device's streams
/// share, as NVIDIA's driver reads it at initialization (default 0 here:
/// one per stream; a real device has 8).
pub const CONNECTIONS_VAR: &str = "CUDA_DEVICE_MAX_CONNECTIONS";

/// The hardware queues per device [`CONNECTIONS_VAR`] asks for, 0 for one
/// per stream.
pub(crate) fn max_connections() -> usize {
    env(CONNECTIONS_VAR).unwrap_or(0)
}

static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

struct Settings {
    offset_ns: AtomicI64,
    /// Drift in parts per trillion, to keep it an integer.
    drift_ppt: AtomicI64,
    bytes_per_second: AtomicU64,
    launch: [AtomicU64; 4],
}

/// The default launch latency: see [`LAUNCH_VAR`].
const LAUNCH_DEFAULT: [u64; 4] = [2000, 3000, 1, 40_000];

fn launch_from_env() -> [u64; 4] {
    let Ok(text) = std::env::var(LAUNCH_VAR) else {
        return LAUNCH_DEFAULT;
    };
    let parts: Vec<u64> = text
        .split(',')
        .filter_map(|p| p.trim().parse().ok())
        .collect();
    <[u64; 4]>::try_from(parts).unwrap_or(LAUNCH_DEFAULT)
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
        launch: launch_from_env().map(AtomicU64::new),
    }
});

/// A launch latency in ns, drawn from the configured distribution.
pub(crate) fn launch_latency() -> u64 {
    let [least, jitter, tail_percent, tail] = SETTINGS
        .launch
        .each_ref()
        .map(|v| v.load(Ordering::Relaxed));
    let mut latency = least.saturating_add(fastrand::u64(0..=jitter));
    if tail_percent > 0 && fastrand::u64(0..100) < tail_percent {
        latency = latency.saturating_add(fastrand::u64(0..=tail));
    }
    latency
}

static BLOCKING_WAKE_NS: AtomicU64 = AtomicU64::new(30_000);

/// How late a blocking-synchronization wait wakes after its event is
/// reached, in ns (default 30 µs: a thread woken from sleep).
pub(crate) fn blocking_wake_latency() -> u64 {
    BLOCKING_WAKE_NS.load(Ordering::Relaxed)
}

pub(crate) fn set_blocking_wake_latency(ns: u64) {
    BLOCKING_WAKE_NS.store(ns, Ordering::Relaxed);
}

pub(crate) fn set_launch_latency(least_ns: u64, jitter_ns: u64, tail_percent: u64, tail_ns: u64) {
    for (slot, value) in
        SETTINGS
            .launch
            .iter()
            .zip([least_ns, jitter_ns, tail_percent.min(100), tail_ns])
    {
        slot.store(value, Ordering::Relaxed);
    }
}

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

/// Whether devices offer stream memory operations (`cuStreamWaitValue32`,
/// `hipStreamWaitValue32`): on, as CUDA 11.7 and later drivers have them by
/// default; switched off to test a backend's fallback.
static STREAM_MEM_OPS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

pub(crate) fn stream_mem_ops() -> bool {
    STREAM_MEM_OPS.load(Ordering::Relaxed)
}

pub(crate) fn set_stream_mem_ops(on: bool) {
    STREAM_MEM_OPS.store(on, Ordering::Relaxed);
}

/// How long a stream takes, after the value it waits on is written, to see
/// it and go on: a GPU polling host memory over the bus, ~1 µs.
static WAIT_VALUE_NS: AtomicU64 = AtomicU64::new(1_000);

pub(crate) fn wait_value_latency() -> u64 {
    WAIT_VALUE_NS.load(Ordering::Relaxed)
}

pub(crate) fn set_wait_value_latency(ns: u64) {
    WAIT_VALUE_NS.store(ns, Ordering::Relaxed);
}

/// How long clr's `hipEventDestroy` and `hipStreamWaitEvent` take between
/// checking the stream of an event's last record (`hip::isValid`) and using
/// it, with no lock held: 0 (the default) models no gap; a test widens it
/// to catch a destroy that lands in between.
static CHECK_TO_USE_NS: AtomicU64 = AtomicU64::new(0);

pub(crate) fn check_to_use_ns() -> u64 {
    CHECK_TO_USE_NS.load(Ordering::Relaxed)
}

pub(crate) fn set_check_to_use_ns(ns: u64) {
    CHECK_TO_USE_NS.store(ns, Ordering::Relaxed);
}

/// How many calls have entered that gap, so a test knows a call is past
/// its check.
static IN_GAP: AtomicU64 = AtomicU64::new(0);

pub(crate) fn entered_gap() {
    IN_GAP.fetch_add(1, Ordering::SeqCst);
}

pub(crate) fn gaps_entered() -> u64 {
    IN_GAP.load(Ordering::SeqCst)
}
