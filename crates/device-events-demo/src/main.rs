//! The main job: a small, realistic pipeline on two non-blocking streams,
//! profiled step by step and stage by stage, with the host's own spans,
//! printed as a table and written as a Chrome trace and an SVG timeline.
//!
//! `cargo xtask demo` picks the device: the real CUDA driver, else the real
//! HIP runtime with a GPU, else an OpenCL platform's device (PoCL's CPU
//! device on a machine with nothing else), else the software driver.

mod device;
mod perfetto_out;
mod tracy_out;
mod truth;

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use device::Device;
use device_events_core::{EventFence, EventProfiler, OwnedStream, PlacedWindow};
use device_events_trace::{Trace, TrackId};
use std::time::Instant;

#[derive(Clone, Copy, ValueEnum)]
enum Backend {
    Cuda,
    Hip,
    Opencl,
}

#[derive(Parser)]
#[command(about = "A profiled two-stream pipeline")]
struct Args {
    /// Which backend to drive.
    #[arg(long, value_enum, default_value = "cuda")]
    backend: Backend,
    /// The backend's driver is the software driver (said on the first line).
    #[arg(long)]
    soft: bool,
    /// Where the trace and the timeline go.
    #[arg(long, default_value = "target/demo")]
    out: PathBuf,
    /// Pipeline iterations.
    #[arg(long, default_value_t = 8)]
    steps: usize,
    /// Only say in a line whether the demo can run on the backend here,
    /// and exit: 0 when it can, 1 when not (`cargo xtask demo` asks first).
    #[arg(long)]
    probe: bool,
    /// How many processes run the pipeline, each writing its Perfetto
    /// file, merged by `perfetto_manifest.json` in `--out`.
    #[arg(long, default_value_t = 1)]
    processes: usize,
    /// Which of the processes this is (set for the others it starts).
    #[arg(long, default_value_t = 0, hide = true)]
    process_index: usize,
    /// For checks of a merge across machines: process i plays machine i of
    /// this comma-separated list, `OFFSET_NS:ERROR_NS` (a synchronised
    /// clock whose REALTIME is OFFSET_NS off this host's, stating ERROR_NS)
    /// or `OFFSET_NS:unsynchronised`.
    #[arg(long, hide = true)]
    simulated_machines: Option<String>,
    /// Stream every window to Tracy as a GPU zone, a context per stream
    /// (built with the `tracy` feature: Tracy 0.11, protocol 66).
    #[arg(long)]
    tracy: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.probe {
        let found = match args.backend {
            Backend::Cuda => device_events_cuda::Cuda::open(),
            Backend::Hip => device_events_hip::Hip::open(),
            Backend::Opencl => device_events_opencl::OpenCl::open(),
        };
        return match found {
            Ok(name) => {
                println!("{name}");
                ExitCode::SUCCESS
            }
            Err(why) => {
                println!("no device the demo can use: {why}");
                ExitCode::FAILURE
            }
        };
    }
    let others = match perfetto_out::spawn_others(args.processes) {
        Ok(others) => others,
        Err(err) => {
            eprintln!("demo: {err}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = match args.backend {
        Backend::Cuda => run::<device_events_cuda::Cuda>(&args),
        Backend::Hip => run::<device_events_hip::Hip>(&args),
        Backend::Opencl => run::<device_events_opencl::OpenCl>(&args),
    };
    let outcome = outcome.and_then(|()| {
        if args.processes > 1 {
            let manifest = perfetto_out::finish_all(&args.out, args.processes, others)?;
            println!(
                "wrote {} merging {} processes' files",
                manifest.display(),
                args.processes
            );
        }
        Ok(())
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("demo: {err}");
            ExitCode::FAILURE
        }
    }
}

/// A closed window, for the table and the trace: read with its stated
/// bound, the library's promise for that window; on the software driver,
/// the events its ends were recorded with, and when the device truly
/// reached them.
struct Row<D: Device> {
    label: &'static str,
    track: TrackId,
    window: PlacedWindow<D>,
    zone: Option<tracy_out::Zone>,
    events: (usize, usize),
    truth: Option<(u64, u64)>,
}

fn run<D: Device>(args: &Args) -> Result<(), Box<dyn Error>> {
    let name = D::open()?;
    let device = if args.soft {
        format!(
            "software driver, no GPU found (through the {} backend)",
            D::BACKEND
        )
    } else {
        format!("{name} ({})", D::BACKEND)
    };
    println!("device: {device}");
    // Owned: destroyed on every path, an early `?` included.
    let (owned_a, owned_b) = (OwnedStream::<D>::new()?, OwnedStream::<D>::new()?);
    let (a, b) = (owned_a.get(), owned_b.get());
    let buffer = D::buffer(64 << 20)?;
    let mut trace = Trace::new();
    let host = trace.host_track("host: main thread");
    let steps = trace.device_track("pipeline steps");
    let (track_a, track_b) = (
        trace.device_track("stream A"),
        trace.device_track("stream B"),
    );
    let machine = perfetto_out::simulated(args.simulated_machines.as_deref(), args.process_index)?;
    let mut perfetto = perfetto_out::Mirror::open(&args.out, args.process_index, &device, machine)?;
    let truth = truth::Truth::open(args.soft);
    // The event the last `start` or `stop` recorded, where truth is known.
    let recorded = || truth.as_ref().map_or(0, truth::Truth::last_recorded);
    perfetto.host(host, "main thread");
    let mut zones = tracy_out::Zones::open(args.tracy)?;
    for (track, name) in [
        (steps, "pipeline steps"),
        (track_a, "stream A"),
        (track_b, "stream B"),
    ] {
        perfetto.stream(track, name);
        zones.stream(track, name);
    }
    let mut profiler = EventProfiler::<D>::new();
    let mut rows = Vec::new();

    for _ in 0..args.steps {
        let enqueue = Instant::now();
        let step = profiler.start(a);
        let step_start = recorded();
        let load = profiler.start(a);
        let load_start = recorded();
        D::work(a, &buffer, 16 << 20)?;
        let load = profiler.stop(a, load)?;
        let load_end = recorded();
        let produce = profiler.start(a);
        let produce_start = recorded();
        D::work(a, &buffer, 32 << 20)?;
        let produce = profiler.stop(a, produce)?;
        let produce_end = recorded();
        let handoff = EventFence::<D>::new(a);
        handoff.wait_async(b)?;
        let consume = profiler.start(b);
        let consume_start = recorded();
        D::work(b, &buffer, 24 << 20)?;
        let consume = profiler.stop(b, consume)?;
        let consume_end = recorded();
        let step = profiler.stop(b, step)?;
        let step_end = recorded();
        let now = Instant::now();
        trace.host_span(host, "enqueue", enqueue, now);
        perfetto.host_span(host, "enqueue", enqueue, now);
        // Each stream's zones reserved in its order: its windows' closes.
        let row = |label, track, window, events| Row {
            label,
            track,
            window,
            zone: zones.zone(track, label),
            events,
            truth: None,
        };
        let first = rows.len();
        rows.extend([
            row("step", steps, step, (step_start, step_end)),
            row("load", track_a, load, (load_start, load_end)),
            row("produce", track_a, produce, (produce_start, produce_end)),
            row("consume", track_b, consume, (consume_start, consume_end)),
        ]);
        let wait = Instant::now();
        EventFence::<D>::new(b).wait_sync()?;
        let now = Instant::now();
        trace.host_span(host, "wait", wait, now);
        perfetto.host_span(host, "wait", wait, now);
        // Every event of the step reached, none yet handed back for reuse:
        // their stamps are this step's.
        if let Some(truth) = &truth {
            for row in &mut rows[first..] {
                let (start, end) = row.events;
                row.truth = truth.event_ns(start).zip(truth.event_ns(end));
            }
        }
    }
    let pairing = truth.as_ref().and_then(truth::Truth::pairing);
    let mut true_windows = Vec::new();

    // Each window's bound: how far either end can be from where the device
    // was, on the host clock.
    println!(
        "{:<8} {:>14} {:>18} {:>12}",
        "window", "device (µs)", "start (µs)", "bound ± (µs)"
    );
    // Starts are shown from the first window's, on the host clock.
    let reference = Instant::now()
        .checked_sub(Duration::from_secs(3600))
        .unwrap_or_else(Instant::now);
    let mut first = None;
    for row in rows {
        let placed = pollster::block_on(row.window.resolve());
        if let Some(zone) = row.zone {
            zone.place(placed.as_ref());
        }
        let Some(placed) = placed else {
            println!("{:<8} {:>14}", row.label, "unreadable (logged)");
            continue;
        };
        let start = placed.start.saturating_duration_since(reference);
        let first = *first.get_or_insert(start);
        println!(
            "{:<8} {:>14.1} {:>18.1} {:>12.2}",
            row.label,
            placed.duration.as_secs_f64() * 1e6,
            start.saturating_sub(first).as_secs_f64() * 1e6,
            placed.uncertainty.as_secs_f64() * 1e6
        );
        trace.span(row.track, row.label, &placed);
        if perfetto.window(row.track, row.label, &placed) {
            let ends = pairing.as_ref().zip(row.truth);
            let ends =
                ends.map(|(pairing, (start, end))| (pairing.place(start), pairing.place(end)));
            true_windows.push((row.label, ends));
        }
    }
    // Known once the calibrator has taken an anchor: never a zero before.
    let anchor = profiler.anchor_uncertainty();
    if let Some(bound) = anchor {
        println!(
            "anchor ± {:.2} µs: the calibrated anchor's own bound; each window's adds \
             the clock rate's error over its distance from the anchor and the readings' \
             resolution",
            bound.as_secs_f64() * 1e6
        );
    }
    trace.set_title(match anchor {
        Some(bound) => format!(
            "device-events demo on {device}: anchor ± {:.2} µs",
            bound.as_secs_f64() * 1e6
        ),
        None => format!("device-events demo on {device}: no anchor taken"),
    });
    drop(profiler);
    drop((owned_a, owned_b));
    drop(buffer);

    if let Some(dropped) = zones.finish() {
        println!(
            "Tracy: every window streamed as a GPU zone, a context per stream ({dropped} dropped)"
        );
    }
    perfetto.finish(pairing.map(|pairing| pairing.width_ns), &true_windows)?;
    println!(
        "wrote {} (open in https://ui.perfetto.dev)",
        args.out
            .join(perfetto_out::file_name(args.process_index))
            .display()
    );
    if args.process_index > 0 {
        // The first process writes the Chrome file and the timeline.
        return Ok(());
    }
    std::fs::create_dir_all(&args.out)?;
    let json = args.out.join("trace.json");
    trace.write_chrome_json(std::io::BufWriter::new(std::fs::File::create(&json)?))?;
    let svg = args.out.join("timeline.svg");
    std::fs::write(&svg, trace.to_svg())?;
    println!(
        "wrote {} (open in Perfetto or chrome://tracing) and {}",
        json.display(),
        svg.display()
    );
    Ok(())
}
