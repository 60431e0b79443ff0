//! `cargo xtask docs`: the figures the README and `docs/` quote, generated
//! from the bench's committed JSON, and the docs' relative links.
//!
//! The docs' snippets are checked too (`snippets.rs`).
//!
//! Figures appear in the docs only where this writes them:
//! `docs/measurements.md` as a whole, and each `<!-- bench:NAME -->` …
//! `<!-- /bench -->` block of any other Markdown file. `--check` writes
//! nothing and fails where a file differs from what the JSON gives, where
//! a relative link names a file or a heading that does not exist, or where
//! the README outgrows its 10 KB guide or names a CubeCL other than the
//! one the workspace builds.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::root;

/// The bench's report, as `cargo xtask bench` writes it.
pub(crate) const BENCH_JSON: &str = "docs/bench.json";
/// The measurements page, generated whole from [`BENCH_JSON`].
const MEASUREMENTS: &str = "docs/measurements.md";

const OPEN: &str = "<!-- bench:";
const CLOSE: &str = "<!-- /bench -->";

/// Write (or with `check`, compare) every generated part of the docs, then
/// check the docs' relative links.
pub(crate) fn docs(check: bool) -> Result<()> {
    let json = root().join(BENCH_JSON);
    let report: Value = serde_json::from_slice(
        &std::fs::read(&json).with_context(|| format!("reading {}", json.display()))?,
    )
    .with_context(|| format!("{} is not JSON", json.display()))?;
    let files = markdown_files()?;
    let mut stale = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)?;
        let relative = file.strip_prefix(root()).unwrap_or(file);
        let wanted = if relative == Path::new(MEASUREMENTS) {
            measurements(&report)
        } else {
            fill_blocks(&text, &report).with_context(|| format!("in {}", relative.display()))?
        };
        if wanted != text {
            if check {
                stale.push(relative.display().to_string());
            } else {
                std::fs::write(file, &wanted)?;
                eprintln!("xtask: wrote {}", relative.display());
            }
        }
    }
    let linked = check_links(&files)
        .and_then(|()| crate::snippets::check(&files))
        .and_then(|()| check_readme());
    ensure!(
        stale.is_empty(),
        "generated figures differ from {BENCH_JSON} in {}: run `cargo xtask docs` (never edit \
         a generated block by hand){}",
        stale.join(", "),
        linked
            .as_ref()
            .err()
            .map_or_else(String::new, |err| format!("; and {err:#}"))
    );
    linked?;
    eprintln!(
        "xtask: docs: {} Markdown files, generated figures match {BENCH_JSON}, links resolve, \
         Rust snippets compiled by {}",
        files.len(),
        crate::snippets::SNIPPETS_CRATE
    );
    Ok(())
}

/// The project's Markdown files, build output and fetched tools aside.
fn markdown_files() -> Result<Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') && name != ".github" || name == "target" {
                continue;
            }
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                walk(&path, out)?;
            } else if name.ends_with(".md") {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(&root(), &mut files)?;
    files.sort();
    Ok(files)
}

/// `text` with each generated block's body replaced by what `report` gives.
/// A block opens with a line that is `<!-- bench:NAME -->` and closes with
/// a line that is `<!-- /bench -->`; a marker quoted inside a line is prose.
fn fill_blocks(text: &str, report: &Value) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut open: Option<&str> = None;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end();
        match open {
            None => {
                out.push_str(line);
                if let Some(name) = bare
                    .strip_prefix(OPEN)
                    .and_then(|rest| rest.strip_suffix("-->"))
                {
                    let name = name.trim();
                    let Some(body) = block(name, report) else {
                        bail!("no generated block is called `{name}`");
                    };
                    if !line.ends_with('\n') {
                        out.push('\n');
                    }
                    out.push_str(&body);
                    open = Some(name);
                }
            }
            Some(_) if bare == CLOSE => {
                out.push_str(line);
                open = None;
            }
            Some(_) => {}
        }
    }
    if let Some(name) = open {
        bail!("block `{name}` has no `{CLOSE}` line");
    }
    Ok(out)
}

/// The generated block `name`, ending in a newline.
fn block(name: &str, r: &Value) -> Option<String> {
    Some(match name {
        "source" => format!("{}\n", source(r)),
        "beside-cubecl" => beside_cubecl(r),
        "placement" => placement(r),
        _ => return None,
    })
}

/// A number with `digits` decimals; a dash where the report has none.
fn num(v: &Value, digits: usize) -> String {
    v.as_f64()
        .filter(|x| x.is_finite())
        .map_or_else(|| "—".to_owned(), |x| format!("{x:.digits$}"))
}

/// A share of one core, as a percentage.
fn percent(v: &Value) -> String {
    v.as_f64()
        .filter(|x| x.is_finite())
        .map_or_else(|| "—".to_owned(), |x| format!("{:.1} %", x * 100.0))
}

/// Each run's value of `key`, joined; a dash where the report has none.
fn each_run(runs: &Value, key: impl Fn(&Value) -> &Value, digits: usize) -> String {
    each_run_shown(runs, |run| num(key(run), digits))
}

