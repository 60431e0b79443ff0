//! `cargo xtask bench`: one table, `docs/bench.json` (committed) and the
//! docs generated from it (`docs/measurements.md` and every `bench:` block),
//! every figure a count or a ratio measured in this run.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::{cargo, ensure_debian_tool, root, run, soft_driver, soft_env};

/// Cases `bench-probe` runs, with how many times under callgrind.
const CASES: [(&str, u64); 20] = [
    ("null-nothing", 20_000),
    ("null-fence", 20_000),
    ("null-pooled-fence", 20_000),
    ("null-window", 20_000),
    ("cuda-fence-complete", 2_000),
    ("cuda-pooled-fence-complete", 2_000),
    ("cudarc-fence-complete", 2_000),
    ("cuda-window-complete", 2_000),
    ("cudarc-window-complete", 2_000),
    ("cuda-fence-submit", 2_000),
    ("cuda-pooled-fence-submit", 2_000),
    ("cudarc-fence-submit", 2_000),
    ("cuda-window-submit", 2_000),
    ("cudarc-window-submit", 2_000),
    ("cuda-chain-submit", 2_000),
    ("cudarc-chain-submit", 2_000),
    ("cubecl-server-fence-submit", 2_000),
    ("cubecl-ours-fence-submit", 2_000),
    ("cubecl-server-window-submit", 2_000),
    ("cubecl-ours-window-submit", 2_000),
];

/// Interleaved wall-time rounds against cudarc, and operations per round.
const WALL_ROUNDS: &str = "401";
const WALL_BATCH: &str = "250";
/// Wall-time runs, each its own process: a run's memory layout and thread
/// placement shift its ratios as a whole (up to 20 % for a window's
/// completion on this kind of machine), which more rounds do not average.
const WALL_RUNS: usize = 3;

/// Each placement session's length; every session runs three times.
const PLACEMENT_SECONDS: u64 = 20;
const PLACEMENT_RUNS: usize = 3;

/// The placement sessions' keys, as `bench-probe` reports them: how the
/// anchor is taken, and whether the drift fit is on.
const SESSIONS: [(&str, &str, &str); 5] = [
    ("gated_fit_on", "gated", "fit_on"),
    ("gated_fit_off", "gated", "fit_off"),
    ("ungated_fit_on", "ungated", "fit_on"),
    ("ungated_fit_off", "ungated", "fit_off"),
    ("driver_clock_fit_on", "driver_clock", "fit_on"),
];

/// Run a placement probe `PLACEMENT_RUNS` times and gather, per session
/// and figure, the median of the runs, their spread (largest minus
/// smallest) and each run's value, nested as gating → fit → figure.
fn placement_runs(args: &[&str], soft: &Path) -> Result<Value> {
    let runs = probe_runs(args, PLACEMENT_RUNS, soft)?;
    let mut out = serde_json::Map::new();
    for (key, gating, fit) in SESSIONS {
        if runs[0].get(key).is_none() {
            continue;
        }
        let mut figures = serde_json::Map::new();
        for figure in [
            "median_us",
            "p99_us",
            "worst_us",
            "bound_median_us",
            "outside_bound",
        ] {
            let mut values: Vec<f64> = runs
                .iter()
                .map(|r| r[key][figure].as_f64().unwrap_or(f64::NAN))
                .collect();
            let each = values.clone();
            values.sort_by(f64::total_cmp);
            figures.insert(
                figure.into(),
                json!({
                    "median": values[values.len() / 2],
                    "spread": values[values.len() - 1] - values[0],
                    "runs": each,
                }),
            );
        }
        figures.insert("windows_per_run".into(), runs[0][key]["windows"].clone());
        out.entry(gating)
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .map(|o| o.insert(fit.into(), Value::Object(figures)));
    }
    Ok(Value::Object(out))
}

/// The wall-time probe `WALL_RUNS` times: per case, the run whose ratio is
/// the median, with every run's ratio beside it.
fn wall_runs(soft: &Path) -> Result<Value> {
    let runs = probe_runs(&["wall", WALL_ROUNDS, WALL_BATCH], WALL_RUNS, soft)?;
    let ratio = |run: &Value, case: &str| run[case]["ratio"].as_f64().unwrap_or(f64::NAN);
    let mut out = serde_json::Map::new();
    for case in runs[0]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(case, _)| case)
    {
        let mut order: Vec<&Value> = runs.iter().collect();
        order.sort_by(|a, b| ratio(a, case).total_cmp(&ratio(b, case)));
        let mut figures = order[order.len() / 2][case].clone();
        figures["ratio_runs"] = runs.iter().map(|run| ratio(run, case)).collect();
        out.insert(case.clone(), figures);
    }
    Ok(Value::Object(out))
}

/// `bench-probe` with `args`, `runs` times, each its own process.
fn probe_runs(args: &[&str], runs: usize, soft: &Path) -> Result<Vec<Value>> {
    (1..=runs)
        .map(|run| {
            eprintln!("xtask: {args:?}, run {run} of {runs}");
            probe(args, soft)
        })
        .collect()
}

