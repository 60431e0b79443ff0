//! The Chrome trace as a reader of `trace.json` sees it: each device
//! window's bound and device time beside its span.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use device_events_core::Placement;
use device_events_trace::Trace;
use serde_json::Value;

/// A trace of one host span and one device window (300 µs of device time,
/// 1.25 µs of bound), as Chrome JSON; its `"X"` events by name.
fn events() -> (Value, Value) {
    let mut trace = Trace::new();
    let stream = trace.device_track("stream A");
    let host = trace.host_track("main thread");
    let t0 = Instant::now();
    trace.host_span(host, "enqueue", t0, t0 + Duration::from_micros(40));
    let window = Placement {
        duration: Duration::from_micros(300),
        start: t0 + Duration::from_micros(50),
        end: t0 + Duration::from_micros(352),
        uncertainty: Duration::from_nanos(1250),
    };
    trace.span(stream, "matmul", &window);
    let json = trace.to_chrome_json();
    let named = |name: &str| {
        json["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["ph"] == "X" && e["name"] == name)
            .unwrap()
            .clone()
    };
    (named("matmul"), named("enqueue"))
}

#[test]
fn a_device_window_carries_its_bound_in_microseconds_in_its_args() {
    let (window, _) = events();
    assert_eq!(window["args"]["bound_us"].as_f64(), Some(1.25), "{window}");
}

#[test]
fn a_device_window_carries_its_device_time_in_microseconds_in_its_args() {
    let (window, _) = events();
    assert_eq!(
        window["args"]["device_us"].as_f64(),
        Some(300.0),
        "{window}"
    );
    // The span itself is the placed interval: here 2 µs wider.
    assert_eq!(window["dur"].as_f64(), Some(302.0), "{window}");
}

#[test]
fn a_host_span_carries_no_bound() {
    let (_, host) = events();
    assert!(host["args"]["bound_us"].is_null(), "{host}");
}