/// Each run as `show` writes it, joined; a dash where the report has none.
fn each_run_shown(runs: &Value, show: impl Fn(&Value) -> String) -> String {
    match runs.as_array() {
        Some(runs) if !runs.is_empty() => runs.iter().map(show).collect::<Vec<_>>().join(", "),
        _ => "—".to_owned(),
    }
}

/// A note of the report as a sentence (capitalised, full stop), followed
/// by a space; nothing where the report has none.
fn sentence(note: &Value) -> String {
    let Some(note) = note.as_str().map(str::trim).filter(|n| !n.is_empty()) else {
        return String::new();
    };
    let stop = if note.ends_with('.') { "" } else { "." };
    // A name (`cubecl-server`, `wall_ns`) keeps its case.
    let first_word = note.split_whitespace().next().unwrap_or("");
    if first_word.contains(['-', '_']) {
        return format!("{note}{stop} ");
    }
    let mut chars = note.chars();
    let first = chars.next().map(|c| c.to_uppercase().collect::<String>());
    format!("{}{}{stop} ", first.unwrap_or_default(), chars.as_str())
}

/// Where the report comes from, when and from which commit, in a
/// sentence. A report from before the bench recorded its date and commit
/// says so: they are not guessed from the history, whose commit that adds
/// the report is made after the docs are generated from it.
fn source(r: &Value) -> String {
    let source = r["source"]
        .as_str()
        .unwrap_or("not stated in `docs/bench.json`");
    let when = match (r["date"].as_str(), r["commit"].as_str()) {
        (Some(date), Some(commit)) => format!("{date}, at commit {commit}"),
        (Some(date), None) => format!("{date}, commit not recorded"),
        (None, Some(commit)) => format!("at commit {commit}, date not recorded"),
        (None, None) => "date and commit not recorded".to_owned(),
    };
    format!("Source of these figures: {source}; {when}.")
}

/// The measurements page: every figure of the report, with what it measures.
fn measurements(r: &Value) -> String {
    let mut page = String::from(
        "# Measurements\n\n\
         <!-- Generated by `cargo xtask bench` (and `cargo xtask docs`) from `docs/bench.json`: \
         do not edit. -->\n\n",
    );
    page.push_str(&source(r));
    page.push_str(
        " No GPU has run these: they come from the software driver (the CUDA and HIP ABIs \
         on the CPU), a simulated backend and PoCL's CPU device, so every figure is a count, a \
         ratio, or a time on the host's clock; a GPU's launch latency, interrupt wake-ups and \
         clock drift are not in them. A dash is a figure the report does not hold. What each \
         probe does is in `crates/device-events-bench` and `xtask/src/bench.rs`.\n\n",
    );
    for section in [
        core_cost(r),
        against_cudarc(r),
        format!(
            "## Beside CubeCL's own `device_events`\n\n{}\n\n{}",
            sentence(&r["against_cubecl_server"]["note"]).trim_end(),
            beside_cubecl(r)
        ),
        submit_profile(r),
        scale(r),
        format!("## Placement on the host clock\n\n{}", placement(r)),
        answering(r),
        server_way(r),
        wait_cost(r),
    ]
    .into_iter()
    .filter(|section| !section.is_empty())
    {
        page.push_str(&section);
        page.push('\n');
    }
    page.truncate(page.trim_end().len());
    page.push('\n');
    page
}

fn core_cost(r: &Value) -> String {
    let core = &r["core_null_backend"];
    let targets = &core["targets"];
    let mut s = format!(
        "## The core's own cost\n\n\
         On a backend whose calls do nothing: instructions counted by callgrind inside the \
         operation alone, net of the harness's own ({} per operation), and allocations by a \
         counting allocator; a profiler in its steady state (its anchor fresh).\n\n\
         | operation | instructions | allocations | target |\n| --- | --- | --- | --- |\n",
        num(&core["harness_instructions"], 0)
    );
    for (key, name, target) in [
        (
            "fence",
            "fence",
            format!("{} allocations", num(&targets["fence_allocations"], 0)),
        ),
        (
            "pooled_fence",
            "pooled fence",
            format!(
                "≤ {} instructions",
                num(&targets["pooled_fence_instructions"], 0)
            ),
        ),
        (
            "window",
            "window",
            format!(
                "≤ {} instructions, ≤ {} allocation",
                num(&targets["window_instructions"], 0),
                num(&targets["window_allocations"], 0)
            ),
        ),
    ] {
        s.push_str(&format!(
            "| {name} | {} | {} | {target} |\n",
            num(&core[key]["instructions"], 0),
            num(&core[key]["allocations"], 2)
        ));
    }
    s
}