fn probe(args: &[&str], soft: &Path) -> Result<Value> {
    let exe = root().join("target/release/bench-probe");
    let mut command = Command::new(&exe);
    if args.first() == Some(&"placement-vulkan") {
        crate::on_lavapipe(&mut command)?;
    }
    let output = soft_env(&mut command, soft)
        .args(args)
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    if !output.status.success() {
        bail!(
            "bench-probe {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    serde_json::from_slice(&output.stdout).context("bench-probe's JSON")
}

/// Instructions per operation of `case`, counted by callgrind inside the
/// probe's `probe_region` alone: in all, and outside the driver library
/// (the software driver's object), where ours and cudarc's code differ.
fn instructions(case: &str, n: u64, soft: &Path) -> Result<(f64, f64, String)> {
    let out = root().join(format!("target/callgrind.{case}.out"));
    let exe = root().join("target/release/bench-probe");
    let status = soft_env(&mut Command::new("valgrind"), soft)
        .arg("--tool=callgrind")
        .arg("--toggle-collect=probe_region")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(&exe)
        .args(["instructions", case, &n.to_string()])
        .output()
        .context("running valgrind")?;
    if !status.status.success() {
        bail!(
            "callgrind on {case} failed: {}",
            String::from_utf8_lossy(&status.stderr)
        );
    }
    let text = std::fs::read_to_string(&out)?;
    let total = totals(&text)?;
    let driver = inside_the_driver(&text);
    Ok((total / n as f64, (total - driver) / n as f64, text))
}

/// The instructions a callgrind output counts in all.
fn totals(text: &str) -> Result<f64> {
    text.lines()
        .find_map(|line| {
            line.strip_prefix("totals:")
                .or_else(|| line.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no totals in the callgrind output")
}

/// The name an `ob=`/`fn=` (or `cob=`/`cfn=`) line gives, recorded in
/// `names` when given in full (`(id) name`) and looked up by id after.
fn named(names: &mut std::collections::HashMap<String, String>, rest: &str) -> Option<String> {
    let (id, name) = rest.split_once(' ').unwrap_or((rest, ""));
    if !name.is_empty() {
        names.insert(id.to_string(), name.to_string());
    }
    names.get(id).cloned()
}

/// The submitting cases whose instructions outside the driver are
/// profiled by function: ours, each beside what it is held to.
const PROFILED_SUBMITS: [(&str, &str); 3] = [
    ("cuda-chain-submit", "cudarc-chain-submit"),
    ("cubecl-ours-fence-submit", "cubecl-server-fence-submit"),
    ("cubecl-ours-window-submit", "cubecl-server-window-submit"),
];

/// A function below this many instructions per operation is not named.
const PROFILE_FLOOR: f64 = 5.0;

/// Where a case's instructions outside the driver go, per operation, read
/// from its callgrind output (`instructions` returns it): each function of
/// the probe's own binary (the library, the harness, and what they inline)
/// with its own instructions, most first, down to [`PROFILE_FLOOR`]; then
/// the rest outside the driver (smaller functions, and libc's allocator,
/// copies and clock reads called from outside the driver).
fn submit_profile(text: &str, n: u64, outside: f64) -> Value {
    let mut functions: Vec<(String, f64)> = own_instructions(text)
        .into_iter()
        .map(|(name, ir)| (name, ir / n as f64))
        .filter(|(_, ir)| *ir >= PROFILE_FLOOR)
        .collect();
    functions.sort_by(|a, b| b.1.total_cmp(&a.1));
    let named: f64 = functions.iter().map(|(_, ir)| ir).sum();
    json!({
        "functions": functions
            .iter()
            .map(|(name, ir)| json!({ "function": short_name(name), "instructions": ir }))
            .collect::<Vec<_>>(),
        "rest": outside - named,
    })
}

/// Each function's own (exclusive) instructions in a callgrind output,
/// for the functions of the probe's binary alone. Names are given once,
/// in `fn=`/`cfn=` (objects in `ob=`/`cob=`), and by id after that; the
/// cost line after a `calls=` line is the call's, not the caller's own.
fn own_instructions(text: &str) -> std::collections::HashMap<String, f64> {
    use std::collections::HashMap;
    let ir = ir_reader(text);
    let (mut objects, mut functions) = (HashMap::new(), HashMap::new());
    let (mut object, mut function) = (String::new(), String::new());
    let mut call_cost_next = false;
    let mut own = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("ob=") {
            object = named(&mut objects, rest).unwrap_or_default();
        } else if let Some(rest) = line.strip_prefix("cob=") {
            named(&mut objects, rest);
        } else if let Some(rest) = line.strip_prefix("fn=") {
            function = named(&mut functions, rest).unwrap_or_default();
        } else if let Some(rest) = line.strip_prefix("cfn=") {
            named(&mut functions, rest);
        } else if line.starts_with("calls=") {
            call_cost_next = true;
        } else if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            if std::mem::take(&mut call_cost_next) || !object.ends_with("bench-probe") {
                continue;
            }
            *own.entry(function.clone()).or_insert(0.0) += ir(line);
        }
    }
    own
}

/// How to read a cost line's instructions (`Ir`) in a callgrind output:
/// after its position columns (`positions:`, `line` alone by default), at
/// `Ir`'s place among the events (`events:`).
fn ir_reader(text: &str) -> impl Fn(&str) -> f64 {
    let header = |name: &str| {
        text.lines()
            .take_while(|line| !line.starts_with("fn="))
            .find_map(|line| line.strip_prefix(name))
            .map(|rest| {
                rest.split_whitespace()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
    };
    let positions = header("positions:").map_or(1, |p| p.len());
    let event = header("events:")
        .and_then(|events| events.iter().position(|e| e == "Ir"))
        .unwrap_or(0);
    move |line: &str| {
        line.split_whitespace()
            .nth(positions + event)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    }
}

/// A function's name as a reader scans it: the crates' common prefix and
/// `impl` paths left out.
fn short_name(name: &str) -> String {
    name.replace("<impl device_events_core::", "<impl ")
        .replace("device_events_", "")
}

/// The every-kernel case callgrind profiles: one stream, its kernels long
/// enough that a reader slowed ~50× by callgrind still keeps 32 queued.
const PROFILED_WINDOWS: &str = "1000";
const PROFILED_KERNEL_US: &str = "2000";

/// The resolver thread's work per window read in a shorter every-kernel
/// case, counted by callgrind inside its body (`answer_windows`) alone:
/// instructions, system calls (the futex's and `sched_yield`'s, through
/// libc) and asks of a window.
fn resolver_profile(soft: &Path) -> Result<Value> {
    let out = root().join("target/callgrind.every-kernel.out");
    let exe = root().join("target/release/bench-probe");
    let output = soft_env(&mut Command::new("valgrind"), soft)
        .arg("--tool=callgrind")
        .arg("--toggle-collect=*answer_windows*")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(&exe)
        .args(["every-kernel", "--windows", PROFILED_WINDOWS])
        .args(["--kernel-us", PROFILED_KERNEL_US])
        .output()
        .context("running valgrind")?;
    if !output.status.success() {
        bail!(
            "callgrind on every-kernel failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let run: Value = serde_json::from_slice(&output.stdout).context("bench-probe's JSON")?;
    let text = std::fs::read_to_string(&out)?;
    let total = totals(&text)?;
    let windows = run["windows_read"].as_f64().unwrap_or(f64::NAN);
    let calls = |of: &dyn Fn(&str) -> bool| calls_to(&text, of) / windows;
    Ok(json!({
        "windows": windows,
        "kernel_us": PROFILED_KERNEL_US.parse::<f64>().ok(),
        "instructions_per_window": total / windows,
        "syscalls_per_window": calls(&|name| name == "syscall" || name.ends_with("sched_yield")),
        "sched_yields_per_window": calls(&|name| name.ends_with("sched_yield")),
        "asks_per_window": calls(&|name| name.ends_with("Job>::attempt")),
        "library_wakeups_per_window": run["library_wakeups_per_window"].clone(),
    }))
}

/// How many calls a callgrind output counts to functions named as `of`
/// says. Names are given once, in `fn=(id) name` or `cfn=(id) name`, and
/// by id alone after that.
fn calls_to(text: &str, of: &dyn Fn(&str) -> bool) -> f64 {
    let mut names = std::collections::HashMap::new();
    let mut callee = None::<String>;
    let mut count = 0.0;
    for line in text.lines() {
        let named_here = line
            .strip_prefix("cfn=")
            .or_else(|| line.strip_prefix("fn="));
        if let Some(rest) = named_here {
            let name = named(&mut names, rest);
            if line.starts_with("cfn=") {
                callee = name;
            }
        } else if let Some(rest) = line.strip_prefix("calls=")
            && callee.as_deref().is_some_and(of)
        {
            count += rest
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
        }
    }
    count
}

/// Instructions spent inside calls into the driver library (the software
/// driver, or `libcuda`) from outside it, in a callgrind output: each such
/// call's inclusive cost (the line after `calls=`), whatever the driver
/// called in turn (libc's allocator among it). Object names are given
/// once, in `ob=` or `cob=`; a call's object is its `cob=`, else the
/// caller's.
fn inside_the_driver(text: &str) -> f64 {
    let ir = ir_reader(text);
    let driver = |object: &str| object.contains("soft_driver") || object.contains("libcuda");
    let mut names = std::collections::HashMap::new();
    let (mut object, mut callee) = (String::new(), None::<String>);
    let (mut in_call, mut inside) = (false, 0.0);
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("ob=") {
            object = named(&mut names, rest).unwrap_or_default();
        } else if let Some(rest) = line.strip_prefix("cob=") {
            callee = named(&mut names, rest);
        } else if line.starts_with("fn=") {
            callee = None;
        } else if line.starts_with("calls=") {
            in_call = true;
        } else if in_call && line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            in_call = false;
            let to = callee.take().unwrap_or_else(|| object.clone());
            if driver(&to) && !driver(&object) {
                inside += ir(line);
            }
        }
    }
    inside
}

/// Criterion's mean time, in nanoseconds, of `group/function[/parameter]`.
fn wall(path: &str) -> Result<f64> {
    let file = root()
        .join("target/criterion")
        .join(path)
        .join("new/estimates.json");
    let estimates: Value = serde_json::from_slice(
        &std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?,
    )?;
    estimates["mean"]["point_estimate"]
        .as_f64()
        .context("no mean in criterion's estimates")
}

fn ratio(ours: f64, theirs: f64) -> f64 {
    if theirs > 0.0 {
        ours / theirs
    } else {
        f64::NAN
    }
}

pub(crate) fn bench() -> Result<()> {
    ensure_debian_tool("valgrind", "valgrind")?;
    // Taken first: the code measured is the tree as the run began.
    let (date, commit) = (today_utc(), commit_measured());
    let soft = soft_driver()?;
    run(
        "build bench-probe",
        cargo().args([
            "build",
            "--release",
            "--package",
            crate::BENCH_PACKAGE,
            "--bin",
            "bench-probe",
        ]),
    )?;
    eprintln!("xtask: counting allocations, driver calls and memory");
    let allocations = probe(&["allocations"], &soft)?;
    let calls = probe(&["calls"], &soft)?;
    let memory = probe(&["memory"], &soft)?;
    eprintln!("xtask: wall time against cudarc, A/B interleaved");
    let walls = wall_runs(&soft)?;
    let mut instr = serde_json::Map::new();
    let mut outside = serde_json::Map::new();
    let mut submit_profiles = serde_json::Map::new();
    for (case, n) in CASES {
        eprintln!("xtask: callgrind: {case}");
        let (total, beyond, text) = instructions(case, n, &soft)?;
        if PROFILED_SUBMITS
            .iter()
            .any(|(ours, theirs)| case == *ours || case == *theirs)
        {
            submit_profiles.insert(case.into(), submit_profile(&text, n, beyond));
        }
        instr.insert(case.into(), json!(total));
        outside.insert(case.into(), json!(beyond));
    }
    // glibc hands a freed heap top back to the kernel (past 128 KiB) and
    // faults it in again on the next round: at a million windows in flight
    // that is ~300 MB a round, which would time the kernel, not the library.
    // A long-running server's heap stays put; so does this one's.
    run(
        "criterion (wall-clock)",
        soft_env(
            cargo()
                .args([
                    "bench",
                    "--package",
                    crate::BENCH_PACKAGE,
                    "--bench",
                    "wall",
                ])
                .env("MALLOC_TRIM_THRESHOLD_", "4294967295")
                .env("MALLOC_TOP_PAD_", "536870912"),
            &soft,
        ),
    )?;
    eprintln!(
        "xtask: placement, {PLACEMENT_RUNS} runs of {PLACEMENT_SECONDS} s sessions each: the \
         software driver (clock offset, drifting 100 ppm), spinning and blocking waits, then PoCL"
    );
    let seconds = PLACEMENT_SECONDS.to_string();
    let spinning = placement_runs(&["placement", &seconds], &soft)?;
    let blocking = placement_runs(&["placement", &seconds, "--blocking"], &soft)?;
    crate::ensure_pocl()?;
    let pocl = placement_runs(&["placement-opencl", &seconds], &soft)?;
    eprintln!(
        "xtask: placement on lavapipe (Vulkan on the CPU, stamps on CLOCK_MONOTONIC: exact \
         truth): bracket, gated, calibrated; then with the clock offset and drifting 100 ppm"
    );
    crate::ensure_lavapipe()?;
    let lavapipe = placement_runs(&["placement-vulkan", &seconds], &soft)?;
    let lavapipe_skewed = placement_runs(&["placement-vulkan", &seconds, "--skewed"], &soft)?;
    eprintln!(
        "xtask: CubeCL kernels through cubecl-wgpu on lavapipe, published and patched: each \
         window's placed ends against the exact clock (builds cubecl-wgpu twice the first time)"
    );
    let cubecl_wgpu = crate::cubecl::wgpu_comparison()?;
    eprintln!("xtask: answering windows: behind another window, and a thousand pending");
    let answering = probe(&["answer"], &soft)?;
    eprintln!(
        "xtask: a server timing every kernel: 10 000 chained windows of 50 µs, read 32 behind, \
         on 1, 2 and 8 streams and on two devices (simulated backend), two runs"
    );
    let every_kernel = probe_runs(&["every-kernel"], 2, &soft)?;
    eprintln!(
        "xtask: callgrind on the resolver thread: {PROFILED_WINDOWS} chained windows of \
         {PROFILED_KERNEL_US} µs on one stream, read 32 behind"
    );
    let resolver = resolver_profile(&soft)?;
    eprintln!(
        "xtask: never in the server's way: start() behind a 1 s kernel on a shared hardware \
         queue; 1000 GLOBAL-mode captures beside 8 profiling threads, CUDA and HIP"
    );
    let server_way = probe(&["server-way", "1000", "8"], &soft)?;
    eprintln!(
        "xtask: the anchor's gate on a shared hardware queue: 20 calibrations beside a user \
         stream queueing a 20 µs kernel every 20 µs, two runs"
    );
    let gate = probe_runs(&["gate", "20"], 2, &soft)?;
    eprintln!(
        "xtask: device 1's windows, read right after stop, while device 0 hangs behind a 2 s \
         kernel with a calibration pending, two runs"
    );
    let hung = probe_runs(&["hung-device", "200"], 2, &soft)?;
    eprintln!(
        "xtask: CubeCL's own profiler and fence (cubecl-server) beside ours: a 20 ms window's \
         first poll, and 200 windows' placement each, two runs"
    );
    let cubecl_side = probe_runs(&["cubecl-side", "200"], 2, &soft)?;
    eprintln!("xtask: a thread waiting 100 ms for a fence, spinning and blocking");
    let wait = probe(&["wait-cost"], &soft)?;

    let i = |case: &str| instr[case].as_f64().unwrap_or(f64::NAN);
    let c = |case: &str| calls[case].as_f64().unwrap_or(f64::NAN);
    let o = |case: &str| outside[case].as_f64().unwrap_or(f64::NAN);
    let side = |ours: f64, theirs: f64| json!({ "ours": ours, "cudarc": theirs, "ratio": ratio(ours, theirs) });
    let versus = |ours: &str, theirs: &str| {
        json!({
            "driver_calls": side(c(ours), c(theirs)),
            "instructions": side(i(ours), i(theirs)),
            "instructions_outside_the_driver": side(o(ours), o(theirs)),
            "wall_ns": walls[ours],
        })
    };
    // Submit and completion, added: the wall medians' sum has no per-round
    // spread of its own.
    let whole = |ours: [&str; 2], theirs: [&str; 2]| {
        let wall = |case: &str, key: &str| walls[case][key].as_f64().unwrap_or(f64::NAN);
        json!({
            "driver_calls": side(c(ours[0]) + c(ours[1]), c(theirs[0]) + c(theirs[1])),
            "instructions": side(i(ours[0]) + i(ours[1]), i(theirs[0]) + i(theirs[1])),
            "wall_ns": side(
                wall(ours[0], "ours_ns") + wall(ours[1], "ours_ns"),
                wall(ours[0], "cudarc_ns") + wall(ours[1], "cudarc_ns"),
            ),
        })
    };
    let mut scale = serde_json::Map::new();
    let mut per_window = Vec::new();
    for n in [1_000u64, 10_000, 100_000, 1_000_000] {
        let ns = wall(&format!("scale/windows/{n}"))? / n as f64;
        per_window.push(ns);
        scale.insert(
            n.to_string(),
            json!({
                "ns_per_window": ns,
                "open_bytes_per_window": memory[n.to_string()]["open_bytes_per_window"],
                "pending_bytes_per_window": memory[n.to_string()]["pending_bytes_per_window"],
            }),
        );
    }
    let mid = {
        let mut sorted = per_window.clone();
        sorted.sort_by(f64::total_cmp);
        (sorted[1] + sorted[2]) / 2.0
    };
    let spread = per_window
        .iter()
        .map(|ns| (ns / mid - 1.0).abs())
        .fold(0.0, f64::max);
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let report = json!({
        "source": format!(
            "one run of `cargo xtask bench`, on {cpus} CPUs (no GPU is used)"
        ),
        "date": date,
        "commit": commit,
        "method": {
            "wall_rounds": WALL_ROUNDS.parse::<u64>().ok(),
            "wall_batch": WALL_BATCH.parse::<u64>().ok(),
            "wall_runs": WALL_RUNS,
            "placement_seconds": PLACEMENT_SECONDS,
            "placement_runs": PLACEMENT_RUNS,
        },
        "core_null_backend": {
            "fence": { "instructions": i("null-fence") - i("null-nothing"), "allocations": allocations["fence"] },
            "pooled_fence": { "instructions": i("null-pooled-fence") - i("null-nothing"), "allocations": allocations["pooled_fence"] },
            "window": { "instructions": i("null-window") - i("null-nothing"), "allocations": allocations["window"] },
            "harness_instructions": i("null-nothing"),
            "note": "instructions: the case's minus the harness's own (a case that does nothing)",
            "targets": { "fence_allocations": 0, "pooled_fence_instructions": 150, "window_instructions": 800, "window_allocations": 1 },
        },
        "against_cudarc_on_the_software_driver": {
            "submit": {
                "plain_fence": versus("cuda-fence-submit", "cudarc-fence-submit"),
                "pooled_fence": versus("cuda-pooled-fence-submit", "cudarc-fence-submit"),
                "window": versus("cuda-window-submit", "cudarc-window-submit"),
                "chained_window": versus("cuda-chain-submit", "cudarc-chain-submit"),
            },
            "completion": {
                "plain_fence": versus("cuda-fence-complete", "cudarc-fence-complete"),
                "pooled_fence": versus("cuda-pooled-fence-complete", "cudarc-fence-complete"),
                "window": versus("cuda-window-complete", "cudarc-window-complete"),
            },
            "whole": {
                "plain_fence": whole(
                    ["cuda-fence-submit", "cuda-fence-complete"],
                    ["cudarc-fence-submit", "cudarc-fence-complete"],
                ),
                "pooled_fence": whole(
                    ["cuda-pooled-fence-submit", "cuda-pooled-fence-complete"],
                    ["cudarc-fence-submit", "cudarc-fence-complete"],
                ),
                "window": whole(
                    ["cuda-window-submit", "cuda-window-complete"],
                    ["cudarc-window-submit", "cudarc-window-complete"],
                ),
            },
            "note": "submit: the submitting thread alone (create, record, destroy, binding), no \
                     waits, the device busy with earlier work; completion: the waiting or \
                     reading thread, the device already past the work (a fence waited on and \
                     dropped, a window read); whole: the two added. Driver calls: the calling \
                     thread's. wall_ns: A/B interleaved rounds, the median of each side and of \
                     the per-round ratios, with the smallest and largest ratio, from the run \
                     whose ratio is the median of three; ratio_runs: each run's",
            "target_ratio": 0.5,
        },
        "scale": {
            "sizes": scale,
            "largest_deviation_from_median": spread,
            "target_deviation": 0.25,
            "allocator": "glibc, heap trimming off (MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_)",
        },
        "placement": {
            "software_driver": { "spinning": spinning, "blocking_sync": blocking },
            "pocl": { "blocking": pocl },
            "lavapipe": { "exact_clock": lavapipe, "offset_100_ppm": lavapipe_skewed },
            "cubecl_wgpu_lavapipe": cubecl_wgpu,
            "goals_us": { "median": 0.5, "p99": 2.0, "worst": 10.0 },
            "note": "each figure: the median of the runs, their spread (largest - smallest) and each run; \
                     error of both ends of every window against the driver's own truth, µs",
        },
        "answering": answering,
        "submit_profile": {
            "cases": submit_profiles,
            "pairs": PROFILED_SUBMITS.iter().map(|(ours, theirs)| json!([ours, theirs])).collect::<Vec<_>>(),
            "floor": PROFILE_FLOOR,
            "note": "callgrind, the submitting thread's instructions outside the driver per \
                     operation, by function of the probe's binary (the library, the harness, \
                     and what the compiler inlined into each), each function's own; the rest: \
                     smaller functions, and libc's allocator, copies and clock reads called \
                     from outside the driver",
        },
        "every_kernel": {
            "runs": every_kernel,
            "resolver_profile": resolver,
            "goals": { "cpu_share": 0.02, "late_p99_us": 1000.0,
                       "library_cpu_us_per_window": 1.0 },
            "note": "CPU of every thread but the reading one (the library's resolver and \
                     calibrators: the simulated backend has no threads), as a share of one core; \
                     devices_2: two simulated devices, a stream and a profiler each, so two \
                     calibrator threads; library_cpu_share: the library's threads alone, from \
                     the scheduler's statistics; library_wakeups_per_window and \
                     reader_wakeups_per_window: the context switches per window of the \
                     library's threads and of the reading thread, voluntary (a sleep or a \
                     blocked wait that ended: a wake-up) and involuntary, from /proc; \
                     library_cpu_us_per_window and resolver_cpu_us_per_window: the library's \
                     threads' on-CPU time, and the resolver's alone, per window read; \
                     resolver_profile: callgrind inside the resolver thread's body on a \
                     shorter case (its kernels long enough for a reader slowed by callgrind), \
                     per window read: instructions, system calls (futex and sched_yield, \
                     through libc), sched_yields, and asks of a window",
        },
        "against_cubecl_server": {
            "submit": {
                "fence": {
                    "driver_calls": json!({ "ours": c("cubecl-ours-fence-submit"), "cubecl_server": c("cubecl-server-fence-submit") }),
                    "instructions": json!({ "ours": i("cubecl-ours-fence-submit"), "cubecl_server": i("cubecl-server-fence-submit"), "ratio": ratio(i("cubecl-ours-fence-submit"), i("cubecl-server-fence-submit")) }),
                    "instructions_outside_the_driver": json!({ "ours": o("cubecl-ours-fence-submit"), "cubecl_server": o("cubecl-server-fence-submit"), "ratio": ratio(o("cubecl-ours-fence-submit"), o("cubecl-server-fence-submit")) }),
                },
                "window": {
                    "driver_calls": json!({ "ours": c("cubecl-ours-window-submit"), "cubecl_server": c("cubecl-server-window-submit") }),
                    "instructions": json!({ "ours": i("cubecl-ours-window-submit"), "cubecl_server": i("cubecl-server-window-submit"), "ratio": ratio(i("cubecl-ours-window-submit"), i("cubecl-server-window-submit")) }),
                    "instructions_outside_the_driver": json!({ "ours": o("cubecl-ours-window-submit"), "cubecl_server": o("cubecl-server-window-submit"), "ratio": ratio(o("cubecl-ours-window-submit"), o("cubecl-server-window-submit")) }),
                },
            },
            "runs": cubecl_side,
            "note": "cubecl-server 0.12.0-pre.1's EventProfiler and EventFence over an EventApi of \
                     the software driver's CUDA ABI (the bench's, as cubecl-cuda writes its own), \
                     beside device-events-cubecl's CubeProfiler and CubeFence: the submitting \
                     thread's driver calls and instructions, in all and outside the driver (the \
                     library's own and the harness's); the first poll of a window with 20 ms \
                     of work left (a blocking read takes that long); placement error of both \
                     ends of 200 windows each against the driver's truth, clock offset and \
                     drifting 100 ppm",
        },
        "server_way": server_way,
        "beside_a_hung_device": {
            "runs": hung,
            "goals_us": { "read_p99": 1000.0 },
            "note": "software driver, two devices: 200 empty windows on device 1, each read \
                     right after stop (the first waits for device 1's first anchor), while \
                     device 0's anchor stream waits behind a 2 s kernel with a calibration \
                     pending; and whether that calibration completes once the kernel is done",
        },
        "gate_on_a_shared_queue": {
            "runs": gate,
            "goals_us": { "closed_per_sample": 20.0, "user_delay_max": 20.0 },
            "note": "software driver, one hardware queue: how long each calibration sample's \
                     gate held the anchor's stream once reached (mean per sample, and the \
                     longest), and how long any user kernel queued behind it waited",
        },
        "wait_cost": wait,
    });
    let out = root().join(crate::docs::BENCH_JSON);
    std::fs::write(&out, serde_json::to_string_pretty(&report)? + "\n")?;
    print_table(&report);
    println!("\nwrote {}", out.display());
    crate::docs::docs(false)
}

/// Today's date on the UTC calendar, as `YYYY-MM-DD`.
fn today_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    civil_date(secs / 86_400)
}

/// The calendar date `days` days after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_date(days: u64) -> String {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The commit the bench measures, as `git` names it briefly, with a word
/// when the tree has changes not yet committed; `None` outside a checkout.
fn commit_measured() -> Option<String> {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"])?;
    let changed = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_none_or(|status| !status.is_empty());
    Some(if changed {
        format!("{commit} with uncommitted changes")
    } else {
        commit
    })
}

fn print_table(r: &Value) {
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let core = &r["core_null_backend"];
    println!(
        "\n{:<54} {:>14} {:>12} {:>10}",
        "measure", "value", "target", "met"
    );
    let row = |name: &str, value: f64, target: &str, met: bool| {
        println!(
            "{name:<54} {value:>14.2} {target:>12} {:>10}",
            if met { "yes" } else { "NO" }
        );
    };
    let fi = f(&core["fence"]["instructions"]);
    let fa = f(&core["fence"]["allocations"]);
    let wi = f(&core["window"]["instructions"]);
    let wa = f(&core["window"]["allocations"]);
    println!(
        "{:<54} {fi:>14.2} {:>12} {:>10}",
        "core: instructions per fence (null backend)", "", ""
    );
    row("core: allocations per fence", fa, "0", fa == 0.0);
    let pi = f(&core["pooled_fence"]["instructions"]);
    row(
        "core: instructions per pooled fence",
        pi,
        "<= 150",
        pi <= 150.0,
    );
    row("core: instructions per window", wi, "<= 800", wi <= 800.0);
    row("core: allocations per window", wa, "<= 1", wa <= 1.0);
    let vs = &r["against_cudarc_on_the_software_driver"];
    for (path, label) in [
        ("submit", "submit"),
        ("completion", "completion"),
        ("whole", "whole"),
    ] {
        for (case, name) in [
            ("plain_fence", "fence"),
            ("pooled_fence", "pooled fence"),
            ("window", "window"),
            ("chained_window", "chained window"),
        ] {
            let figures = &vs[path][case];
            if figures.is_null() {
                continue;
            }
            for (what, unit) in [
                ("driver_calls", "calls"),
                ("instructions", "instr"),
                ("wall_ns", "wall"),
            ] {
                let value = f(&figures[what]["ratio"]);
                let spread = if figures[what]["ratio_low"].is_number() {
                    format!(
                        " [{:.2}-{:.2}]",
                        f(&figures[what]["ratio_low"]),
                        f(&figures[what]["ratio_high"])
                    )
                } else {
                    String::new()
                };
                row(
                    &format!("{label}: {name} vs cudarc, {unit}{spread}"),
                    value,
                    "<= 0.50",
                    value <= 0.5,
                );
            }
        }
    }
    // The per-kernel server's goals: in all at most 0.7 of cudarc's, and
    // outside the driver no more than cudarc's.
    for (case, name) in [
        ("chained_window", "chained window"),
        ("plain_fence", "fence"),
    ] {
        let figures = &vs["submit"][case];
        let all = f(&figures["instructions"]["ratio"]);
        row(
            &format!("submit: {name} vs cudarc, instr in all"),
            all,
            "<= 0.70",
            all <= 0.7,
        );
        let beyond = &figures["instructions_outside_the_driver"];
        println!(
            "{:<54} {:>14} {:>12} {:>10}",
            format!("submit: {name}, instr outside the driver"),
            format!("{:.0} / {:.0}", f(&beyond["ours"]), f(&beyond["cudarc"])),
            "<= cudarc",
            if f(&beyond["ours"]) <= f(&beyond["cudarc"]) {
                "yes"
            } else {
                "NO"
            }
        );
    }
    let scale = &r["scale"];
    for (n, s) in scale["sizes"].as_object().into_iter().flatten() {
        println!(
            "{:<54} {:>14.1} {:>12} {:>10}",
            format!("scale: ns per window, {n} in flight"),
            f(&s["ns_per_window"]),
            "",
            ""
        );
        println!(
            "{:<54} {:>14.1} {:>12} {:>10}",
            format!("scale: bytes per open window, {n}"),
            f(&s["open_bytes_per_window"]),
            "",
            ""
        );
    }
    let spread = f(&scale["largest_deviation_from_median"]);
    row(
        "scale: largest deviation from the median",
        spread,
        "<= 0.25",
        spread <= 0.25,
    );
    println!(
        "\nplacement error, µs: median of {PLACEMENT_RUNS} runs (spread), goals median <= 0.5, \
         p99 <= 2, worst <= 10"
    );
    println!(
        "{:<54} {:>14} {:>14} {:>14} {:>14} {:>6}",
        "driver / wait / anchor / fit", "median", "p99", "worst", "bound median", "goals"
    );
    let drivers = [
        (
            "software driver / spinning",
            &r["placement"]["software_driver"]["spinning"],
        ),
        (
            "software driver / blocking",
            &r["placement"]["software_driver"]["blocking_sync"],
        ),
        ("PoCL / blocking", &r["placement"]["pocl"]["blocking"]),
        (
            "lavapipe / exact clock",
            &r["placement"]["lavapipe"]["exact_clock"],
        ),
        (
            "lavapipe / offset, 100 ppm",
            &r["placement"]["lavapipe"]["offset_100_ppm"],
        ),
    ];
    for (driver, p) in drivers {
        for (gating, fits) in p.as_object().into_iter().flatten() {
            for (fit, figures) in fits.as_object().into_iter().flatten() {
                let cell = |figure: &str| {
                    format!(
                        "{:.2} ({:.2})",
                        f(&figures[figure]["median"]),
                        f(&figures[figure]["spread"])
                    )
                };
                let met = f(&figures["median_us"]["median"]) <= 0.5
                    && f(&figures["p99_us"]["median"]) <= 2.0
                    && f(&figures["worst_us"]["median"]) <= 10.0;
                println!(
                    "{:<54} {:>14} {:>14} {:>14} {:>14} {:>6}",
                    format!("{driver} / {gating} / {fit}"),
                    cell("median_us"),
                    cell("p99_us"),
                    cell("worst_us"),
                    cell("bound_median_us"),
                    if met { "met" } else { "NOT" }
                );
            }
        }
    }
    println!(
        "the software driver's clock drifts 100 ppm: with the fit off, anchors stand alone at \
         rate 1 for a second, so drift dominates; PoCL's device is the CPU, its truth each \
         marker's CL_PROFILING_COMMAND_END (CLOCK_MONOTONIC_RAW) mapped to CLOCK_MONOTONIC; \
         lavapipe's device is the CPU, its truth each timestamp (CLOCK_MONOTONIC, exact); \
         driver_clock: the driver's pairing chooses the point inside a bracket, and the bound \
         is that point's distance to the bracket's farther edge"
    );
    for key in ["unpatched", "patched"] {
        let w = &r["placement"]["cubecl_wgpu_lavapipe"][key];
        println!(
            "{:<54} {:>14.2} {:>14.2} {:>14.2}",
            format!("cubecl-wgpu on lavapipe, {key}: error, µs"),
            f(&w["median_us"]),
            f(&w["p99_us"]),
            f(&w["worst_us"])
        );
    }
    let a = &r["answering"];
    let late_p99 = f(&a["head_of_line"]["late_p99_us"]);
    println!(
        "{:<54} {:>14.1} {:>12} {:>10}",
        "answer, behind a 1 s window: median late, µs",
        f(&a["head_of_line"]["late_median_us"]),
        "",
        ""
    );
    row(
        "answer, behind a 1 s window: p99 late, µs",
        late_p99,
        "<= 1000",
        late_p99 <= 1000.0,
    );
    let idle = f(&a["right_after_stop"]["late_median_us"]);
    row(
        "answer, read right after stop: median late, µs",
        idle,
        "<= 30",
        idle <= 30.0,
    );
    let share = f(&a["cpu_share_1000_pending"]);
    row(
        "answer: CPU, 1000 windows pending (cores)",
        share,
        "<= 0.05",
        share <= 0.05,
    );
    if let Some(runs) = r["every_kernel"]["runs"].as_array() {
        for streams in ["streams_1", "streams_2", "streams_8", "devices_2"] {
            // The worst of the runs.
            let worst = |key: &str| {
                runs.iter()
                    .map(|run| f(&run[streams][key]))
                    .fold(f64::NAN, f64::max)
            };
            let cpu_high = worst("cpu_share");
            row(
                &format!("every kernel, {streams}: CPU (cores), worst of runs"),
                cpu_high,
                "<= 0.02",
                cpu_high <= 0.02,
            );
            let per_window = worst("library_cpu_us_per_window");
            row(
                &format!("every kernel, {streams}: library CPU µs per window, worst"),
                per_window,
                "<= 1",
                per_window <= 1.0,
            );
            // Context switches per window, the worst of the runs: the
            // library's threads' (the resolver's sleeps, the calibrators'),
            // and the reading thread's (a blocked read woken).
            let switches = |who: &str| {
                runs.iter()
                    .map(|run| {
                        let w = &run[streams][who];
                        f(&w["voluntary"]) + f(&w["involuntary"])
                    })
                    .fold(f64::NAN, f64::max)
            };
            println!(
                "{:<54} {:>14} {:>12} {:>10}",
                format!("every kernel, {streams}: wake-ups per window, lib / reader"),
                format!(
                    "{:.2} / {:.2}",
                    switches("library_wakeups_per_window"),
                    switches("reader_wakeups_per_window")
                ),
                "",
                ""
            );
            let late_high = worst("late_p99_us");
            row(
                &format!("every kernel, {streams}: p99 late, µs, worst"),
                late_high,
                "<= 1000",
                late_high <= 1000.0,
            );
        }
    }
    let profile = &r["every_kernel"]["resolver_profile"];
    println!(
        "{:<54} {:>14} {:>12} {:>10}",
        "every kernel, callgrind: resolver instructions / window",
        format!("{:.0}", f(&profile["instructions_per_window"])),
        "",
        ""
    );
    println!(
        "{:<54} {:>14} {:>12} {:>10}",
        "every kernel, callgrind: resolver syscalls / window",
        format!("{:.2}", f(&profile["syscalls_per_window"])),
        "",
        ""
    );
    if let Some(runs) = r["beside_a_hung_device"]["runs"].as_array() {
        let worst = |key: &str| runs.iter().map(|run| f(&run[key])).fold(f64::NAN, f64::max);
        let p99 = worst("read_p99_us");
        row(
            "device 1 beside a hung device 0: read p99, µs, worst",
            p99,
            "<= 1000",
            p99 <= 1000.0,
        );
        let done = runs
            .iter()
            .all(|run| run["hung_devices_calibration_completed"].as_bool() == Some(true));
        println!(
            "{:<54} {:>14} {:>12} {:>10}",
            "device 0's calibration completes after the hang",
            done,
            "true",
            if done { "yes" } else { "NO" }
        );
    }
    if let Some(runs) = r["gate_on_a_shared_queue"]["runs"].as_array() {
        let worst = |key: &str| runs.iter().map(|run| f(&run[key])).fold(f64::NAN, f64::max);
        let closed = worst("closed_per_sample_us");
        row(
            "gate closed per sample, µs, worst of runs",
            closed,
            "<= 20",
            closed <= 20.0,
        );
        let delay = worst("user_delay_max_us");
        row(
            "user kernel behind the gate: longest delay, µs",
            delay,
            "<= 20",
            delay <= 20.0,
        );
    }
    let cs = &r["against_cubecl_server"];
    for what in ["fence", "window"] {
        let figures = &cs["submit"][what];
        println!(
            "{:<54} {:>14} {:>12} {:>10}",
            format!("vs cubecl-server: {what} submit, calls (ours / theirs)"),
            format!(
                "{:.1} / {:.1}",
                f(&figures["driver_calls"]["ours"]),
                f(&figures["driver_calls"]["cubecl_server"])
            ),
            "",
            ""
        );
        let ratio = f(&figures["instructions"]["ratio"]);
        row(
            &format!("vs cubecl-server: {what} submit, instr ratio"),
            ratio,
            "<= 1.00",
            ratio <= 1.0,
        );
        let beyond = &figures["instructions_outside_the_driver"];
        println!(
            "{:<54} {:>14} {:>12} {:>10}",
            format!("vs cubecl-server: {what} submit, instr outside the driver"),
            format!(
                "{:.0} / {:.0}",
                f(&beyond["ours"]),
                f(&beyond["cubecl_server"])
            ),
            "<= cubecl's",
            if f(&beyond["ours"]) <= f(&beyond["cubecl_server"]) {
                "yes"
            } else {
                "NO"
            }
        );
    }
    if let Some(runs) = cs["runs"].as_array() {
        for (side, name) in [
            ("cubecl_server", "cubecl-server"),
            ("device_events_cubecl", "ours"),
        ] {
            let worst = |key: &str| {
                runs.iter()
                    .map(|run| f(&run[side][key]))
                    .fold(f64::NAN, f64::max)
            };
            println!(
                "{:<54} {:>14.1} {:>12} {:>10}",
                format!("{name}: first poll of a 20 ms window, µs, worst"),
                worst("first_poll_of_a_20ms_window_us"),
                "",
                ""
            );
            println!(
                "{:<54} {:>14} {:>12} {:>10}",
                format!("{name}: placement median / p99, µs, worst run"),
                format!(
                    "{:.2} / {:.2}",
                    worst("placement_median_us"),
                    worst("placement_p99_us")
                ),
                "",
                ""
            );
        }
    }
    let sw = &r["server_way"];
    let start = f(&sw["start_behind_a_1s_kernel"]["p99_9_us"]);
    println!(
        "{:<54} {:>14.1} {:>12} {:>10}",
        "start() behind a 1 s kernel: median, µs",
        f(&sw["start_behind_a_1s_kernel"]["median_us"]),
        "",
        ""
    );
    row(
        "start() behind a 1 s kernel: p99.9, µs",
        start,
        "<= 50",
        start <= 50.0,
    );
    println!(
        "{:<54} {:>14.1} {:>12} {:>10}",
        "  a bare record beside it: p99.9, µs",
        f(&sw["start_behind_a_1s_kernel"]["bare_record_p99_9_us"]),
        "",
        ""
    );
    for abi in ["cuda", "hip"] {
        let c = &sw["global_captures"][abi];
        let ended = f(&c["captures_ended"]);
        let failed = f(&c["captures_failed"]) + f(&c["violations"]);
        row(
            &format!("GLOBAL captures beside 8 threads, {abi}: ended"),
            ended,
            "1000 of 1000",
            ended == 1000.0 && failed == 0.0,
        );
    }
    let w = &r["wait_cost"];
    for (key, label) in [
        ("soft_spin", "software driver, spinning"),
        ("soft_blocking", "software driver, blocking sync"),
        ("pocl", "PoCL (OpenCL waits block)"),
    ] {
        let (cpu, wall, late) = (
            f(&w[key]["cpu_ms"]),
            f(&w[key]["wall_ms"]),
            f(&w[key]["late_us"]),
        );
        println!(
            "{:<54} {:>14.2} {:>12} {:>10}",
            format!("wait, {label}: CPU / wall"),
            cpu / wall.max(1e-9),
            "",
            ""
        );
        println!(
            "{:<54} {:>14.1} {:>12} {:>10}",
            format!("wait, {label}: woke late, µs"),
            late,
            "",
            ""
        );
    }
}

#[cfg(test)]
mod tests {
    /// A call into the driver counts with all it costs, its own calls
    /// included; the caller's own lines and calls elsewhere do not.
    #[test]
    fn inside_the_driver_is_the_inclusive_cost_of_calls_into_it() {
        let text = "\
ob=(1) /bin/probe
fl=(1) ???
fn=(1) submit
0 100
cob=(2) /lib/libdevice_events_soft_driver.so
cfi=(2) ???
cfn=(2) cuEventRecord
calls=1 0
0 3000
cob=(3) /lib/libc.so.6
cfn=(3) malloc
calls=1 0
0 50
ob=(2)
fn=(2)
0 2900
cob=(3)
cfn=(3)
calls=1 0
0 100
";
        assert_eq!(super::inside_the_driver(text), 3000.0);
    }

    /// Calls to a function count wherever it is named: in full the first
    /// time, by id after that, as caller or callee.
    #[test]
    fn calls_to_a_function_count_by_its_name_or_its_id() {
        let text = "\
fn=(1) answer_windows
cfn=(2) syscall
calls=3 0
0 30
cfn=(3) clock_gettime
calls=5 0
0 50
fn=(2)
0 10
fn=(4) sleep
cfn=(2)
calls=2 0
0 20
";
        assert_eq!(super::calls_to(text, &|name| name == "syscall"), 5.0);
    }

    /// A function's own instructions: its lines, not what its calls
    /// cost, and only for functions of the probe's binary, named in full
    /// or by id.
    #[test]
    fn own_instructions_are_a_functions_lines_in_the_probes_binary() {
        let text = "\
ob=(1) /target/release/bench-probe
fl=(1) ???
fn=(1) submit
0 100
cob=(2) /lib/libdevice_events_soft_driver.so
cfn=(2) cuEventRecord
calls=1 0
0 3000
fn=(3) record
0 40
cfn=(1)
calls=1 0
0 100
fn=(1)
0 7
ob=(2)
fn=(2)
0 2900
";
        let own = super::own_instructions(text);
        assert_eq!(own.get("submit"), Some(&107.0));
        assert_eq!(own.get("record"), Some(&40.0));
        assert_eq!(own.get("cuEventRecord"), None);
    }

    /// A cost line's instructions are read where the header puts them:
    /// after each position column, at `Ir`'s place among the events.
    #[test]
    fn instructions_are_read_from_the_column_the_header_names() {
        let text = "\
positions: instr line
events: Dr Ir
ob=(1) /target/release/bench-probe
fn=(1) submit
0x10 3 7 100
";
        assert_eq!(super::own_instructions(text).get("submit"), Some(&100.0));
        let plain = "events: Ir\nob=(1) /target/release/bench-probe\nfn=(1) submit\n3 100\n";
        assert_eq!(super::own_instructions(plain).get("submit"), Some(&100.0));
    }

    #[test]
    fn a_days_count_is_its_calendar_date() {
        assert_eq!(super::civil_date(0), "1970-01-01");
        assert_eq!(super::civil_date(11_016), "2000-02-29");
        assert_eq!(super::civil_date(20_818), "2026-12-31");
    }
}
