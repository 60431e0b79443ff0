//! A two-stream pipeline on the simulated device: stream A produces, a fence
//! makes stream B wait, B consumes; each step and stage is a profiled window.
//!
//! Run with `cargo run -p device-events-core --features sim --example pipeline`.

use std::time::Duration;

use device_events_core::sim::Sim;
use device_events_core::{AnchorConfig, EventApi, EventFence, EventProfiler, ProfilerConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("device: simulated device (no GPU, no driver)");
    let (a, b) = (
        Sim::stream_create_non_blocking()?,
        Sim::stream_create_non_blocking()?,
    );
    let mut profiler = EventProfiler::<Sim>::with_config(ProfilerConfig {
        anchor: AnchorConfig {
            host_clock: Sim::host_now,
            ..AnchorConfig::default()
        },
        ..ProfilerConfig::default()
    });
    let mut windows = Vec::new();
    for step in 0..3u64 {
        let whole = profiler.start(a);
        let produce = profiler.start(a);
        Sim::enqueue_work(a, Duration::from_micros(400 + 100 * step));
        let produce = profiler.stop(a, produce)?;
        let fence = EventFence::<Sim>::new(a);
        fence.wait_async(b)?;
        let consume = profiler.start(b);
        Sim::enqueue_work(b, Duration::from_micros(300));
        let consume = profiler.stop(b, consume)?;
        let whole = profiler.stop(a, whole)?;
        windows.extend([("step", whole), ("produce", produce), ("consume", consume)]);
        fence.wait_sync()?;
    }
    println!(
        "{:<10} {:>14} {:>16}",
        "window", "device (us)", "start (us)"
    );
    let mut epoch = None;
    for (label, timing) in windows {
        let Some(ticks) = pollster::block_on(timing.resolve()) else {
            println!("{label:<10} {:>14} {:>16}", "unreadable", "-");
            continue;
        };
        let first = *epoch.get_or_insert_with(|| Sim::host_now() - Duration::from_secs(1));
        let start = ticks.start.saturating_duration_since(first);
        println!(
            "{label:<10} {:>14.1} {:>16.1}",
            ticks.duration.as_secs_f64() * 1e6,
            start.as_secs_f64() * 1e6
        );
    }
    drop(profiler);
    Sim::stream_destroy(a)?;
    Sim::stream_destroy(b)?;
    Ok(())
}