fn against_cudarc(r: &Value) -> String {
    let vs = &r["against_cudarc_on_the_software_driver"];
    let m = &r["method"];
    let mut s = format!(
        "## Against cudarc's safe API, on the software driver\n\n\
         {}Wall time: {} interleaved rounds of {} operations, in {} runs, each its own \
         process. Ratios are ours over cudarc's; the target is ≤ {} for each.\n\n\
         | path | case | driver calls, ours / cudarc | instructions, ours / cudarc (ratio) | \
         outside the driver, ours / cudarc | wall ratio [lowest–highest round] (each run) |\n\
         | --- | --- | --- | --- | --- | --- |\n",
        sentence(&vs["note"]),
        num(&m["wall_rounds"], 0),
        num(&m["wall_batch"], 0),
        num(&m["wall_runs"], 0),
        num(&vs["target_ratio"], 2),
    );
    for path in ["submit", "completion", "whole"] {
        for (case, name) in [
            ("plain_fence", "fence"),
            ("pooled_fence", "pooled fence"),
            ("window", "window"),
            ("chained_window", "chained window"),
        ] {
            let f = &vs[path][case];
            if f.is_null() {
                continue;
            }
            let pair = |v: &Value, digits| {
                format!(
                    "{} / {}",
                    num(&v["ours"], digits),
                    num(&v["cudarc"], digits)
                )
            };
            let outside = if f["instructions_outside_the_driver"].is_null() {
                "—".to_owned()
            } else {
                pair(&f["instructions_outside_the_driver"], 0)
            };
            let wall = &f["wall_ns"];
            let spread = if wall["ratio_low"].is_null() {
                String::new()
            } else {
                format!(
                    " [{}–{}]",
                    num(&wall["ratio_low"], 2),
                    num(&wall["ratio_high"], 2)
                )
            };
            let runs = if wall["ratio_runs"].is_null() {
                String::new()
            } else {
                format!(" ({})", each_run(&wall["ratio_runs"], |v| v, 2))
            };
            s.push_str(&format!(
                "| {path} | {name} | {} | {} ({}) | {outside} | {}{spread}{runs} |\n",
                pair(&f["driver_calls"], 1),
                pair(&f["instructions"], 0),
                num(&f["instructions"]["ratio"], 2),
                num(&wall["ratio"], 2),
            ));
        }
    }
    s
}

/// CubeCL's own profiler and fence beside device-events-cubecl's, as rows
/// of a table.
fn beside_cubecl(r: &Value) -> String {
    let cs = &r["against_cubecl_server"];
    let mut s = String::from(
        "| on the software driver's CUDA ABI | CubeCL's `device_events` | device-events |\n\
         | --- | --- | --- |\n",
    );
    for (what, name) in [("fence", "a fence"), ("window", "a window")] {
        let f = &cs["submit"][what];
        s.push_str(&format!(
            "| driver calls to submit {name} | {} | {} |\n",
            num(&f["driver_calls"]["cubecl_server"], 1),
            num(&f["driver_calls"]["ours"], 1)
        ));
        s.push_str(&format!(
            "| instructions to submit {name} | {} | {} ({} of CubeCL's) |\n",
            num(&f["instructions"]["cubecl_server"], 0),
            num(&f["instructions"]["ours"], 0),
            num(&f["instructions"]["ratio"], 2)
        ));
        let beyond = &f["instructions_outside_the_driver"];
        s.push_str(&format!(
            "| of them outside the driver | {} | {} ({} of CubeCL's) |\n",
            num(&beyond["cubecl_server"], 0),
            num(&beyond["ours"], 0),
            num(&beyond["ratio"], 2)
        ));
    }
    let runs = &cs["runs"];
    for (key, name, digits) in [
        (
            "first_poll_of_a_20ms_window_us",
            "first poll of a window with 20 ms of work left, µs (each run)",
            1,
        ),
        (
            "placement_median_us",
            "placement error, median, µs (each run)",
            2,
        ),
        ("placement_p99_us", "placement error, p99, µs (each run)", 2),
    ] {
        s.push_str(&format!(
            "| {name} | {} | {} |\n",
            each_run(runs, |run| &run["cubecl_server"][key], digits),
            each_run(runs, |run| &run["device_events_cubecl"][key], digits)
        ));
    }
    s
}

/// The submitting thread's instructions outside the driver, by function:
/// what each remaining instruction buys. Empty for a report from before
/// they were profiled.
fn submit_profile(r: &Value) -> String {
    let p = &r["submit_profile"];
    let Some(pairs) = p["pairs"].as_array() else {
        return String::new();
    };
    fn label(case: &str) -> &str {
        match case {
            "cuda-chain-submit" => "a chained window, ours",
            "cudarc-chain-submit" => "a chained window, cudarc's",
            "cubecl-ours-fence-submit" => "a CubeCL fence, ours (`CubeFence`)",
            "cubecl-server-fence-submit" => "a CubeCL fence, CubeCL's own",
            "cubecl-ours-window-submit" => "a CubeCL window, ours (`CubeProfiler`)",
            "cubecl-server-window-submit" => "a CubeCL window, CubeCL's own",
            other => other,
        }
    }
    let mut s = format!(
        "## Where the submitting thread's instructions go\n\n{}\n\n\
         | submitting | function (its own instructions, with what was inlined into it) | \
         instructions per operation |\n| --- | --- | --- |\n",
        sentence(&p["note"]).trim_end()
    );
    for case in pairs.iter().filter_map(Value::as_array).flatten() {
        let Some(case) = case.as_str() else { continue };
        let profile = &p["cases"][case];
        for f in profile["functions"].as_array().into_iter().flatten() {
            s.push_str(&format!(
                "| {} | `{}` | {} |\n",
                label(case),
                f["function"].as_str().unwrap_or("?").replace('|', "\\|"),
                num(&f["instructions"], 0)
            ));
        }
        s.push_str(&format!(
            "| {} | the rest (functions under {} each, libc) | {} |\n",
            label(case),
            num(&p["floor"], 0),
            num(&profile["rest"], 0)
        ));
    }
    s
}

