//! The counting side of `cargo xtask bench`: allocations (a counting global
//! allocator), driver calls (the software driver's counter), a region for
//! callgrind to count instructions in, memory per window in flight, and the
//! placement error over a drifting session. Prints JSON.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use clap::{Parser, Subcommand};
use device_events_bench::{
    CudaPair, Null, NullStream, Pending, fence, pooled_fence, resolve, steady, window,
};
use device_events_conformance::soft::SoftDriver;
use device_events_core::{EventApi, EventProfiler, FencePool};
use device_events_cuda::Cuda;
use serde_json::json;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is passed to the system allocator unchanged; the
// counters are only statistics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's arguments.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Heap allocations per operation on the null backend, in steady state.
    Allocations,
    /// Run one case `n` times inside `probe_region`, for callgrind.
    Instructions { case: String, n: u64 },
    /// Driver calls per operation on the software driver, ours and cudarc's.
    Calls,
    /// Wall time against cudarc, A/B interleaved.
    Wall { rounds: usize, batch: usize },
    /// Heap bytes per window in flight, on the null backend.
    Memory,
    /// Placement error against the software driver's truth over a session
    /// with the clock offset and drifting 100 ppm, every placement setting
    /// taking turns; `blocking` waits sleep instead of spinning.
    Placement {
        seconds: u64,
        #[arg(long)]
        blocking: bool,
    },
    /// Placement against PoCL's marker times, drift correction on and off,
    /// `seconds` each.
    PlacementOpencl { seconds: u64 },
    /// Placement of a runtime's own Vulkan timestamps on lavapipe against
    /// its exact clock: bracket, gated, calibrated; `--skewed` moves the
    /// clock by 123 s and runs it 100 ppm fast. `seconds` each.
    PlacementVulkan {
        seconds: u64,
        #[arg(long)]
        skewed: bool,
    },
    /// How late windows are answered with another pending ahead of them,
    /// and the CPU the process spends while a thousand pend.
    Answer,
    /// A server timing every kernel: the library's CPU and each window's
    /// answer, on the simulated backend. With `--windows`, one case alone
    /// (for callgrind, which counts the resolver thread's instructions).
    EveryKernel {
        /// Windows in the one case.
        #[arg(long)]
        windows: Option<usize>,
        /// Its streams, of one device.
        #[arg(long, default_value_t = 1)]
        streams: usize,
        /// Each kernel's length, µs.
        #[arg(long, default_value_t = 50)]
        kernel_us: u64,
    },
    /// What a GPU lease measures around the spin kernel, section by
    /// section: a table, and each section as JSON in `json` the moment it
    /// ends (its error or panic in words where it fails).
    GpuDay {
        #[arg(long)]
        json: std::path::PathBuf,
        /// The sections to run, in order; all when none is named.
        #[arg(long = "section", value_enum)]
        sections: Vec<DaySection>,
    },
    /// The driver, the device and the spin kernel, in a line, and as JSON
    /// in `json`; exit status 2 without a device.
    Preflight {
        #[arg(long)]
        json: std::path::PathBuf,
    },
    /// The gate on one hardware queue (run with
    /// `CUDA_DEVICE_MAX_CONNECTIONS=1`), likewise.
    GpuGate {
        #[arg(long)]
        json: std::path::PathBuf,
    },
    /// CPU time and wake-up lateness of a 100 ms fence wait: spinning and
    /// blocking on the software driver, and on PoCL.
    WaitCost,
    /// Device 1's windows read right after `stop` while device 0 hangs
    /// behind a 2 s kernel with a calibration pending.
    HungDevice { windows: usize },
    /// CubeCL's own profiler and fence (`cubecl-server`) beside ours on
    /// the software driver: reading a window that is not done, and each
    /// side's placement error over `windows` windows.
    CubeclSide { windows: usize },
    /// What the anchor's closed gate costs a user's kernels on the
    /// hardware queue its stream shares, over `calibrations`.
    Gate { calibrations: usize },
    /// `start()` behind a long kernel on a shared hardware queue, and
    /// GLOBAL-mode captures beside threads that profile, both ABIs.
    ServerWay {
        /// Captures per ABI.
        captures: usize,
        /// Threads profiling meanwhile.
        threads: usize,
    },
}

/// What a case runs on.
#[allow(clippy::large_enum_variant)] // one per process run
enum Subject {
    Null(EventProfiler<Null>, FencePool<Null>),
    Cuda(Box<CudaPair>, Pending),
}

/// One operation of a case.
type Op = fn(&mut Subject);

