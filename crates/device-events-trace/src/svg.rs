//! The SVG timeline: a row per track, host tracks first.

use std::fmt::Write;

use crate::{Trace, TrackKind};

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 140.0;
const ROW: f64 = 34.0;
const TOP: f64 = 30.0;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A colour per label, stable across runs.
fn colour(label: &str) -> String {
    let hash = label.bytes().fold(2_166_136_261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16_777_619)
    });
    format!("hsl({}, 60%, 62%)", hash % 360)
}

pub(crate) fn render(trace: &Trace) -> String {
    let mut order: Vec<usize> = (0..trace.tracks.len()).collect();
    order.sort_by_key(|&i| (trace.tracks[i].kind == TrackKind::Device, i));
    let row_of = |track: usize| order.iter().position(|&i| i == track).unwrap_or(0);
    let epoch = trace.epoch_ns();
    let end = trace.spans.iter().map(|s| s.end_ns).max().unwrap_or(epoch);
    let span_ns = (end - epoch).max(1) as f64;
    let scale = (WIDTH - LEFT - 40.0) / span_ns;
    let height = TOP + ROW * order.len() as f64 + 30.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        svg,
        r#"<rect width="{WIDTH}" height="{height}" fill="white"/>"#
    );
    for (row, &track) in order.iter().enumerate() {
        let y = TOP + ROW * row as f64;
        let shade = if row % 2 == 0 { "#f4f4f4" } else { "#ffffff" };
        let name = escape(&trace.tracks[track].name);
        let _ = write!(
            svg,
            r##"<rect x="0" y="{y}" width="{WIDTH}" height="{ROW}" fill="{shade}"/><text x="6" y="{}">{name}</text>"##,
            y + ROW / 2.0 + 4.0
        );
    }
    for span in &trace.spans {
        let x = LEFT + (span.start_ns - epoch) as f64 * scale;
        let w = ((span.end_ns - span.start_ns) as f64 * scale).max(1.0);
        let y = TOP + ROW * row_of(span.track.0) as f64 + 4.0;
        let us = (span.end_ns - span.start_ns) as f64 / 1e3;
        let label = escape(span.label);
        let _ = write!(
            svg,
            r##"<g><title>{label}: {us:.1} µs</title><rect x="{x:.2}" y="{y}" width="{w:.2}" height="{}" fill="{}" stroke="#333" stroke-width="0.5"/>"##,
            ROW - 8.0,
            colour(span.label)
        );
        if w > 6.5 * span.label.len() as f64 + 4.0 {
            let _ = write!(
                svg,
                r#"<text x="{:.2}" y="{}">{label}</text>"#,
                x + 3.0,
                y + ROW / 2.0
            );
        }
        svg.push_str("</g>");
    }
    // A time axis with ten ticks.
    let axis = TOP + ROW * order.len() as f64 + 4.0;
    let _ = write!(
        svg,
        r#"<line x1="{LEFT}" y1="{axis}" x2="{}" y2="{axis}" stroke="black"/>"#,
        WIDTH - 40.0
    );
    for tick in 0..=10 {
        let x = LEFT + (WIDTH - LEFT - 40.0) * f64::from(tick) / 10.0;
        let ms = span_ns * f64::from(tick) / 10.0 / 1e6;
        let _ = write!(
            svg,
            r#"<line x1="{x:.2}" y1="{axis}" x2="{x:.2}" y2="{}" stroke="black"/><text x="{x:.2}" y="{}" text-anchor="middle">{ms:.2} ms</text>"#,
            axis + 4.0,
            axis + 16.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}