fn scale(r: &Value) -> String {
    let sc = &r["scale"];
    let mut s = format!(
        "## Windows in flight\n\n\
         Time and memory per window with up to a million in flight (null backend; allocator: \
         {}).\n\n\
         | windows in flight | ns per window | bytes per open window | bytes per pending window |\n\
         | --- | --- | --- | --- |\n",
        sc["allocator"].as_str().unwrap_or("—")
    );
    for n in ["1000", "10000", "100000", "1000000"] {
        let size = &sc["sizes"][n];
        s.push_str(&format!(
            "| {n} | {} | {} | {} |\n",
            num(&size["ns_per_window"], 1),
            num(&size["open_bytes_per_window"], 1),
            num(&size["pending_bytes_per_window"], 1)
        ));
    }
    s.push_str(&format!(
        "\nLargest deviation of a size's time per window from their median: {} (target ≤ {}).\n",
        num(&sc["largest_deviation_from_median"], 2),
        num(&sc["target_deviation"], 2)
    ));
    s
}

/// The placement table: every driver, wait, anchor and fit.
fn placement(r: &Value) -> String {
    let p = &r["placement"];
    let goals = &p["goals_us"];
    let m = &r["method"];
    let mut s = format!(
        "Error of both ends of every window against the driver's own truth, µs: the median of \
         {} runs of {} s sessions, their spread in brackets; beside it, the median of the bound \
         each window stated (how tight the promise is, not just how good the luck was; — for \
         runs recorded before it was kept). Goals: median ≤ {}, p99 ≤ {}, worst ≤ {}.\n\n\
         | driver, wait | anchor | fit | median | p99 | worst | bound median | goals |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        num(&m["placement_runs"], 0),
        num(&m["placement_seconds"], 0),
        num(&goals["median"], 1),
        num(&goals["p99"], 1),
        num(&goals["worst"], 1),
    );
    for (driver, settings) in [
        (
            "software driver, spinning",
            &p["software_driver"]["spinning"],
        ),
        (
            "software driver, blocking sync",
            &p["software_driver"]["blocking_sync"],
        ),
        ("PoCL", &p["pocl"]["blocking"]),
        (
            "lavapipe (Vulkan), exact clock",
            &p["lavapipe"]["exact_clock"],
        ),
        (
            "lavapipe (Vulkan), offset and 100 ppm laid over",
            &p["lavapipe"]["offset_100_ppm"],
        ),
    ] {
        for (anchor, name) in [
            ("driver_clock", "driver clock"),
            ("gated", "gated"),
            ("ungated", "ungated"),
        ] {
            for (fit, fit_name) in [("fit_on", "on"), ("fit_off", "off")] {
                let f = &settings[anchor][fit];
                if f.is_null() {
                    continue;
                }
                let cell = |figure: &str| {
                    if f[figure].is_null() {
                        return "—".to_owned();
                    }
                    format!(
                        "{} ({})",
                        num(&f[figure]["median"], 2),
                        num(&f[figure]["spread"], 2)
                    )
                };
                let met = |figure: &str, goal: &str| {
                    f[figure]["median"]
                        .as_f64()
                        .zip(goals[goal].as_f64())
                        .map(|(v, g)| v <= g)
                };
                let goals_met = match (
                    met("median_us", "median"),
                    met("p99_us", "p99"),
                    met("worst_us", "worst"),
                ) {
                    (Some(a), Some(b), Some(c)) if a && b && c => "met",
                    (Some(_), Some(_), Some(_)) => "not met",
                    _ => "—",
                };
                s.push_str(&format!(
                    "| {driver} | {name} | {fit_name} | {} | {} | {} | {} | {goals_met} |\n",
                    cell("median_us"),
                    cell("p99_us"),
                    cell("worst_us"),
                    cell("bound_median_us")
                ));
            }
        }
    }
    let w = &p["cubecl_wgpu_lavapipe"];
    if !w.is_null() {
        s.push_str(&format!(
            "\nCubeCL kernels through cubecl-wgpu {} on lavapipe, each window's placed \
             start and end against lavapipe's exact clock, µs (one run of {} windows; \
             `ci/cubecl/wgpu-check`). Published, a window's position has no anchor: the \
             figure is how far its start lies outside the host interval that holds the truth, \
             a lower bound on its error.\n\n\
             | cubecl-wgpu | median | p99 | worst | ends outside their bound |\n\
             | --- | --- | --- | --- | --- |\n",
            crate::cubecl::VERSION,
            num(&w["patched"]["windows"], 0)
        ));
        for (key, name) in [
            ("unpatched", "published"),
            ("patched", "placed by device-events"),
        ] {
            let f = &w[key];
            let outside = if f["outside_bound"].is_null() {
                "—".to_owned()
            } else {
                num(&f["outside_bound"], 0)
            };
            s.push_str(&format!(
                "| {name} | {} | {} | {} | {outside} |\n",
                num(&f["median_us"], 2),
                num(&f["p99_us"], 2),
                num(&f["worst_us"], 2)
            ));
        }
    }
    s
}