/// The operation `case` names, looked up once: every case then costs the
/// harness the same indirect call, which `null-nothing` measures.
fn op(case: &str) -> Op {
    match case {
        "null-nothing" => |_| {},
        "null-fence" => |_| fence::<Null>(NullStream),
        "null-pooled-fence" => |s| {
            if let Subject::Null(_, pool) = s {
                pooled_fence(pool, NullStream);
            }
        },
        "null-window" => |s| {
            if let Subject::Null(profiler, _) = s {
                window(profiler, NullStream);
            }
        },
        "cuda-fence-submit" => |s| cuda(s, |pair, _| pair.our_fence_submit()),
        "cuda-pooled-fence-submit" => |s| cuda(s, |pair, _| pair.our_pooled_fence_submit()),
        "cudarc-fence-submit" => |s| cuda(s, |pair, _| pair.cudarc_fence_submit()),
        "cuda-window-submit" => |s| cuda(s, CudaPair::our_window_submit),
        "cudarc-window-submit" => |s| cuda(s, |pair, pending| pair.cudarc_window_submit(pending)),
        "cuda-fence-complete" | "cuda-pooled-fence-complete" => {
            |s| cuda(s, |_, pending| CudaPair::our_fence_complete(pending))
        }
        "cudarc-fence-complete" => {
            |s| cuda(s, |_, pending| CudaPair::cudarc_fence_complete(pending))
        }
        "cuda-window-complete" => |s| cuda(s, |_, pending| CudaPair::our_window_complete(pending)),
        "cudarc-window-complete" => {
            |s| cuda(s, |_, pending| CudaPair::cudarc_window_complete(pending))
        }
        "cuda-chain-submit" => |s| cuda(s, CudaPair::our_chain_submit),
        "cubecl-server-fence-submit" => |s| cuda(s, |pair, _| pair.upstream_fence_submit()),
        "cubecl-ours-fence-submit" => |s| cuda(s, |pair, _| pair.cube_fence_submit()),
        "cubecl-server-window-submit" => |s| cuda(s, CudaPair::upstream_window_submit),
        "cubecl-ours-window-submit" => |s| cuda(s, CudaPair::cube_window_submit),
        "cudarc-chain-submit" => |s| cuda(s, |pair, pending| pair.cudarc_chain_submit(pending)),
        case => panic!("unknown case {case}"),
    }
}

/// What a completion case completes: the submit case that leaves it, run
/// before each batch, outside the count, and the stream then drained.
fn prepared(case: &str) -> Option<Op> {
    Some(match case {
        "cuda-fence-complete" => |s| cuda(s, |pair, pending| pair.our_fence_kept(pending)),
        "cuda-pooled-fence-complete" => {
            |s| cuda(s, |pair, pending| pair.our_pooled_fence_kept(pending))
        }
        "cudarc-fence-complete" => |s| cuda(s, |pair, pending| pair.cudarc_fence_kept(pending)),
        "cuda-window-complete" => |s| cuda(s, CudaPair::our_window_kept),
        "cudarc-window-complete" => |s| cuda(s, |pair, pending| pair.cudarc_window_kept(pending)),
        _ => return None,
    })
}

/// Operations between two completions. A fence's completion case completes
/// what fewer fences leave than the 64 idle events a backend keeps, so that
/// each of our fences' events is kept for the next, as in steady state. A
/// window's completes 200: with 50, each batch's cold start, which a
/// process's memory layout sets, moved its wall ratio by a fifth between
/// runs.
fn batch(case: &str, batch: u64) -> u64 {
    match case {
        "cuda-window-complete" | "cudarc-window-complete" => batch.min(200),
        _ if prepared(case).is_some() => batch.min(50),
        _ => batch,
    }
}

fn cuda(subject: &mut Subject, f: impl FnOnce(&mut CudaPair, &mut Pending)) {
    if let Subject::Cuda(pair, pending) = subject {
        f(pair, pending);
    }
}

/// Callgrind counts instructions inside this function only
/// (`--toggle-collect=probe_region`).
#[unsafe(no_mangle)]
#[inline(never)]
fn probe_region(op: Op, subject: &mut Subject, n: u64) {
    for _ in 0..n {
        black_box(op)(subject);
    }
}

fn subject(case: &str) -> Subject {
    if case.starts_with("null") {
        Subject::Null(EventProfiler::with_config(steady()), FencePool::new())
    } else {
        Subject::Cuda(Box::new(CudaPair::new()), Pending::default())
    }
}

/// Complete what submit-only cases left pending, and make room for `n`
/// more without an allocation inside a counted region; for a completion
/// `case`, submit `n` for it and wait until the device is past them; for a
/// submit case, keep the device busy past the next `n`.
fn settle(subject: &mut Subject, case: &str, n: usize) {
    if let Subject::Cuda(_, pending) = subject {
        pending.complete();
        pending.ours.reserve(n);
        pending.cudarc.reserve(n);
        pending.cudarc_chain.reserve(n);
        pending.fences.reserve(n);
        pending.cudarc_fences.reserve(n);
    }
    if let Some(prepare) = prepared(case) {
        for _ in 0..n {
            prepare(subject);
        }
        if let Subject::Cuda(pair, _) = subject {
            pair.drain();
        }
    } else if let Subject::Cuda(pair, _) = subject
        && n > 0
    {
        pair.hold();
    }
}

/// Operations between two completions: windows are read a few hundred
/// behind, as a server reads them, so the event pool is in steady state
/// (a backlog larger than the pool would time event creation instead).
const BATCH: u64 = 250;

/// A thousand operations, uncounted, in batches as counted: the pools
/// filled and the profiler's first anchor taken.
fn warm_up(subject: &mut Subject, case: &str, op: Op, batch: u64) {
    for _ in 0..1000_u64.div_ceil(batch) {
        settle(subject, case, batch as usize);
        for _ in 0..batch {
            op(subject);
        }
    }
}

fn per_op(case: &str, n: u64, measure: impl Fn() -> u64) -> f64 {
    let mut subject = subject(case);
    let op = op(case);
    let batch = batch(case, BATCH);
    warm_up(&mut subject, case, op, batch);
    let mut total = 0;
    for _ in 0..n.div_ceil(batch) {
        settle(&mut subject, case, batch as usize);
        let before = measure();
        for _ in 0..batch {
            op(&mut subject);
        }
        total += measure() - before;
    }
    settle(&mut subject, case, 0);
    total as f64 / (n.div_ceil(batch) * batch) as f64
}

