//! `tracing` spans in the Perfetto trace: where the layer puts them, and on
//! which clock.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use device_events_core::Placement;
use device_events_trace::{Perfetto, PerfettoLayer, PerfettoWriter};
use perfetto_protos::trace::Trace;
use perfetto_protos::trace_packet::{TracePacket, trace_packet};
use perfetto_protos::track_descriptor::TrackDescriptor;
use perfetto_protos::track_event::{TrackEvent, track_event};
use protobuf::Message;
use tracing_subscriber::layer::SubscriberExt;

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Run `body` with the layer as this thread's subscriber; the packets.
fn traced(body: impl FnOnce(&PerfettoWriter)) -> Vec<TracePacket> {
    let out = Shared::default();
    let trace = Arc::new(Perfetto::new("test").to_writer(out.clone()).unwrap());
    let subscriber = tracing_subscriber::registry().with(PerfettoLayer::new(Arc::clone(&trace)));
    tracing::subscriber::with_default(subscriber, || body(&trace));
    assert_eq!(trace.finish().unwrap(), 0);
    let bytes = out.0.lock().unwrap();
    Trace::parse_from_bytes(&bytes).unwrap().packet
}

/// Each slice's (name, begin, end, track), in the file's order.
fn slices(packets: &[TracePacket]) -> Vec<(String, u64, u64, u64)> {
    let events: Vec<(&TrackEvent, u64)> = packets
        .iter()
        .filter_map(|p| match &p.data {
            Some(trace_packet::Data::TrackEvent(e)) => Some((e, p.timestamp())),
            _ => None,
        })
        .collect();
    // The writer writes each slice's begin and end together.
    events
        .chunks(2)
        .filter(|pair| pair.len() == 2 && pair[0].0.type_() == track_event::Type::TYPE_SLICE_BEGIN)
        .map(|pair| {
            (
                pair[0].0.name().to_owned(),
                pair[0].1,
                pair[1].1,
                pair[0].0.track_uuid(),
            )
        })
        .collect()
}

fn tracks(packets: &[TracePacket]) -> Vec<TrackDescriptor> {
    packets
        .iter()
        .filter_map(|p| match &p.data {
            Some(trace_packet::Data::TrackDescriptor(t)) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

#[tracing::instrument]
fn handle_request() {
    std::thread::sleep(Duration::from_millis(1));
}

#[test]
fn an_instrumented_function_is_a_slice_on_its_threads_track() {
    let packets = traced(|_| handle_request());
    let slice = slices(&packets)
        .into_iter()
        .find(|s| s.0 == "handle_request")
        .unwrap();
    assert!(slice.2 - slice.1 >= 1_000_000, "{slice:?}");
    let track = tracks(&packets)
        .into_iter()
        .find(|t| t.uuid() == slice.3)
        .unwrap();
    // SAFETY: gettid has no preconditions.
    assert_eq!(track.thread.tid(), unsafe { libc::gettid() });
}

#[test]
fn a_span_entered_on_another_thread_is_on_that_threads_track() {
    let packets = traced(|_| {
        let span = tracing::info_span!("work");
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        std::thread::Builder::new()
            .name("worker".into())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || drop(span.entered()));
            })
            .unwrap()
            .join()
            .unwrap();
    });
    let slice = slices(&packets)
        .into_iter()
        .find(|s| s.0 == "work")
        .unwrap();
    let track = tracks(&packets)
        .into_iter()
        .find(|t| t.uuid() == slice.3)
        .unwrap();
    assert_eq!(track.thread.thread_name(), "worker");
}

#[test]
fn a_span_and_a_device_window_share_one_clock() {
    let packets = traced(|trace| {
        let stream = trace.stream(trace.device("GPU"), "s");
        let _span = tracing::info_span!("enqueue").entered();
        let at = Instant::now();
        trace.window(
            stream,
            "kernel",
            &Placement {
                duration: Duration::from_micros(5),
                start: at,
                end: at + Duration::from_micros(5),
                uncertainty: Duration::from_micros(1),
            },
        );
        std::thread::sleep(Duration::from_micros(10));
    });
    let slices = slices(&packets);
    let span = slices.iter().find(|s| s.0 == "enqueue").unwrap();
    let window = slices.iter().find(|s| s.0 == "kernel").unwrap();
    assert!(
        span.1 <= window.1 && window.1 <= span.2,
        "{span:?} {window:?}"
    );
}