fn answering(r: &Value) -> String {
    let a = &r["answering"];
    let ek = &r["every_kernel"];
    let mut s = format!(
        "## Answering windows\n\n\
         How late after its end the resolver thread answers a window, on the software driver, \
         and what the library's threads cost.\n\n\
         | measure | value |\n| --- | --- |\n\
         | a window read right after `stop`: median late, µs | {} |\n\
         | 100 windows 1 ms apart behind one pending for a second: median / p99 late, µs | {} / {} |\n\
         | CPU with a thousand windows pending on one stream, share of a core | {} |\n\n\
         A server timing every kernel: 10 000 chained windows of 50 µs, each read 32 behind \
         (simulated backend). {}Goals: CPU ≤ {} of a core, p99 late ≤ {} µs.\n\n\
         | streams | CPU, share of a core (each run) | library's CPU, µs per window (each run) | wake-ups per window, library's threads / reader (each run) | median late, µs (each run) | p99 late, µs (each run) |\n\
         | --- | --- | --- | --- | --- | --- |\n",
        num(&a["right_after_stop"]["late_median_us"], 1),
        num(&a["head_of_line"]["late_median_us"], 1),
        num(&a["head_of_line"]["late_p99_us"], 1),
        percent(&a["cpu_share_1000_pending"]),
        sentence(&ek["note"]),
        percent(&ek["goals"]["cpu_share"]),
        num(&ek["goals"]["late_p99_us"], 0),
    );
    for (streams, key) in [
        ("1", "streams_1"),
        ("2", "streams_2"),
        ("8", "streams_8"),
        ("2, on two devices", "devices_2"),
    ] {
        let runs = &ek["runs"];
        let cpu = match runs.as_array() {
            Some(list) if !list.is_empty() => list
                .iter()
                .map(|run| percent(&run[key]["cpu_share"]))
                .collect::<Vec<_>>()
                .join(", "),
            _ => "—".to_owned(),
        };
        let wakeups = match runs.as_array() {
            Some(list) if !list.is_empty() => list
                .iter()
                .map(|run| {
                    let of = |who: &str| {
                        let w = &run[key][who];
                        match (w["voluntary"].as_f64(), w["involuntary"].as_f64()) {
                            (Some(v), Some(i)) => format!("{:.2}", v + i),
                            _ => "—".to_owned(),
                        }
                    };
                    format!(
                        "{} / {}",
                        of("library_wakeups_per_window"),
                        of("reader_wakeups_per_window")
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
            _ => "—".to_owned(),
        };
        s.push_str(&format!(
            "| {streams} | {cpu} | {} | {wakeups} | {} | {} |\n",
            each_run(runs, |run| &run[key]["library_cpu_us_per_window"], 2),
            each_run(runs, |run| &run[key]["late_median_us"], 1),
            each_run(runs, |run| &run[key]["late_p99_us"], 1),
        ));
    }
    let profile = &ek["resolver_profile"];
    s.push_str(&format!(
        "\nThe resolver thread's work per window read, counted by callgrind inside its body \
         ({} windows of {} µs on one stream, read 32 behind: kernels long enough for a reader \
         slowed by callgrind): {} instructions, {} system calls (futex and `sched_yield`, \
         {} of them yields), {} asks of a window.\n",
        num(&profile["windows"], 0),
        num(&profile["kernel_us"], 0),
        num(&profile["instructions_per_window"], 0),
        num(&profile["syscalls_per_window"], 2),
        num(&profile["sched_yields_per_window"], 2),
        num(&profile["asks_per_window"], 2),
    ));
    let floor = |run: &Value| -> Value {
        let pass = &run["wake_floor"];
        match (pass["cpu_us_per_pass"].as_f64(), pass["pace_us"].as_f64()) {
            (Some(cpu), Some(pace)) if pace > 0.0 => Value::from(cpu / pace),
            _ => Value::Null,
        }
    };
    let runs = &ek["runs"];
    // A report from before the floor was measured says nothing of it.
    let measured = runs
        .as_array()
        .is_some_and(|list| list.iter().any(|run| run["wake_floor"].is_object()));
    if !measured {
        return s;
    }
    let shares = each_run_shown(runs, |run| percent(&floor(run)));
    s.push_str(&format!(
        "\nWhat a pass costs the OS before any of the library's work: a bare thread that sleeps \
         {} µs (a timed condvar wait, as the resolver does between asks) and then wakes another \
         blocked on a condvar (as an answer wakes its reader) spends {} µs of CPU per pass \
         (each run): {} of a core at that pace. The library's CPU per window cannot go below \
         that per pass divided by the windows each pass answers.\n",
        each_run(runs, |run| &run["wake_floor"]["pace_us"], 0),
        each_run(runs, |run| &run["wake_floor"]["cpu_us_per_pass"], 1),
        shares,
    ));
    s
}

fn server_way(r: &Value) -> String {
    let sw = &r["server_way"];
    let start = &sw["start_behind_a_1s_kernel"];
    let caps = &sw["global_captures"];
    let hung = &r["beside_a_hung_device"];
    let gate = &r["gate_on_a_shared_queue"];
    let mut s = format!(
        "## Never in the server's way\n\n\
         | measure | value |\n| --- | --- |\n\
         | `start()` behind a 1 s kernel on a shared hardware queue: median / p99.9 / max, µs | {} / {} / {} |\n\
         | a bare `cuEventRecord` beside it: median / p99.9, µs | {} / {} |\n",
        num(&start["median_us"], 1),
        num(&start["p99_9_us"], 1),
        num(&start["max_us"], 1),
        num(&start["bare_record_median_us"], 1),
        num(&start["bare_record_p99_9_us"], 1),
    );
    for abi in ["cuda", "hip"] {
        let c = &caps[abi];
        s.push_str(&format!(
            "| GLOBAL-mode captures beside {} profiling threads, {abi}: ended / failed / refused calls | {} / {} / {} |\n",
            num(&caps["threads"], 0),
            num(&c["captures_ended"], 0),
            num(&c["captures_failed"], 0),
            num(&c["violations"], 0),
        ));
    }
    s.push_str(&format!(
        "\n**Beside a hung device.** {}Goal: read p99 ≤ {} µs.\n\n\
         | run | read median, µs | read p99, µs | read worst, µs | device 0's calibration completed |\n\
         | --- | --- | --- | --- | --- |\n",
        sentence(&hung["note"]),
        num(&hung["goals_us"]["read_p99"], 0),
    ));
    for (i, run) in hung["runs"].as_array().into_iter().flatten().enumerate() {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            i + 1,
            num(&run["read_median_us"], 1),
            num(&run["read_p99_us"], 1),
            num(&run["read_worst_us"], 1),
            run["hung_devices_calibration_completed"]
                .as_bool()
                .map_or("—", |done| if done { "yes" } else { "no" }),
        ));
    }
    s.push_str(&format!(
        "\n**The anchor's gate.** {}Goals: closed ≤ {} µs per sample, a user kernel delayed ≤ {} µs.\n\n\
         | run | closed per sample, µs | closed at most, µs | user delay per sample, µs | user delay at most, µs |\n\
         | --- | --- | --- | --- | --- |\n",
        sentence(&gate["note"]),
        num(&gate["goals_us"]["closed_per_sample"], 0),
        num(&gate["goals_us"]["user_delay_max"], 0),
    ));
    for (i, run) in gate["runs"].as_array().into_iter().flatten().enumerate() {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            i + 1,
            num(&run["closed_per_sample_us"], 1),
            num(&run["closed_max_us"], 1),
            num(&run["user_delay_per_sample_us"], 1),
            num(&run["user_delay_max_us"], 1),
        ));
    }
    s
}