/// Wall time per operation of each case against its cudarc twin, A/B
/// interleaved: `rounds` rounds of `batch` operations each side, the order
/// alternating, submit-only cases completed outside the timing. Per pair:
/// each side's median ns and the median, smallest and largest of the
/// per-round ratios.
fn wall(rounds: usize, batch: usize, pairs: &[(&str, &str)]) -> serde_json::Value {
    let mut subject = subject("cuda");
    let mut time = |case: &str| {
        let op = op(case);
        let batch = self::batch(case, batch as u64);
        settle(&mut subject, case, batch as usize);
        let started = std::time::Instant::now();
        for _ in 0..batch {
            op(&mut subject);
        }
        let ns = started.elapsed().as_nanos() as f64 / batch as f64;
        settle(&mut subject, case, 0);
        ns
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut report = serde_json::Map::new();
    for (ours, theirs) in pairs {
        time(ours);
        time(theirs);
        let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let (x, y) = if round % 2 == 0 {
                let x = time(ours);
                (x, time(theirs))
            } else {
                let y = time(theirs);
                (time(ours), y)
            };
            a.push(x);
            b.push(y);
            ratios.push(x / y);
        }
        let (low, high) = (
            ratios.iter().copied().fold(f64::INFINITY, f64::min),
            ratios.iter().copied().fold(0.0, f64::max),
        );
        report.insert(
            (*ours).into(),
            json!({
                "ours_ns": median(a),
                "cudarc_ns": median(b),
                "ratio": median(ratios),
                "ratio_low": low,
                "ratio_high": high,
                "rounds": rounds,
            }),
        );
    }
    serde_json::Value::Object(report)
}

/// Each of our cases and its cudarc twin.
const PAIRS: [(&str, &str); 7] = [
    ("cuda-fence-complete", "cudarc-fence-complete"),
    ("cuda-pooled-fence-complete", "cudarc-fence-complete"),
    ("cuda-window-complete", "cudarc-window-complete"),
    ("cuda-fence-submit", "cudarc-fence-submit"),
    ("cuda-pooled-fence-submit", "cudarc-fence-submit"),
    ("cuda-window-submit", "cudarc-window-submit"),
    ("cuda-chain-submit", "cudarc-chain-submit"),
];

/// The `q` quantile of `sorted`, in µs; NaN when empty.
fn quantile_us(sorted: &[std::time::Duration], q: f64) -> f64 {
    sorted
        .get(((sorted.len().max(1) - 1) as f64 * q).round() as usize)
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
}

/// A server timing every kernel of 50 µs, 10 000 of them, on 1, 2 and 8
/// streams of one device and on two devices (a stream and a profiler
/// each): the library's CPU and each window's answer; and what a pass of
/// the resolver costs the OS before any of its work (`wake_floor`).
fn every_kernel() -> serde_json::Value {
    use device_events_bench::answer;
    let mut report = serde_json::Map::new();
    let kernel = std::time::Duration::from_micros(50);
    for (name, run) in [
        ("streams_1", answer::every_kernel(1, kernel, 10_000)),
        ("streams_2", answer::every_kernel(2, kernel, 10_000)),
        ("streams_8", answer::every_kernel(8, kernel, 10_000)),
        (
            "devices_2",
            answer::every_kernel_on_two_devices(1, kernel, 10_000),
        ),
    ] {
        report.insert(name.to_owned(), every_kernel_case(&run));
    }
    // The resolver's busy pace: what a pass costs before the library's work.
    let pace = std::time::Duration::from_micros(400);
    report.insert(
        "wake_floor".to_owned(),
        json!({
            "pace_us": pace.as_micros() as f64,
            "cpu_us_per_pass": answer::wake_floor(pace, 2000),
        }),
    );
    serde_json::Value::Object(report)
}

/// One case of [`every_kernel`], as the report gives it.
fn every_kernel_case(run: &device_events_bench::answer::EveryKernel) -> serde_json::Value {
    let at = |q| quantile_us(&run.late, q);
    json!({
        "cpu_share": run.cpu_share,
        "library_cpu_share": run.library_cpu_share,
        "library_cpu_us_per_window": run.library_cpu_us_per_window,
        "resolver_cpu_us_per_window": run.resolver_cpu_us_per_window,
        "library_threads_left": run.library_threads_left,
        "library_wakeups_per_window": {
            "voluntary": run.library_wakeups_per_window.voluntary,
            "involuntary": run.library_wakeups_per_window.involuntary,
        },
        "reader_wakeups_per_window": {
            "voluntary": run.reader_wakeups_per_window.voluntary,
            "involuntary": run.reader_wakeups_per_window.involuntary,
        },
        "late_median_us": at(0.5),
        "late_p99_us": at(0.99),
        "windows_read": run.late.len(),
        "windows_unread": run.unread,
    })
}

/// One row of the GPU lease's table.
fn row(what: &str, value: impl std::fmt::Display) {
    println!("{what:<52} {value}");
}

/// A spread's median and p99 about the median, µs, for the table.
fn spread_us(v: &serde_json::Value) -> String {
    let us = |k: &str| v[k].as_f64().map_or(f64::NAN, |ns| ns / 1e3);
    // The host's and the device's clocks apart by more than a second
    // (the software driver's device clock is not the Unix epoch's): the
    // offset in seconds.
    let median = if us("median_ns").abs() > 1e6 {
        format!("offset {:.6} s", us("median_ns") / 1e6)
    } else {
        format!("median {:>9.2}", us("median_ns"))
    };
    format!(
        "{median}  spread p50 {:>7.2}  p99 {:>7.2}",
        us("spread_median_ns"),
        us("spread_p99_ns")
    )
}

