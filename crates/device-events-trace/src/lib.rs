//! Labelled device windows and host spans on one clock, written as a Chrome
//! trace-event file (opened by Perfetto and `chrome://tracing`) and as a
//! self-contained SVG timeline; on Linux as a Perfetto trace; with the
//! feature `tracy` (or `tracy-0-17`) as Tracy GPU zones, a context per
//! stream (`Tracy`).
//!
//! Windows come in as the [`Placement`] an `EventProfiler`'s window resolves to,
//! already on the host clock, so device tracks and host tracks line up with
//! no further conversion. Labels are `&'static str`: recording a span costs
//! no allocation beyond the trace's own vector growing.
//!
//! ```
//! use device_events_core::Placement;
//! use device_events_trace::Trace;
//! use std::time::{Duration, Instant};
//!
//! let mut trace = Trace::new();
//! let stream = trace.device_track("stream A");
//! let host = trace.host_track("main thread");
//! let t0 = Instant::now();
//! trace.host_span(host, "enqueue", t0, t0 + Duration::from_micros(40));
//! let window = Placement {
//!     duration: Duration::from_micros(300),
//!     start: t0 + Duration::from_micros(50),
//!     end: t0 + Duration::from_micros(350),
//!     uncertainty: Duration::from_micros(1),
//! };
//! trace.span(stream, "matmul", &window);
//!
//! let json = trace.to_chrome_json();
//! assert_eq!(json["traceEvents"].as_array().map(|e| e.iter().filter(|e| e["ph"] == "X").count()), Some(2));
//! assert!(trace.to_svg().starts_with("<svg"));
//! ```

mod svg;

#[cfg(target_os = "linux")]
mod host;
#[cfg(target_os = "linux")]
mod perfetto;
#[cfg(target_os = "linux")]
pub use host::HostClock;
#[cfg(target_os = "linux")]
pub use perfetto::{ManifestFile, Perfetto, PerfettoWriter, perfetto_manifest};
#[cfg(all(feature = "tracy", feature = "tracy-0-17"))]
compile_error!(
    "features `tracy` and `tracy-0-17` link two Tracy clients into one program: enable one"
);
#[cfg(any(feature = "tracy", feature = "tracy-0-17"))]
mod tracy;
#[cfg(any(feature = "tracy", feature = "tracy-0-17"))]
pub use tracy::{Tracy, TracyWriter, TracyZone};
#[cfg(target_os = "linux")]
mod tracing_layer;
#[cfg(target_os = "linux")]
pub use tracing_layer::PerfettoLayer;

use std::borrow::Cow;
use std::io::Write;

use std::time::{Duration, Instant};

use device_events_core::Placement;
use serde::Serialize;

/// A row of the timeline: a device stream or a host thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TrackId(usize);

/// Which process a track belongs to in the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrackKind {
    /// A host thread.
    Host,
    /// A device stream.
    Device,
}

#[derive(Clone, Debug)]
struct Track {
    name: Cow<'static, str>,
    kind: TrackKind,
}

/// One span: a label on a track, from `start` to `end`, in nanoseconds from
/// the trace's reference instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// The track it is drawn on.
    pub track: TrackId,
    /// What it was.
    pub label: &'static str,
    /// Start, ns after the reference.
    pub start_ns: u64,
    /// End, ns after the reference.
    pub end_ns: u64,
    /// A device window's stated bound: how far either end can be from
    /// where the device was, in ns. `None` for a host span.
    pub bound_ns: Option<u64>,
    /// A device window's device time, read from the device, in ns: the
    /// span itself is the placed interval, whose length differs from it
    /// by the two ends' errors. `None` for a host span.
    pub device_ns: Option<u64>,
}

/// Spans on tracks, on the host clock.
#[derive(Clone, Debug)]
pub struct Trace {
    reference: Instant,
    title: Option<Cow<'static, str>>,
    tracks: Vec<Track>,
    spans: Vec<Span>,
}

impl Default for Trace {
    fn default() -> Self {
        Self::new()
    }
}

/// A Chrome trace event, as the format's documentation names its fields.
#[derive(Serialize)]
struct Event<'a> {
    name: &'a str,
    ph: &'static str,
    pid: u32,
    tid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<serde_json::Value>,
}

/// Whole nanoseconds, saturating.
fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A device window's bound and device time as a trace event's `args`, in
/// µs as `ts` and `dur` are; `None` for a host span.
fn window_args(span: &Span) -> Option<serde_json::Value> {
    let us = |ns: Option<u64>| ns.map(|ns| ns as f64 / 1e3);
    match (us(span.bound_ns), us(span.device_ns)) {
        (None, None) => None,
        (bound, device) => Some(serde_json::json!({ "bound_us": bound, "device_us": device })),
    }
}

const HOST_PID: u32 = 1;
const DEVICE_PID: u32 = 2;