fn wait_cost(r: &Value) -> String {
    let w = &r["wait_cost"];
    let mut s = String::from(
        "## A thread waiting 100 ms for a fence\n\n\
         | waiter | CPU time over wall time | woke late, µs |\n| --- | --- | --- |\n",
    );
    for (key, name) in [
        ("soft_spin", "software driver, spinning"),
        ("soft_blocking", "software driver, blocking sync"),
        ("pocl", "PoCL (OpenCL waits sleep)"),
    ] {
        let share = match (w[key]["cpu_ms"].as_f64(), w[key]["wall_ms"].as_f64()) {
            (Some(cpu), Some(wall)) if wall > 0.0 => format!("{:.2}", cpu / wall),
            _ => "—".to_owned(),
        };
        s.push_str(&format!(
            "| {name} | {share} | {} |\n",
            num(&w[key]["late_us"], 1)
        ));
    }
    s
}

/// Every relative link in `files` names a file or folder that exists, and
/// a `#heading` of a Markdown file that it has; links into code blocks and
/// inline code are not links.
fn check_links(files: &[PathBuf]) -> Result<()> {
    let mut anchors: BTreeMap<PathBuf, HashSet<String>> = BTreeMap::new();
    let mut broken = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file)?;
        let dir = file.parent().unwrap_or(Path::new("."));
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let linked = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            let relative = file.strip_prefix(root()).unwrap_or(file).display();
            if !linked.exists() {
                broken.push(format!("{relative}: `{target}`: no such file"));
                continue;
            }
            let is_markdown = linked.extension().is_some_and(|e| e == "md");
            if anchor.is_empty() || !is_markdown {
                continue;
            }
            let key = linked.canonicalize().unwrap_or(linked.clone());
            if !anchors.contains_key(&key) {
                let headings = heading_anchors(&std::fs::read_to_string(&linked)?);
                anchors.insert(key.clone(), headings);
            }
            if !anchors.get(&key).is_some_and(|set| set.contains(anchor)) {
                broken.push(format!("{relative}: `{target}`: no such heading"));
            }
        }
    }
    ensure!(
        broken.is_empty(),
        "broken links in the docs:\n{}",
        broken.join("\n")
    );
    Ok(())
}

/// Lines of `text` outside fenced code blocks, with inline code removed.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut kept = String::with_capacity(line.len());
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                kept.push_str(part);
            }
        }
        lines.push(kept);
    }
    lines
}