/// The GPU day's sections, in the order `gpu-day` runs them when none is
/// named. `run.sh` runs each in a process of its own, under a time limit.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DaySection {
    /// A fence's record + query and record + stream wait, with and without
    /// timing.
    FenceCost,
    /// Windows around spin kernels against the kernels' own stamps.
    SpinWindows,
    /// The submit path against cudarc and CubeCL's own.
    SubmitWall,
    /// A server timing every 50 µs kernel.
    EveryKernel,
    /// Windows answered behind a 1 s kernel.
    HeadOfLine,
    /// GLOBAL captures beside threads that profile.
    GlobalCaptures,
    /// Event calls from a thread with no context current.
    UnboundCalls,
}

impl DaySection {
    const ALL: [DaySection; 7] = [
        DaySection::FenceCost,
        DaySection::SpinWindows,
        DaySection::SubmitWall,
        DaySection::EveryKernel,
        DaySection::HeadOfLine,
        DaySection::GlobalCaptures,
        DaySection::UnboundCalls,
    ];

    /// Its key in the JSON, and the name `DEVICE_EVENTS_PROBE_HANG` takes.
    fn key(self) -> &'static str {
        match self {
            DaySection::FenceCost => "fence_cost",
            DaySection::SpinWindows => "spin_windows",
            DaySection::SubmitWall => "submit_wall",
            DaySection::EveryKernel => "every_kernel",
            DaySection::HeadOfLine => "head_of_line",
            DaySection::GlobalCaptures => "global_captures",
            DaySection::UnboundCalls => "unbound_calls",
        }
    }
}

/// What every section needs: device 0's context bound to this thread, and
/// the spin kernel loaded into it (declared first: dropped, and unloaded
/// from the context, before the context is released).
struct Day {
    spin: device_events_bench::spin::Spin,
    _ctx: std::sync::Arc<cudarc::driver::CudaContext>,
    soft: Option<&'static SoftDriver>,
}

impl Day {
    fn new() -> Result<Self, String> {
        // Never panics without a driver, unlike cudarc's first call.
        device_events_cuda::Cuda::probe().map_err(|e| e.to_string())?;
        let ctx = cudarc::driver::CudaContext::new(0).map_err(|e| format!("device 0: {e}"))?;
        ctx.bind_to_thread().map_err(|e| format!("device 0: {e}"))?;
        let spin =
            device_events_bench::spin::Spin::load().map_err(|e| format!("the spin kernel: {e}"))?;
        println!("spin kernel: {}", spin.origin());
        Ok(Self {
            spin,
            _ctx: ctx,
            soft: SoftDriver::get().ok(),
        })
    }

    fn run(&self, section: DaySection) -> Result<serde_json::Value, String> {
        if device_events_bench::section::hang_asked(section.key()) {
            return device_events_bench::gpu::hang(&self.spin);
        }
        match section {
            DaySection::FenceCost => self.fence_cost(),
            DaySection::SpinWindows => self.spin_windows(),
            DaySection::SubmitWall => self.submit_wall(),
            DaySection::EveryKernel => self.every_kernel(),
            DaySection::HeadOfLine => self.head_of_line(),
            DaySection::GlobalCaptures => self.global_captures(),
            DaySection::UnboundCalls => Self::unbound_calls(),
        }
    }

    fn fence_cost(&self) -> Result<serde_json::Value, String> {
        println!("\n-- a fence: record + query, record + stream wait, ns per fence");
        let f = device_events_bench::fence_cost::fence_cost(9, 1000)?;
        for (key, what) in [
            ("record_query", "record + query"),
            ("record_stream_wait", "record + stream wait"),
        ] {
            let r = &f[key];
            let ns = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
            row(
                &format!("{what}: with timing, without"),
                format!(
                    "{:>8.0} {:>8.0}  ratio {:.2}",
                    ns("timing_ns"),
                    ns("untimed_ns"),
                    ns("untimed_over_timing")
                ),
            );
        }
        let lib = &f["library"];
        let ns = |k: &str| lib[k].as_f64().unwrap_or(f64::NAN);
        row(
            "the library's pooled fence: is_complete, wait_async",
            format!(
                "{:>8.0} {:>8.0}",
                ns("fence_is_complete_ns"),
                ns("fence_wait_async_ns")
            ),
        );
        Ok(f)
    }

    fn spin_windows(&self) -> Result<serde_json::Value, String> {
        use device_events_bench::gpu;
        println!("\n-- windows around spin kernels: window minus the kernel's own stamps, µs");
        let (s, raw) = gpu::stream()?;
        let mut windows = Vec::new();
        let mut measured = || -> Result<(), String> {
            for (ns, n) in [
                (10_000, 200),
                (100_000, 100),
                (1_000_000, 40),
                (10_000_000, 10),
            ] {
                for side in gpu::SIDES {
                    let w = gpu::spin_windows(&self.spin, s, raw, side, ns, n)?;
                    let name = format!("{} µs, {}", ns / 1000, side.name());
                    row(
                        &format!("{name}: duration"),
                        spread_us(&w["duration_minus_kernel"]),
                    );
                    row(
                        &format!("{name}: start (host - %globaltimer)"),
                        spread_us(&w["start_minus_kernel"]),
                    );
                    windows.push(w);
                }
            }
            Ok(())
        };
        let outcome = measured();
        let destroyed = Cuda::stream_destroy(s).map_err(|e| e.to_string());
        outcome?;
        destroyed?;
        Ok(json!(windows))
    }

