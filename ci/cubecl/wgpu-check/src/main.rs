//! CubeCL kernels through cubecl-wgpu on lavapipe, each window's placed
//! start and end against the truth. lavapipe's timestamps are the host's
//! `CLOCK_MONOTONIC` in nanoseconds, and on Linux an `Instant` is that
//! clock's reading, so a stamp's host time is exact.
//!
//! Patched (device-events places the windows), the backend logs each
//! window's raw ticks at trace level (target `device_events`): each end is
//! checked against them and its stated bound. Unpatched, nothing says
//! where the device was; each window is held against the host interval
//! that must contain it (from before its launch to after its reading).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use cubecl_core as cubecl;
use cubecl::prelude::*;
use cubecl_runtime::runtime::Runtime;
use cubecl_wgpu::{AutoCompiler, WgpuDevice};

/// CubeCL's wgpu runtime, with its default compiler.
type WgpuRuntime = cubecl_wgpu::WgpuRuntime<AutoCompiler>;

#[cube(launch_unchecked)]
fn spin(out: &mut [f32]) {
    let mut acc = 0.0f32;
    for i in 0..4000u32 {
        acc += f32::cast_from(i) * 0.5;
    }
    out[ABSOLUTE_POS] = acc;
}

/// The raw ticks and bound of each window the patched backend placed.
static TICKS: Mutex<Vec<(u64, u64, u64)>> = Mutex::new(Vec::new());

struct Ticks;

impl log::Log for Ticks {
    fn enabled(&self, meta: &log::Metadata) -> bool {
        meta.target() == "device_events" || meta.level() <= log::Level::Warn
    }
    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let text = record.args().to_string();
        if record.target() != "device_events" {
            eprintln!("{}: {text}", record.level());
            return;
        }
        let numbers: Vec<u64> = text
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect();
        if let [start, end, bound] = numbers[..] {
            TICKS.lock().unwrap_or_else(|e| e.into_inner()).push((start, end, bound));
        }
    }
    fn flush(&self) {}
}

/// `instant`'s `CLOCK_MONOTONIC` reading in ns, exactly: its `Debug`
/// shows the `timespec`.
fn monotonic_ns(instant: Instant) -> i128 {
    let text = format!("{instant:?}");
    let field = |name: &str| -> i128 {
        let at = text.find(name).map(|i| i + name.len()).unwrap_or(0);
        text[at..]
            .trim_start_matches([':', ' '])
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|d| d.parse().ok())
            .unwrap_or(0)
    };
    field("tv_sec") * 1_000_000_000 + field("tv_nsec")
}

/// Median, p99 and worst of `ns`, in µs.
fn quantiles(mut ns: Vec<u128>) -> [f64; 3] {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
    [at(0.5), at(0.99), at(1.0)]
}

fn words([median, p99, worst]: [f64; 3]) -> String {
    format!("median {median:.2} µs, p99 {p99:.2} µs, worst {worst:.2} µs")
}

fn main() {
    let _ = log::set_logger(&Ticks).map(|()| log::set_max_level(log::LevelFilter::Trace));
    let windows: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(200);
    let client = <WgpuRuntime as Runtime>::client(&WgpuDevice::default());
    let out = client.empty(64 * 4);
    // Far enough back that every placed instant lies after it.
    let epoch = Instant::now()
        .checked_sub(Duration::from_secs(60))
        .unwrap_or_else(Instant::now);
    let mut placed = Vec::new();
    for _ in 0..windows {
        let before = Instant::now();
        let (_, reading) = client
            .profile(
                || {
                    // SAFETY: `out` holds 64 f32s, one per unit of the cube.
                    unsafe {
                        spin::launch_unchecked(
                            &client,
                            CubeCount::Static(1, 1, 1),
                            CubeDim::new_1d(64),
                            BufferArg::from_raw_parts(out.clone(), 64),
                        )
                    }
                },
                "spin",
            )
            .expect("a profile");
        let ticks = pollster::block_on(reading.resolve());
        let after = Instant::now();
        if let Some(ticks) = ticks {
            let start = epoch + ticks.start_duration_since(epoch);
            let end = epoch + ticks.end_duration_since(epoch);
            placed.push((before, after, start, end));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    println!("wgpu-check: {} of {windows} windows read", placed.len());
    let raw = TICKS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if raw.len() == placed.len() && !raw.is_empty() {
        // Patched: each end against its exact truth and its bound.
        let (mut errors, mut outside) = (Vec::new(), 0);
        for ((_, _, start, end), (raw_start, raw_end, bound)) in placed.iter().zip(&raw) {
            for (at, ticks) in [(start, raw_start), (end, raw_end)] {
                let error = (monotonic_ns(*at) - *ticks as i128).unsigned_abs();
                outside += usize::from(error > u128::from(*bound));
                errors.push(error);
            }
        }
        let [median, p99, worst] = quantiles(errors);
        println!(
            "wgpu-check: patched, placed by device-events: error against lavapipe's exact clock {}; {outside} ends outside their stated bound",
            words([median, p99, worst])
        );
        println!(
            "{{\"patched\":true,\"windows\":{},\"median_us\":{median},\"p99_us\":{p99},\"worst_us\":{worst},\"outside_bound\":{outside}}}",
            placed.len()
        );
        if outside > 0 {
            std::process::exit(1);
        }
    } else {
        // Unpatched: how far each start lies outside the interval that
        // holds its truth.
        let off: Vec<u128> = placed
            .iter()
            .map(|(before, after, start, _)| {
                if start < before {
                    before.duration_since(*start).as_nanos()
                } else {
                    start.saturating_duration_since(*after).as_nanos()
                }
            })
            .collect();
        let [median, p99, worst] = quantiles(off);
        println!(
            "wgpu-check: unpatched: each window's start lies at least this far outside the host interval holding its truth: {}",
            words([median, p99, worst])
        );
        println!(
            "{{\"patched\":false,\"windows\":{},\"median_us\":{median},\"p99_us\":{p99},\"worst_us\":{worst}}}",
            placed.len()
        );
    }
}