/// The targets of `[text](target)` links and `[label]: target` definitions.
fn links(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(text) {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[')
            && let Some((_, target)) = trimmed.split_once("]: ")
        {
            targets.push(target.trim().to_owned());
            continue;
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            targets.push(target.to_owned());
            rest = &after[end..];
        }
    }
    targets
}

/// The anchors GitHub gives a Markdown file's headings: lower case,
/// punctuation dropped, spaces as hyphens, a repeat numbered.
fn heading_anchors(text: &str) -> HashSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let slug: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                '-' | '_' => Some(c),
                c if c.is_alphanumeric() => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        let anchor = if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        };
        *n += 1;
        anchors.insert(anchor);
    }
    anchors
}

/// The README's longest, in bytes: a guide (what it is, how to try it, how
/// to add it to a CubeCL server, the crates, the status), the rest in
/// `docs/`.
const README_LIMIT: usize = 10_000;

/// The README: within [`README_LIMIT`], and CubeCL named at the version
/// the workspace builds.
fn check_readme() -> Result<()> {
    let readme = std::fs::read_to_string(root().join("README.md"))?;
    let manifest = std::fs::read_to_string(root().join("Cargo.toml"))?;
    let mut faults = cubecl_versions(&readme, &manifest);
    if readme.len() > README_LIMIT {
        faults.push(format!(
            "{} bytes, over the guide's {README_LIMIT}: move the rest into docs/",
            readme.len()
        ));
    }
    ensure!(faults.is_empty(), "README.md: {}", faults.join("; "));
    Ok(())
}