    fn every_kernel(&self) -> Result<serde_json::Value, String> {
        use device_events_bench::{gpu, spin};
        println!("\n-- a server timing every 50 µs kernel, 10 000 chained, read 32 behind");
        let mut every = serde_json::Map::new();
        for n in [1usize, 2, 8] {
            let streams = (0..n)
                .map(|_| gpu::stream())
                .collect::<Result<Vec<_>, _>>()?;
            let stamps = spin::Stamps::new(10_000).map_err(|e| format!("stamps: {e}"))?;
            let only: Vec<_> = streams.iter().map(|(s, _)| *s).collect();
            let refused = std::cell::RefCell::new(None);
            let run = device_events_bench::answer::every_kernel_on::<Cuda>(
                &only,
                1,
                |i, s| {
                    if let Err(e) = self.spin.launch(s, 50_000, &stamps, i) {
                        refused.borrow_mut().get_or_insert(e.to_string());
                    }
                },
                10_000,
            );
            for (s, _) in streams {
                let _ = Cuda::stream_synchronize(s);
                let _ = Cuda::stream_destroy(s);
            }
            if let Some(e) = refused.into_inner() {
                return Err(format!("the spin kernel: {e}"));
            }
            let at = |q| quantile_us(&run.late, q);
            row(
                &format!("{n} stream(s): CPU beyond the caller (cores), answer p50/p99 µs"),
                format!(
                    "{:.3}  {:.0} / {:.0}  ({} unread)",
                    run.cpu_share,
                    at(0.5),
                    at(0.99),
                    run.unread
                ),
            );
            every.insert(
                format!("streams_{n}"),
                json!({
                    "cpu_share": run.cpu_share, "late_median_us": at(0.5), "late_p99_us": at(0.99),
                    "windows_read": run.late.len(), "windows_unread": run.unread,
                }),
            );
        }
        Ok(json!(every))
    }

    fn head_of_line(&self) -> Result<serde_json::Value, String> {
        let stamps =
            device_events_bench::spin::Stamps::new(128).map_err(|e| format!("stamps: {e}"))?;
        let next = std::cell::Cell::new(0);
        let refused = std::cell::RefCell::new(None);
        let late = device_events_bench::answer::head_of_line_with(|s, ns| {
            let at = next.replace(next.get() + 1) % 128;
            if let Err(e) = self.spin.launch(s, ns, &stamps, at) {
                refused.borrow_mut().get_or_insert(e.to_string());
            }
        });
        if let Some(e) = refused.into_inner() {
            return Err(format!("the spin kernel: {e}"));
        }
        row(
            "behind a 1 s kernel: 100 windows answered, p50/p99 µs",
            format!(
                "{}  {:.0} / {:.0}",
                late.len(),
                quantile_us(&late, 0.5),
                quantile_us(&late, 0.99)
            ),
        );
        Ok(json!({
            "windows_answered": late.len(),
            "late_median_us": quantile_us(&late, 0.5),
            "late_p99_us": quantile_us(&late, 0.99),
        }))
    }

    fn submit_wall(&self) -> Result<serde_json::Value, String> {
        println!("\n-- the submit path, wall ns per op (median of 5 rounds, A/B interleaved)");
        device_events_bench::hold_with_the_spin_kernel();
        let walls = wall(5, 2000, &GPU_PAIRS);
        for (ours, theirs) in GPU_PAIRS {
            let w = &walls[ours];
            let f = |k: &str| w[k].as_f64().unwrap_or(f64::NAN);
            row(
                &format!("{ours} vs {theirs}"),
                format!(
                    "{:>8.0} {:>8.0}  ratio {:.2}",
                    f("ours_ns"),
                    f("cudarc_ns"),
                    f("ratio")
                ),
            );
        }
        // The software driver also counts each side's driver calls.
        let calls = self.soft.map(|soft| {
            let mine = || soft.thread_calls();
            let mut calls = serde_json::Map::new();
            for (ours, theirs) in GPU_PAIRS {
                for case in [ours, theirs] {
                    calls.insert(case.into(), json!(per_op(case, 2000, mine)));
                }
            }
            calls
        });
        Ok(json!({ "wall": walls, "calls": calls }))
    }

    fn global_captures(&self) -> Result<serde_json::Value, String> {
        use device_events_bench::server;
        println!("\n-- 1000 GLOBAL captures on one thread beside 8 threads profiling");
        let c = server::captures_beside_the_library::<Cuda>(
            self.soft,
            &server::cuda_capturing(),
            1000,
            8,
        );
        row(
            "captures ended / failed",
            format!("{} / {}", c.ended, c.failed),
        );
        row("windows read meanwhile", c.windows);
        Ok(json!({
            "ended": c.ended, "failed": c.failed, "violations": c.violations, "windows": c.windows,
        }))
    }

    fn unbound_calls() -> Result<serde_json::Value, String> {
        let unbound = device_events_bench::gpu::unbound_calls()?;
        row(
            "status of calls with no context current (0: taken)",
            unbound.to_string(),
        );
        Ok(unbound)
    }
}

/// What a GPU lease measures, section by section: a table on stdout, and
/// each section's value (or its error, or its panic, in words) written to
/// `json` the moment it ends. Each measure drives device work with the
/// spin kernel, so it runs the same on the machine's driver and on the
/// software one.
fn gpu_day(json_path: &std::path::Path, sections: &[DaySection]) {
    let mut report = device_events_bench::section::Report::new(json_path.to_owned());
    let sections = if sections.is_empty() {
        &DaySection::ALL[..]
    } else {
        sections
    };
    let day = match Day::new() {
        Ok(day) => day,
        Err(error) => {
            let keys: Vec<_> = sections.iter().map(|s| s.key()).collect();
            report.fail(&keys, &error);
            std::process::exit(1);
        }
    };
    let mut failed = false;
    for section in sections {
        failed |= !report.run(section.key(), || day.run(*section));
    }
    println!("\n(written to {})", json_path.display());
    if failed {
        std::process::exit(1);
    }
}

