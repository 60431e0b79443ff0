//! The SVG timeline: a row per track, host tracks first.

use std::fmt::Write;

use crate::{Trace, TrackKind};

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 140.0;
const ROW: f64 = 34.0;
/// Where the first row starts, below a title of one line.
const TOP: f64 = 36.0;
/// The title's font size, in pixels, and the distance between its lines.
const TITLE_PX: f64 = 14.0;
const TITLE_LINE: f64 = 18.0;
/// Where the title's lines start.
const TITLE_X: f64 = 6.0;
/// A wide estimate of a bold sans glyph's advance, in em: DejaVu Sans
/// Bold's (what `rsvg-convert` draws with on Debian) digits are 0.70 em,
/// its lowercase letters narrower. A line of the title holds no more
/// characters than fit the canvas at this width each.
const TITLE_EM_PER_CHAR: f64 = 0.7;
/// Ticks on the time axis: at most this many intervals.
const TICKS: f64 = 10.0;

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
    let title = trace.title.as_deref().map(|title| {
        let fits = (WIDTH - 2.0 * TITLE_X) / (TITLE_EM_PER_CHAR * TITLE_PX);
        (title, wrap(title, fits as usize))
    });
    let lines = title.as_ref().map_or(1, |(_, lines)| lines.len().max(1));
    let top = TOP + TITLE_LINE * (lines - 1) as f64;
    let height = top + ROW * order.len() as f64 + 30.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        svg,
        r#"<rect width="{WIDTH}" height="{height}" fill="white"/>"#
    );
    if let Some((whole, lines)) = &title {
        let _ = write!(svg, "<title>{}</title>", escape(whole));
        for (index, line) in lines.iter().enumerate() {
            let _ = write!(
                svg,
                r#"<text x="{TITLE_X}" y="{}" font-size="{TITLE_PX}" font-weight="bold">{}</text>"#,
                22.0 + TITLE_LINE * index as f64,
                escape(line)
            );
        }
    }
    for (row, &track) in order.iter().enumerate() {
        let y = top + ROW * row as f64;
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
        let y = top + ROW * row_of(span.track.0) as f64 + 4.0;
        let us = (span.end_ns - span.start_ns) as f64 / 1e3;
        let label = escape(span.label);
        let bound = span.bound_ns.map_or_else(String::new, |ns| {
            format!(", ends ± {:.2} µs", ns as f64 / 1e3)
        });
        let _ = write!(
            svg,
            r##"<g><title>{label}: {us:.1} µs{bound}</title><rect x="{x:.2}" y="{y}" width="{w:.2}" height="{}" fill="{}" stroke="#333" stroke-width="0.5"/>"##,
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
    // A time axis, its ticks at round values.
    let axis = top + ROW * order.len() as f64 + 4.0;
    let _ = write!(
        svg,
        r#"<line x1="{LEFT}" y1="{axis}" x2="{}" y2="{axis}" stroke="black"/>"#,
        WIDTH - 40.0
    );
    for (at_ns, label) in ticks(span_ns) {
        let x = LEFT + at_ns * scale;
        let _ = write!(
            svg,
            r#"<line x1="{x:.2}" y1="{axis}" x2="{x:.2}" y2="{}" stroke="black"/><text x="{x:.2}" y="{}" text-anchor="middle">{label}</text>"#,
            axis + 4.0,
            axis + 16.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// `text` in lines of at most `fits` characters, broken at spaces; a word
/// longer than a line is broken inside it. Nothing is dropped: the lines,
/// joined by spaces, are `text` with its runs of spaces made one.
fn wrap(text: &str, fits: usize) -> Vec<String> {
    let fits = fits.max(1);
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        let used = line.chars().count();
        if used > 0 && used + 1 + word.len() > fits {
            lines.push(std::mem::take(&mut line));
        }
        while word.len() > fits {
            let rest = word.split_off(fits);
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            lines.push(word.into_iter().collect());
            word = rest;
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.extend(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// The axis's ticks over `span_ns`, each at a multiple of one round step
/// (1, 2 or 5 times a power of ten nanoseconds, the smallest that leaves at
/// most [`TICKS`] intervals), labelled in the largest unit the step is a
/// whole number of: a reader adds "10 ms" steps in their head, not 9.67 ms.
fn ticks(span_ns: f64) -> Vec<(f64, String)> {
    let wanted = (span_ns / TICKS).max(1.0);
    let mut power = 1.0;
    while power * 10.0 <= wanted {
        power *= 10.0;
    }
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&step| step >= wanted)
        .unwrap_or(power * 10.0);
    let (unit, name) = [(1e9, "s"), (1e6, "ms"), (1e3, "µs")]
        .into_iter()
        .find(|&(unit, _)| step >= unit)
        .unwrap_or((1.0, "ns"));
    // Counted in steps, not added up: no float error creeps into a label.
    let count = (span_ns / step + 1e-9).floor() as u64;
    (0..=count)
        .map(|k| {
            let at = k as f64 * step;
            (at, format!("{} {name}", (at / unit).round()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{ticks, wrap};

    #[test]
    fn wrapping_breaks_at_spaces_and_keeps_every_word() {
        assert_eq!(wrap("one two three four", 9), ["one two", "three", "four"]);
        assert_eq!(wrap("short", 9), ["short"]);
    }

    #[test]
    fn wrapping_breaks_a_word_longer_than_a_line_inside_it() {
        assert_eq!(wrap("a abcdefghij b", 4), ["a", "abcd", "efgh", "ij b"]);
    }

    fn labels(span_ns: f64) -> Vec<String> {
        ticks(span_ns).into_iter().map(|(_, label)| label).collect()
    }

    #[test]
    fn ticks_fall_on_round_values_not_on_tenths_of_the_span() {
        // The demo's 96.7 ms, once ticked every 9.67 ms.
        assert_eq!(
            labels(96.7e6),
            [
                "0 ms", "10 ms", "20 ms", "30 ms", "40 ms", "50 ms", "60 ms", "70 ms", "80 ms",
                "90 ms"
            ]
        );
        assert_eq!(
            labels(7.3e6),
            [
                "0 ms", "1 ms", "2 ms", "3 ms", "4 ms", "5 ms", "6 ms", "7 ms"
            ]
        );
        assert_eq!(
            labels(1.1e5),
            ["0 µs", "20 µs", "40 µs", "60 µs", "80 µs", "100 µs"]
        );
        assert_eq!(
            labels(42e9),
            [
                "0 s", "5 s", "10 s", "15 s", "20 s", "25 s", "30 s", "35 s", "40 s"
            ]
        );
    }

    #[test]
    fn every_step_is_one_two_or_five_times_a_power_of_ten_and_fits_the_span() {
        for span in [1.0, 37.0, 999.0, 1234.5, 96.7e6, 3.3e8, 2.5e10] {
            let at: Vec<f64> = ticks(span).into_iter().map(|(at, _)| at).collect();
            let step = at[1] - at[0];
            let power = 10f64.powf(step.log10().floor());
            let mantissa = (step / power).round();
            assert!(
                [1.0, 2.0, 5.0].contains(&mantissa),
                "step {step} over {span}"
            );
            assert!(
                at.len() <= 11 && at.len() >= 2,
                "{} ticks over {span}",
                at.len()
            );
            assert!(*at.last().unwrap() <= span, "a tick past the end of {span}");
        }
    }
}