/// Where a line of `text` that names CubeCL gives its version as other
/// than the workspace's `manifest` pins it (`cubecl-runtime`'s version):
/// `0.12` where the workspace builds `0.12.0-pre.1`, say. Each fault in a
/// line.
fn cubecl_versions(text: &str, manifest: &str) -> Vec<String> {
    let Some(pinned) = manifest
        .lines()
        .find(|line| line.starts_with("cubecl-runtime"))
        .and_then(|line| line.split("version = \"").nth(1))
        .and_then(|rest| rest.split('"').next())
    else {
        return vec!["the workspace's Cargo.toml pins no cubecl-runtime version".to_owned()];
    };
    let short: String = pinned.split('.').take(2).collect::<Vec<_>>().join(".");
    let mut faults = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if !line.to_lowercase().contains("cubecl") {
            continue;
        }
        for (at, _) in line.match_indices(&short) {
            let before = line[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_digit() || c == '.') {
                continue;
            }
            if !line[at..].starts_with(pinned) {
                faults.push(format!(
                    "line {}: CubeCL {short} where the workspace builds {pinned}",
                    index + 1
                ));
            }
        }
    }
    faults
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_block_is_filled_from_the_report_and_the_rest_kept() {
        let report = json!({ "source": "a test" });
        let text = "before\n<!-- bench:source -->\nstale\n<!-- /bench -->\nafter\n";
        assert_eq!(
            fill_blocks(text, &report).unwrap(),
            "before\n<!-- bench:source -->\nSource of these figures: a test; date and commit not \
             recorded.\n<!-- /bench -->\nafter\n"
        );
    }

    #[test]
    fn the_source_line_names_the_runs_date_and_commit() {
        let report = json!({ "source": "a run", "date": "2026-12-06", "commit": "7f5c865" });
        assert_eq!(
            source(&report),
            "Source of these figures: a run; 2026-12-06, at commit 7f5c865."
        );
    }

    #[test]
    fn a_report_without_date_or_commit_says_they_are_not_recorded() {
        assert_eq!(
            source(&json!({ "source": "a run" })),
            "Source of these figures: a run; date and commit not recorded."
        );
    }

    #[test]
    fn filling_twice_changes_nothing() {
        let report = json!({ "source": "a test" });
        let once = fill_blocks("<!-- bench:placement -->\n<!-- /bench -->\n", &report).unwrap();
        assert_eq!(fill_blocks(&once, &report).unwrap(), once);
    }

    #[test]
    fn a_marker_quoted_in_prose_is_not_a_block() {
        let text = "Blocks are `<!-- bench:NAME -->` lines.\n";
        assert_eq!(fill_blocks(text, &json!({})).unwrap(), text);
    }

    #[test]
    fn an_unclosed_block_is_refused() {
        let err = fill_blocks("<!-- bench:source -->\nstale\n", &json!({})).unwrap_err();
        assert!(err.to_string().contains("no `<!-- /bench -->`"), "{err}");
    }

    #[test]
    fn an_unknown_block_is_refused() {
        let err = fill_blocks("<!-- bench:nothing -->\n<!-- /bench -->\n", &json!({})).unwrap_err();
        assert!(err.to_string().contains("`nothing`"), "{err}");
    }

    #[test]
    fn the_submit_profile_names_each_function_and_the_rest_of_each_case() {
        let report = json!({ "submit_profile": {
            "pairs": [["cubecl-ours-fence-submit", "cubecl-server-fence-submit"]],
            "floor": 5.0,
            "note": "a test",
            "cases": {
                "cubecl-ours-fence-submit": {
                    "functions": [{ "function": "core::idle::keep_event", "instructions": 47.0 }],
                    "rest": 3.0 },
                "cubecl-server-fence-submit": { "functions": [], "rest": 113.0 },
            } } });
        let table = submit_profile(&report);
        assert!(
            table
                .contains("| a CubeCL fence, ours (`CubeFence`) | `core::idle::keep_event` | 47 |"),
            "{table}"
        );
        assert!(
            table.contains(
                "| a CubeCL fence, CubeCL's own | the rest (functions under 5 each, libc) | 113 |"
            ),
            "{table}"
        );
        assert_eq!(submit_profile(&json!({})), "");
    }

    #[test]
    fn a_figure_missing_from_the_report_is_a_dash_not_a_zero() {
        assert_eq!(num(&Value::Null, 2), "—");
        assert_eq!(num(&json!(0.125), 2), "0.12");
    }

    /// One figure per section, at the path `cargo xtask bench` writes it
    /// (`xtask/src/bench.rs` and `bench-probe`'s JSON), each shown.
    #[test]
    fn every_section_shows_the_figures_the_bench_writes() {
        let report = json!({
            "core_null_backend": { "window": { "instructions": 101.0 } },
            "against_cudarc_on_the_software_driver": { "submit": { "window": {
                "instructions": { "ours": 102.0, "cudarc": 1.0, "ratio": 0.5 },
                "wall_ns": { "ratio": 0.61, "ratio_low": 0.55, "ratio_high": 0.67,
                             "ratio_runs": [0.6, 0.61, 0.62] },
            } } },
            "against_cubecl_server": {
                "submit": { "fence": { "driver_calls": { "ours": 1.0, "cubecl_server": 103.0 } },
                            "window": { "instructions_outside_the_driver": { "ours": 115.0 } } },
                "runs": [{ "device_events_cubecl": { "first_poll_of_a_20ms_window_us": 104.0 } }],
            },
            "scale": { "sizes": { "1000000": { "ns_per_window": 105.0 } } },
            "placement": { "pocl": { "blocking": { "driver_clock": { "fit_on": {
                "median_us": { "median": 106.0, "spread": 0.5 } } } } } },
            "answering": { "head_of_line": { "late_p99_us": 107.0 } },
            "every_kernel": { "runs": [{ "streams_8": { "late_p99_us": 108.0,
                "library_wakeups_per_window": { "voluntary": 114.0, "involuntary": 0.0 },
                "library_cpu_us_per_window": 116.0 } }],
                "resolver_profile": { "instructions_per_window": 117.0 } },
            "server_way": { "start_behind_a_1s_kernel": { "p99_9_us": 109.0 },
                            "global_captures": { "hip": { "captures_ended": 110.0 } } },
            "beside_a_hung_device": { "runs": [{ "read_p99_us": 111.0 }] },
            "gate_on_a_shared_queue": { "runs": [{ "user_delay_max_us": 112.0 }] },
            "wait_cost": { "pocl": { "late_us": 113.0 } },
        });
        let page = measurements(&report);
        for figure in 101..=117 {
            assert!(
                page.contains(&figure.to_string()),
                "{figure} not shown:\n{page}"
            );
        }
        assert!(
            page.contains("0.61 [0.55–0.67] (0.60, 0.61, 0.62)"),
            "{page}"
        );
    }

    #[test]
    fn headings_anchor_as_github_does() {
        let anchors = heading_anchors(
            "# Compared with CubeCL's `device_events`\n## MSRV, OS, licence\n## Tests\n## Tests\n\
             ```\n# not a heading\n```\n",
        );
        for anchor in [
            "compared-with-cubecls-device_events",
            "msrv-os-licence",
            "tests",
            "tests-1",
        ] {
            assert!(anchors.contains(anchor), "{anchor} in {anchors:?}");
        }
        assert!(!anchors.contains("not-a-heading"));
    }

    #[test]
    fn links_in_code_are_not_links() {
        let text = "[a](docs/a.md#x) and `[b](b.md)`\n```\n[c](c.md)\n```\n[d]: d.md\n";
        assert_eq!(links(text), ["docs/a.md#x", "d.md"]);
    }

    #[test]
    fn cubecl_named_at_a_shorter_version_than_the_workspace_builds_is_a_fault() {
        let manifest =
            "cubecl-runtime = { version = \"0.12.0-pre.1\", default-features = false }\n";
        let text = "`cubecl-runtime` 0.12.0-pre.1 here\nCubeCL's contract (`cubecl-runtime` 0.12)\nparking_lot 0.12\n";
        assert_eq!(
            cubecl_versions(text, manifest),
            ["line 2: CubeCL 0.12 where the workspace builds 0.12.0-pre.1"]
        );
    }

    #[test]
    fn the_readme_is_a_guide_under_10_kb() {
        let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
        assert!(
            readme.len() <= README_LIMIT,
            "README.md is {} bytes ({} lines)",
            readme.len(),
            readme.lines().count()
        );
    }

    #[test]
    fn the_readme_names_cubecl_at_the_version_the_workspace_builds() {
        let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
        let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
        let faults = cubecl_versions(&readme, &manifest);
        assert!(faults.is_empty(), "{faults:?}");
    }
}