/// The gate on a shared hardware queue, in a process of its own: the
/// driver reads `CUDA_DEVICE_MAX_CONNECTIONS` at initialization.
fn gpu_gate(json_path: &std::path::Path) {
    let mut report = device_events_bench::section::Report::new(json_path.to_owned());
    let day = match Day::new() {
        Ok(day) => day,
        Err(error) => {
            report.fail(&["gate"], &error);
            std::process::exit(1);
        }
    };
    let ok = report.run("gate", || {
        if device_events_bench::section::hang_asked("gate") {
            return device_events_bench::gpu::hang(&day.spin);
        }
        gate_section(&day)
    });
    println!("\n(written to {})", json_path.display());
    if !ok {
        std::process::exit(1);
    }
}

fn gate_section(day: &Day) -> Result<serde_json::Value, String> {
    use device_events_bench::gpu;
    println!(
        "\n-- the gate, one hardware queue: gaps between a user's back-to-back 10 µs kernels, µs"
    );
    let before = day.soft.map(SoftDriver::value_waits_held);
    let mut g = gpu::gate(&day.spin, 20_000, 20)?;
    for phase in ["alone", "beside_calibrations"] {
        let p = &g[phase];
        let us = |k: &str| p[k].as_f64().map_or(f64::NAN, |ns| ns / 1e3);
        row(
            &format!(
                "{phase}: {} kernels, {} calibrations",
                p["kernels"], p["calibrations"]
            ),
            format!(
                "p50 {:.2}  p99 {:.2}  max {:.2}",
                us("gap_median_ns"),
                us("gap_p99_ns"),
                us("gap_max_ns")
            ),
        );
    }
    // The software driver also says how long each gate held its stream
    // and how long it held the user's work; a GPU says it only through
    // the gaps above.
    if let (Some(soft), Some(before)) = (day.soft, before) {
        let after = soft.value_waits_held();
        let waits = (after.waits - before.waits).max(1);
        let closed = (after.held_ns - before.held_ns) as f64 / waits as f64 / 1e3;
        let (closed_max, delay_max) = (
            after.held_max_ns as f64 / 1e3,
            after.delayed_max_ns as f64 / 1e3,
        );
        g["soft_driver"] = json!({
            "closed_per_sample_us": closed,
            "closed_max_us": closed_max,
            "user_delay_max_us": delay_max,
        });
        row(
            "software driver: gate closed per sample, max; user delay max (µs)",
            format!("{closed:.2}  {closed_max:.2}  {delay_max:.2}"),
        );
    }
    Ok(g)
}

/// The machine's driver, device and spin kernel, in a line, and as JSON
/// in `json`; exits 2 without a device.
fn preflight(json_path: &std::path::Path) {
    match device_events_bench::preflight::preflight() {
        Ok((facts, line)) => {
            println!("{line}");
            let text = serde_json::to_string_pretty(&facts).unwrap_or_default();
            if let Err(err) = std::fs::write(json_path, text) {
                eprintln!("could not write {}: {err}", json_path.display());
            }
        }
        Err(error) => {
            println!("no usable CUDA device: {error}");
            let text = json!({ "error": error }).to_string();
            let _ = std::fs::write(json_path, text);
            std::process::exit(2);
        }
    }
}

/// The GPU lease's submit pairs: ours against cudarc's, and ours through
/// `device-events-cubecl` against CubeCL's own.
const GPU_PAIRS: [(&str, &str); 9] = [
    PAIRS[0],
    PAIRS[1],
    PAIRS[2],
    PAIRS[3],
    PAIRS[4],
    PAIRS[5],
    PAIRS[6],
    ("cubecl-ours-fence-submit", "cubecl-server-fence-submit"),
    ("cubecl-ours-window-submit", "cubecl-server-window-submit"),
];

