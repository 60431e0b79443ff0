//! The demo as a user runs it, on the software driver: what it prints, the
//! trace's structure, and the timeline drawn by a real SVG renderer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

device_events_conformance::tests_run_on_the_software_driver!();

use std::io::Write;
use std::path::Path;
use std::process::Command;

use device_events_conformance::start::INSTALLED_VAR;

use serde_json::Value;

/// Run the demo once into a fresh folder; its stdout.
fn run_demo(out: &Path) -> String {
    assert!(
        std::env::var_os("SOFT_DRIVER_LIB").is_some(),
        "the software driver: this binary starts on it (the line above says why not), or \
         `cargo xtask test` points the loaders at it"
    );
    let output = Command::new(env!("CARGO_BIN_EXE_device-events-demo"))
        .args(["--backend", "cuda", "--soft", "--steps", "4", "--out"])
        .arg(out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn out_dir(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn it_names_the_software_driver_and_prints_the_table() {
    let out = out_dir("table");
    let stdout = run_demo(&out);
    let mut lines = stdout.lines();
    assert!(
        lines
            .next()
            .unwrap()
            .contains("software driver, no GPU found"),
        "{stdout}"
    );
    assert!(lines.next().unwrap().contains("bound ± (µs)"), "{stdout}");
    let rows = stdout
        .lines()
        .filter(|l| {
            ["step", "load", "produce", "consume"]
                .iter()
                .any(|w| l.starts_with(w))
        })
        .count();
    assert_eq!(rows, 16, "{stdout}");
    assert!(out.join("trace.json").exists() && out.join("timeline.svg").exists());
}

#[test]
fn each_window_shows_its_own_stated_bound_and_the_anchor_its_own_once_taken() {
    let out = out_dir("bounds");
    let stdout = run_demo(&out);
    let bounds: Vec<f64> = stdout
        .lines()
        .filter(|l| {
            ["step", "load", "produce", "consume"]
                .iter()
                .any(|w| l.starts_with(w))
        })
        .map(|l| l.split_whitespace().last().unwrap().parse().unwrap())
        .collect();
    assert_eq!(bounds.len(), 16, "{stdout}");
    // A window's bound holds at least the readings' resolution: never the
    // zero shown for an anchor not yet taken.
    assert!(bounds.iter().all(|&b| b > 0.0), "{stdout}");
    let anchor: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("anchor ± "))
        .collect();
    assert_eq!(anchor.len(), 1, "{stdout}");
    let svg = std::fs::read_to_string(out.join("timeline.svg")).unwrap();
    assert!(
        svg.contains("<title>device-events demo on software driver") && svg.contains(": anchor ± "),
        "no title naming the driver and the anchor's bound"
    );
}

#[test]
fn the_trace_has_complete_spans_on_three_tracks_with_stages_inside_steps() {
    let out = out_dir("trace");
    run_demo(&out);
    let trace: Value =
        serde_json::from_slice(&std::fs::read(out.join("trace.json")).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let spans: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    for span in &spans {
        for field in ["ph", "ts", "dur", "pid", "tid", "name"] {
            assert!(!span[field].is_null(), "{field} missing from {span}");
        }
    }
    let tracks = events.iter().filter(|e| e["name"] == "thread_name").count();
    assert!(tracks >= 3, "{tracks} tracks");
    let device_tids: std::collections::HashSet<_> = spans
        .iter()
        .filter(|s| s["cat"] == "device")
        .map(|s| s["tid"].as_u64())
        .collect();
    assert!(device_tids.len() >= 3, "steps, stream A and stream B");

    let interval = |s: &Value| {
        let ts = s["ts"].as_f64().unwrap();
        (ts, ts + s["dur"].as_f64().unwrap())
    };
    let mut steps: Vec<_> = spans
        .iter()
        .filter(|s| s["name"] == "step")
        .map(|s| interval(s))
        .collect();
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(steps.len(), 4);
    let stages: Vec<_> = spans
        .iter()
        .filter(|s| ["load", "produce", "consume"].contains(&s["name"].as_str().unwrap()))
        .map(|s| interval(s))
        .collect();
    assert_eq!(stages.len(), 12);
    // 1 µs of slack: the driver's resolution and the f32 rounding of offsets.
    for (start, end) in stages {
        let inside = steps
            .iter()
            .filter(|(s, e)| *s - 1.0 <= start && end <= *e + 1.0)
            .count();
        assert_eq!(inside, 1, "stage {start}..{end} lies in {inside} steps");
    }
}

#[test]
fn each_window_in_the_trace_carries_its_bound_and_device_time() {
    let out = out_dir("trace-args");
    run_demo(&out);
    let trace: Value =
        serde_json::from_slice(&std::fs::read(out.join("trace.json")).unwrap()).unwrap();
    let windows: Vec<&Value> = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "device")
        .collect();
    assert_eq!(windows.len(), 16);
    for window in windows {
        let args = &window["args"];
        assert!(
            args["bound_us"].as_f64().is_some_and(|b| b > 0.0),
            "{window}"
        );
        assert!(
            args["device_us"].as_f64().is_some_and(|d| d > 0.0),
            "{window}"
        );
    }
}

/// Whether `rsvg-convert` runs here. Under a plain `cargo test` without
/// it, one line says the test that needs it is skipped and why, as the
/// PoCL suites say theirs; under `cargo xtask test`, which installs it and
/// sets [`INSTALLED_VAR`], its absence is a failure.
fn svg_renderer_or_skip(test: &str) -> bool {
    let found = Command::new("rsvg-convert")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return true;
    }
    assert!(
        std::env::var_os(INSTALLED_VAR).is_none(),
        "rsvg-convert (Debian's librsvg2-bin) is not installed, and `cargo xtask test` asked \
         for the tools it installs"
    );
    // Straight to stderr: the test harness holds back what `eprintln!`
    // prints from a test that passes.
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {test} needs rsvg-convert (Debian's librsvg2-bin); `cargo xtask test` \
         installs it and runs it"
    );
    false
}

#[test]
fn the_timeline_is_drawn_by_a_real_svg_renderer() {
    if !svg_renderer_or_skip("the_timeline_is_drawn_by_a_real_svg_renderer") {
        return;
    }
    let out = out_dir("svg");
    run_demo(&out);
    let png = out.join("timeline.png");
    let status = Command::new("rsvg-convert")
        .arg("-o")
        .arg(&png)
        .arg(out.join("timeline.svg"))
        .status()
        .expect("rsvg-convert");
    assert!(status.success());
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    assert!(
        frame.width >= 1000 && frame.height >= 100,
        "{}x{}",
        frame.width,
        frame.height
    );
    let bytes = frame.color_type.samples();
    let colours: std::collections::HashSet<&[u8]> =
        pixels[..frame.buffer_size()].chunks(bytes).collect();
    assert!(colours.len() > 8, "only {} colours drawn", colours.len());
}