impl Trace {
    /// An empty trace. Spans may start up to an hour before this call.
    pub fn new() -> Self {
        let now = Instant::now();
        Self {
            reference: now.checked_sub(Duration::from_secs(3600)).unwrap_or(now),
            title: None,
            tracks: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// The timeline's title, drawn above its rows: what ran, and where.
    ///
    /// ```
    /// let mut trace = device_events_trace::Trace::new();
    /// trace.set_title("pipeline on the software driver");
    /// assert!(trace.to_svg().contains(">pipeline on the software driver</text>"));
    /// ```
    pub fn set_title(&mut self, title: impl Into<Cow<'static, str>>) {
        self.title = Some(title.into());
    }

    /// A track for a device stream.
    pub fn device_track(&mut self, name: impl Into<Cow<'static, str>>) -> TrackId {
        self.track(name.into(), TrackKind::Device)
    }

    /// A track for a host thread.
    pub fn host_track(&mut self, name: impl Into<Cow<'static, str>>) -> TrackId {
        self.track(name.into(), TrackKind::Host)
    }

    fn track(&mut self, name: Cow<'static, str>, kind: TrackKind) -> TrackId {
        self.tracks.push(Track { name, kind });
        TrackId(self.tracks.len() - 1)
    }

    /// A device window, as its profiler placed it on the host clock, with
    /// its bound and its device time.
    pub fn span(&mut self, track: TrackId, label: &'static str, placed: &Placement) {
        let start = placed.start.saturating_duration_since(self.reference);
        let end = placed.end.saturating_duration_since(self.reference);
        self.push(track, label, start, end);
        if let Some(span) = self.spans.last_mut() {
            span.bound_ns = Some(ns(placed.uncertainty));
            span.device_ns = Some(ns(placed.duration));
        }
    }

    /// A host span from `start` to `end`.
    pub fn host_span(&mut self, track: TrackId, label: &'static str, start: Instant, end: Instant) {
        let start = start.saturating_duration_since(self.reference);
        let end = end.saturating_duration_since(self.reference);
        self.push(track, label, start, end);
    }

    fn push(&mut self, track: TrackId, label: &'static str, start: Duration, end: Duration) {
        self.spans.push(Span {
            track,
            label,
            start_ns: ns(start),
            end_ns: ns(end).max(ns(start)),
            bound_ns: None,
            device_ns: None,
        });
    }

    /// The spans recorded so far.
    pub fn spans(&self) -> &[Span] {
        &self.spans
    }

    /// A track's name and kind, if it exists.
    pub fn track_info(&self, track: TrackId) -> Option<(&str, TrackKind)> {
        self.tracks.get(track.0).map(|t| (t.name.as_ref(), t.kind))
    }

    /// The earliest span's start: time zero of both outputs.
    fn epoch_ns(&self) -> u64 {
        self.spans.iter().map(|s| s.start_ns).min().unwrap_or(0)
    }

    fn ids(&self, track: TrackId) -> (u32, u32) {
        let pid = match self.tracks.get(track.0).map(|t| t.kind) {
            Some(TrackKind::Device) => DEVICE_PID,
            _ => HOST_PID,
        };
        (pid, u32::try_from(track.0 + 1).unwrap_or(u32::MAX))
    }

    /// The trace as Chrome trace-event JSON: one complete (`"X"`) event per
    /// span with `ts` and `dur` in microseconds (a device window's `args`
    /// adding its bound, `bound_us`, and its device time, `device_us`), and
    /// metadata naming the host and device processes and each track.
    pub fn to_chrome_json(&self) -> serde_json::Value {
        let epoch = self.epoch_ns();
        let mut events = Vec::with_capacity(self.spans.len() + self.tracks.len() + 2);
        for (pid, name) in [(HOST_PID, "host"), (DEVICE_PID, "device")] {
            events.push(Event {
                name: "process_name",
                ph: "M",
                pid,
                tid: 0,
                cat: None,
                ts: None,
                dur: None,
                args: Some(serde_json::json!({ "name": name })),
            });
        }
        for (index, track) in self.tracks.iter().enumerate() {
            let (pid, tid) = self.ids(TrackId(index));
            events.push(Event {
                name: "thread_name",
                ph: "M",
                pid,
                tid,
                cat: None,
                ts: None,
                dur: None,
                args: Some(serde_json::json!({ "name": track.name })),
            });
        }
        for span in &self.spans {
            let (pid, tid) = self.ids(span.track);
            events.push(Event {
                name: span.label,
                ph: "X",
                pid,
                tid,
                cat: Some(if pid == DEVICE_PID { "device" } else { "host" }),
                ts: Some((span.start_ns - epoch) as f64 / 1e3),
                dur: Some((span.end_ns - span.start_ns) as f64 / 1e3),
                args: window_args(span),
            });
        }
        serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ns" })
    }

    /// Write [`to_chrome_json`](Self::to_chrome_json) to `out`.
    ///
    /// # Errors
    ///
    /// The writer's.
    pub fn write_chrome_json(&self, out: impl Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(out, &self.to_chrome_json()).map_err(std::io::Error::from)
    }

    /// The trace as a self-contained SVG timeline: the title, in as many
    /// lines as it takes to fit the canvas; a row per track; a box per span
    /// with its label, duration and (a device window's) bound as a
    /// tooltip; a time axis.
    pub fn to_svg(&self) -> String {
        svg::render(self)
    }
}