fn main() {
    let args = Args::parse();
    let report = match args.what {
        What::Allocations => {
            let count = || ALLOCATIONS.load(Ordering::Relaxed);
            json!({
                "fence": per_op("null-fence", 10_000, count),
                "pooled_fence": per_op("null-pooled-fence", 10_000, count),
                "window": per_op("null-window", 10_000, count),
            })
        }
        What::Instructions { case, n } => {
            let mut subject = subject(&case);
            let op = op(&case);
            let batch = batch(&case, BATCH);
            warm_up(&mut subject, &case, op, batch);
            for _ in 0..n.div_ceil(batch) {
                settle(&mut subject, &case, batch as usize);
                probe_region(op, &mut subject, batch);
            }
            settle(&mut subject, &case, 0);
            json!({ "case": case, "n": n.div_ceil(batch) * batch })
        }
        What::Calls => {
            let soft = SoftDriver::get().unwrap_or_else(|e| panic!("{e}"));
            let mine = || soft.thread_calls();
            let mut report = serde_json::Map::new();
            // The calling thread's own calls: the submitting thread's, where
            // a server launches work, and the completing thread's, with the
            // device past the work.
            for case in [
                "cuda-fence-complete",
                "cuda-pooled-fence-complete",
                "cudarc-fence-complete",
                "cuda-window-complete",
                "cudarc-window-complete",
                "cuda-fence-submit",
                "cuda-pooled-fence-submit",
                "cudarc-fence-submit",
                "cuda-window-submit",
                "cudarc-window-submit",
                "cuda-chain-submit",
                "cudarc-chain-submit",
                "cubecl-server-fence-submit",
                "cubecl-ours-fence-submit",
                "cubecl-server-window-submit",
                "cubecl-ours-window-submit",
            ] {
                report.insert(case.into(), json!(per_op(case, 2000, mine)));
            }
            serde_json::Value::Object(report)
        }
        What::Wall { rounds, batch } => wall(rounds, batch, &PAIRS),
        What::Memory => {
            let mut sizes = serde_json::Map::new();
            for n in [1_000usize, 10_000, 100_000, 1_000_000] {
                let mut profiler = EventProfiler::<Null>::new();
                let base = LIVE_BYTES.load(Ordering::Relaxed);
                let tokens: Vec<_> = (0..n).map(|_| profiler.start(NullStream)).collect();
                let tokens_bytes = (n * std::mem::size_of_val(&tokens[0])) as i64;
                let open = LIVE_BYTES.load(Ordering::Relaxed) - base - tokens_bytes;
                let pending: Vec<_> = tokens
                    .into_iter()
                    .map(|t| profiler.stop(NullStream, t).unwrap())
                    .collect();
                let pending_bytes = LIVE_BYTES.load(Ordering::Relaxed) - base;
                let resolved = pending.into_iter().filter_map(resolve).count();
                assert_eq!(resolved, n);
                sizes.insert(
                    n.to_string(),
                    json!({
                        "open_bytes_per_window": open as f64 / n as f64,
                        "pending_bytes_per_window": pending_bytes as f64 / n as f64,
                    }),
                );
            }
            serde_json::Value::Object(sizes)
        }
        What::Placement { seconds, blocking } => {
            let soft = SoftDriver::get().unwrap_or_else(|e| panic!("{e}"));
            let pair = CudaPair::new();
            // The driver's own clock is OpenCL's alone: four sessions here.
            let sessions: Vec<_> = placement_sessions().into_iter().take(4).collect();
            let configs: Vec<_> = sessions.iter().map(|(_, c)| *c).collect();
            let measured =
                device_events_bench::placement::soft(soft, pair.ours, seconds, blocking, &configs);
            let mut report = serde_json::Map::new();
            report.insert("seconds".into(), json!(seconds));
            for ((key, _), errors) in sessions.iter().zip(measured) {
                report.insert((*key).into(), errors_json(&errors));
            }
            serde_json::Value::Object(report)
        }
        What::EveryKernel {
            windows: Some(windows),
            streams,
            kernel_us,
        } => every_kernel_case(&device_events_bench::answer::every_kernel(
            streams,
            std::time::Duration::from_micros(kernel_us),
            windows,
        )),
        What::EveryKernel { windows: None, .. } => every_kernel(),
        What::GpuDay { json, sections } => {
            gpu_day(&json, &sections);
            return;
        }
        What::Preflight { json } => {
            preflight(&json);
            return;
        }
        What::GpuGate { json } => {
            gpu_gate(&json);
            return;
        }
        What::Answer => {
            let soft = SoftDriver::get().unwrap_or_else(|e| panic!("{e}"));
            let _pair = CudaPair::new();
            let late = device_events_bench::answer::head_of_line(soft);
            let at = quantile_us;
            let idle = device_events_bench::answer::right_after_stop(2000);
            json!({
                "head_of_line": {
                    "windows_answered": late.len(),
                    "late_median_us": at(&late, 0.5),
                    "late_p99_us": at(&late, 0.99),
                },
                "right_after_stop": {
                    "windows": idle.len(),
                    "late_median_us": at(&idle, 0.5),
                    "late_p99_us": at(&idle, 0.99),
                },
                "cpu_share_1000_pending": device_events_bench::answer::cpu_while_pending(soft),
            })
        }
        What::HungDevice { windows } => {
            let soft = SoftDriver::get().unwrap_or_else(|e| panic!("{e}"));
            let _pair = CudaPair::new();
            let (took, calibrated) =
                device_events_bench::server::beside_a_hung_device(soft, windows);
            json!({
                "windows": took.len(),
                "read_median_us": quantile_us(&took, 0.5),
                "read_p99_us": quantile_us(&took, 0.99),
                "read_worst_us": quantile_us(&took, 1.0),
                "hung_devices_calibration_completed": calibrated,
            })
        }
        What::CubeclSide { windows } => {
            use device_events_bench::cubecl;
            let soft = SoftDriver::get().unwrap_or_else(|e| panic!("{e}"));
            // Offset, and drifting 100 ppm, from before either side's
            // first anchor.
            soft.set_clock(3_700_000_000_123, 100.0);
            let pair = CudaPair::new();
            let mut sides = cubecl::Sides::new(pair.stream.cu_stream(), pair.ours);
            soft.set_bandwidth(1e9);
            let reads = cubecl::blocking_reads(&mut sides, 20_000_000);
            soft.set_bandwidth(10e9);
            let [upstream, ours] = cubecl::placement(
                soft,
                &mut sides,
                windows,
                std::time::Duration::from_millis(2),
            );
            let us = |ns: &[u64], q: f64| {
                ns.get(((ns.len().max(1) - 1) as f64 * q).round() as usize)
                    .map_or(f64::NAN, |ns| *ns as f64 / 1e3)
            };
            let side = |read: (std::time::Duration, bool), errors: &[u64]| {
                json!({
                    "first_poll_of_a_20ms_window_us": read.0.as_secs_f64() * 1e6,
                    "first_poll_ready": read.1,
                    "placement_median_us": us(errors, 0.5),
                    "placement_p99_us": us(errors, 0.99),
                    "placement_worst_us": us(errors, 1.0),
                    "ends": errors.len(),
                })
            };
            drop(sides);
            soft.set_clock(1_000_000_000_000, 0.0);
            json!({
                "cubecl_server": side(reads[0], &upstream),
                "device_events_cubecl": side(reads[1], &ours),
            })
        }
        What::Gate { calibrations } => {
            let soft = SoftDriver::get().unwrap_or_else(|e| panic!("{e}"));
            let _pair = CudaPair::new();
            let held = device_events_bench::server::gate_on_a_shared_queue(soft, calibrations);
            let per = |ns: u64, n: u64| ns as f64 / n.max(1) as f64 / 1e3;
            json!({
                "calibrations": calibrations,
                "samples": held.waits,
                "closed_per_sample_us": per(held.held_ns, held.waits),
                "closed_max_us": held.held_max_ns as f64 / 1e3,
                "user_kernels_delayed": held.delayed,
                "user_delay_per_sample_us": per(held.delayed_ns, held.waits),
                "user_delay_max_us": held.delayed_max_ns as f64 / 1e3,
                // Beside the gate's hold: what the driver's own threads,
                // standing in for the device, added (a GPU adds none).
                "driver_late_per_sample_us": per(held.driver_late_ns, held.waits),
                "driver_late_max_us": held.driver_late_max_ns as f64 / 1e3,
                // Of the gate's hold, how late at most the driver's own
                // worker may have seen the host's write.
                "driver_look_gap_max_us": held.look_gap_max_ns as f64 / 1e3,
            })
        }
        What::ServerWay { captures, threads } => {
            use device_events_bench::server;
            let soft = SoftDriver::get().unwrap_or_else(|e| panic!("{e}"));
            let _pair = CudaPair::new();
            let (took, bare) = server::start_behind_a_kernel(soft);
            let at = quantile_us;
            let captured = |c: server::Captures| {
                json!({
                    "captures_ended": c.ended,
                    "captures_failed": c.failed,
                    "violations": c.violations,
                    "windows_read_meanwhile": c.windows,
                })
            };
            let cuda = server::captures_beside_the_library(
                Some(soft),
                &server::cuda_capturing(),
                captures,
                threads,
            );
            let hip = server::captures_beside_the_library(
                Some(soft),
                &server::hip_capturing(),
                captures,
                threads,
            );
            json!({
                "start_behind_a_1s_kernel": {
                    "starts": took.len(),
                    "median_us": at(&took, 0.5),
                    "p99_9_us": at(&took, 0.999),
                    "max_us": at(&took, 1.0),
                    "bare_record_median_us": at(&bare, 0.5),
                    "bare_record_p99_9_us": at(&bare, 0.999),
                },
                "global_captures": {
                    "threads": threads,
                    "cuda": captured(cuda),
                    "hip": captured(hip),
                },
            })
        }
        What::WaitCost => {
            let soft = SoftDriver::get().unwrap_or_else(|e| panic!("{e}"));
            let pair = CudaPair::new();
            let row = |cost: device_events_bench::wait::WaitCost| {
                json!({
                    "cpu_ms": cost.cpu.as_secs_f64() * 1e3,
                    "wall_ms": cost.wall.as_secs_f64() * 1e3,
                    "late_us": cost.late.as_secs_f64() * 1e6,
                })
            };
            json!({
                "soft_spin": row(device_events_bench::wait::soft_cuda(soft, &pair, false)),
                "soft_blocking": row(device_events_bench::wait::soft_cuda(soft, &pair, true)),
                "pocl": row(device_events_bench::pocl::wait_cost()),
            })
        }
        What::PlacementVulkan { seconds, skewed } => {
            use device_events_bench::lavapipe;
            let device = lavapipe::device();
            let sessions = lavapipe::sessions();
            let configs: Vec<_> = sessions.iter().map(|(_, c)| *c).collect();
            let measured = lavapipe::placement(&device, seconds, &configs, skewed);
            let mut report = serde_json::Map::new();
            report.insert("seconds".into(), json!(seconds));
            report.insert("device".into(), json!(device.name()));
            for ((key, _), errors) in sessions.iter().zip(measured) {
                report.insert((*key).into(), errors_json(&errors));
            }
            serde_json::Value::Object(report)
        }
        What::PlacementOpencl { seconds } => {
            use device_events_core::ProfilerConfig;
            let sessions = placement_sessions();
            let configs: Vec<ProfilerConfig> = sessions.iter().map(|(_, c)| *c).collect();
            let measured = device_events_bench::pocl::placement(seconds, &configs);
            let mut report = serde_json::Map::new();
            report.insert("seconds".into(), json!(seconds));
            for ((key, _), errors) in sessions.iter().zip(measured) {
                report.insert((*key).into(), errors_json(&errors));
            }
            serde_json::Value::Object(report)
        }
    };
    println!("{report}");
}

