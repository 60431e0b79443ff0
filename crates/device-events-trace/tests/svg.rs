//! The SVG timeline as a reader sees it: every line of text on the canvas.
#![allow(clippy::unwrap_used)]

use device_events_trace::Trace;

/// The title's font size in the SVG, and a wide estimate of its bold sans
/// glyphs' advance: DejaVu Sans Bold's (what `rsvg-convert` draws on
/// Debian) digits are 0.70 em, its lowercase letters narrower.
const TITLE_PX: f64 = 14.0;
const EM_PER_CHAR: f64 = 0.7;

/// The demo's title on a device whose name is as long as real ones get.
const LONG: &str = "device-events demo on NVIDIA GeForce RTX 4090 Laptop GPU (CUDA driver \
                    12.4, compute capability 8.9, 76 multiprocessors, 16 GiB, PCI 0000:01:00.0): \
                    anchor ± 0.42 µs";

/// The value of attribute `name` in the tag `tag`.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let from = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    tag[from..].split('"').next()
}

/// Each `<text>` of `svg` drawn at the title's size: its `x` and its text.
fn title_lines(svg: &str) -> Vec<(f64, String)> {
    svg.split("<text")
        .skip(1)
        .filter_map(|part| {
            let (tag, rest) = part.split_once('>')?;
            (attr(tag, "font-size") == Some("14")).then(|| {
                let text = rest.split("</text>").next().unwrap_or("");
                (attr(tag, "x").unwrap().parse().unwrap(), text.to_owned())
            })
        })
        .collect()
}

fn canvas_width(svg: &str) -> f64 {
    attr(svg, "width").unwrap().parse().unwrap()
}

fn timeline_titled(title: &'static str) -> String {
    let mut trace = Trace::new();
    trace.device_track("stream A");
    trace.set_title(title);
    trace.to_svg()
}

#[test]
fn every_line_of_a_long_title_fits_the_canvas() {
    let svg = timeline_titled(LONG);
    let width = canvas_width(&svg);
    let lines = title_lines(&svg);
    assert!(!lines.is_empty(), "no title drawn");
    for (x, text) in &lines {
        let drawn = x + text.chars().count() as f64 * EM_PER_CHAR * TITLE_PX;
        assert!(
            drawn <= width,
            "{text:?} runs to {drawn:.0} px on a canvas {width} px wide"
        );
    }
}

#[test]
fn a_long_title_is_drawn_whole_its_anchors_bound_included() {
    let svg = timeline_titled(LONG);
    let drawn: Vec<String> = title_lines(&svg).into_iter().map(|(_, t)| t).collect();
    assert_eq!(drawn.join(" "), LONG.replace('&', "&amp;"));
    assert!(drawn.last().unwrap().ends_with("anchor ± 0.42 µs"));
}

#[test]
fn a_short_title_is_one_line() {
    let svg = timeline_titled("pipeline on the software driver: anchor ± 0.42 µs");
    assert_eq!(title_lines(&svg).len(), 1);
}

#[test]
fn the_rows_start_below_the_titles_last_line() {
    let svg = timeline_titled(LONG);
    let last_baseline: f64 = svg
        .split("<text")
        .skip(1)
        .filter(|part| attr(part, "font-size") == Some("14"))
        .map(|part| attr(part, "y").unwrap().parse::<f64>().unwrap())
        .fold(0.0, f64::max);
    let first_row: f64 = svg
        .split("<rect")
        .skip(2) // the canvas's background
        .map(|part| attr(part, "y").unwrap().parse::<f64>().unwrap())
        .fold(f64::INFINITY, f64::min);
    assert!(
        first_row >= last_baseline + 4.0,
        "the first row at {first_row} covers the title's last line at {last_baseline}"
    );
}