/// The placement sessions every driver is measured with, by key: gated or
/// not, fit on or off, on the bracket every driver has; and the driver's
/// own clock where it has one.
fn placement_sessions() -> Vec<(&'static str, device_events_core::ProfilerConfig)> {
    let config =
        |gated_anchor, drift_correction, paired: bool| device_events_core::ProfilerConfig {
            anchor: device_events_core::AnchorConfig {
                gated_anchor,
                drift_correction,
                driver_pairing: if paired {
                    device_events_core::DriverPairing::Bracketed
                } else {
                    device_events_core::DriverPairing::Off
                },
                ..device_events_core::AnchorConfig::default()
            },
            ..device_events_core::ProfilerConfig::default()
        };
    vec![
        ("gated_fit_on", config(true, true, false)),
        ("gated_fit_off", config(true, false, false)),
        ("ungated_fit_on", config(false, true, false)),
        ("ungated_fit_off", config(false, false, false)),
        ("driver_clock_fit_on", config(true, true, true)),
    ]
}

fn errors_json(errors: &device_events_bench::placement::Errors) -> serde_json::Value {
    json!({
        "windows": errors.windows,
        "median_us": errors.quantile_us(0.5),
        "p99_us": errors.quantile_us(0.99),
        "worst_us": errors.quantile_us(1.0),
        "bound_median_us": errors.bound_median_us(),
        "outside_bound": errors.outside_bound,
    })
}
