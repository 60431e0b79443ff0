//! The Perfetto file, read back with Perfetto's own schema: what a window
//! becomes, where the clocks and annotations are, what a submitting thread
//! pays to hand a window over.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use device_events_core::Placement;
use device_events_trace::Perfetto;
use perfetto_protos::debug_annotation::debug_annotation;
use perfetto_protos::trace::Trace;
use perfetto_protos::trace_packet::{TracePacket, trace_packet};
use perfetto_protos::track_event::track_event;
use protobuf::Message;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// count is a thread-local `Cell` of a const initialiser.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: as the caller promises for `layout`.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as the caller promises: `ptr` is ours, of `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A `Write` the test keeps a handle on.
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

fn packets(bytes: &Shared) -> Vec<TracePacket> {
    let bytes = bytes.0.lock().unwrap();
    Trace::parse_from_bytes(&bytes).unwrap().packet
}

fn window(start: Instant, micros: u64) -> Placement {
    Placement {
        duration: Duration::from_micros(micros),
        start,
        end: start + Duration::from_micros(micros),
        uncertainty: Duration::from_nanos(1500),
    }
}

fn annotations(packet: &TracePacket) -> HashMap<String, debug_annotation::Value> {
    let Some(trace_packet::Data::TrackEvent(event)) = &packet.data else {
        return HashMap::new();
    };
    event
        .debug_annotations
        .iter()
        .filter_map(|a| match (&a.name_field, &a.value) {
            (Some(debug_annotation::Name_field::Name(n)), Some(v)) => Some((n.clone(), v.clone())),
            _ => None,
        })
        .collect()
}

fn named<'a>(packets: &'a [TracePacket], name: &str) -> Vec<&'a TracePacket> {
    packets
        .iter()
        .filter(|p| match &p.data {
            Some(trace_packet::Data::TrackEvent(e)) => {
                e.name_field == Some(track_event::Name_field::Name(name.into()))
            }
            _ => false,
        })
        .collect()
}

fn snapshots(packets: &[TracePacket]) -> Vec<Vec<(u32, u64)>> {
    packets
        .iter()
        .filter_map(|p| match &p.data {
            Some(trace_packet::Data::ClockSnapshot(s)) => Some(
                s.clocks
                    .iter()
                    .map(|c| (c.clock_id(), c.timestamp()))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

#[test]
fn a_window_is_a_slice_on_monotonic_with_its_bound_and_device_duration() {
    let out = Shared::default();
    let trace = Perfetto::new("test").to_writer(out.clone()).unwrap();
    let stream = trace.stream(trace.device("GPU"), "stream A");
    let t0 = Instant::now();
    assert!(trace.window(stream, "matmul", &window(t0, 300)));
    trace.finish().unwrap();
    let packets = packets(&out);
    let begin = named(&packets, "matmul");
    assert_eq!(begin.len(), 1);
    assert_eq!(begin[0].timestamp_clock_id(), 3, "CLOCK_MONOTONIC");
    let found = annotations(begin[0]);
    assert_eq!(
        found.get("bound_ns"),
        Some(&debug_annotation::Value::UintValue(1500))
    );
    assert_eq!(
        found.get("device_duration_ns"),
        Some(&debug_annotation::Value::UintValue(300_000))
    );
    let ends: Vec<u64> = packets
        .iter()
        .filter(|p| match &p.data {
            Some(trace_packet::Data::TrackEvent(e)) => {
                e.type_() == track_event::Type::TYPE_SLICE_END
            }
            _ => false,
        })
        .map(TracePacket::timestamp)
        .collect();
    assert!(ends.contains(&(begin[0].timestamp() + 300_000)), "{ends:?}");
}

#[test]
fn a_window_lies_where_clock_monotonic_read_it() {
    let out = Shared::default();
    let trace = Perfetto::new("test").to_writer(out.clone()).unwrap();
    let stream = trace.stream(trace.device("GPU"), "s");
    let monotonic = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid, writable timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let before = monotonic();
    let t0 = Instant::now();
    let after = monotonic();
    trace.window(stream, "w", &window(t0, 10));
    trace.finish().unwrap();
    let packets = packets(&out);
    let at = named(&packets, "w")[0].timestamp();
    // Within the reads either side, give or take the writer's own bracket
    // of an `Instant` (tens of ns; a millisecond allows for a preempted one).
    assert!(
        before - 1_000_000 <= at && at <= after + 1_000_000,
        "{before} <= {at} <= {after}"
    );
}

#[test]
fn clock_snapshots_pair_monotonic_with_boottime_and_realtime_at_start_and_end() {
    let out = Shared::default();
    let trace = Perfetto::new("test").to_writer(out.clone()).unwrap();
    trace.finish().unwrap();
    let snapshots = snapshots(&packets(&out));
    assert!(snapshots.len() >= 2, "{snapshots:?}");
    for snapshot in snapshots {
        let ids: Vec<u32> = snapshot.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [6, 3, 1], "BOOTTIME, MONOTONIC, REALTIME");
    }
}

#[test]
fn a_trace_held_open_has_a_clock_snapshot_about_every_second() {
    let out = Shared::default();
    let trace = Perfetto::new("test").to_writer(out.clone()).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    trace.finish().unwrap();
    // The start's, the end's, and at least one between, however late the
    // writer thread woke.
    assert!(snapshots(&packets(&out)).len() >= 3);
}

#[test]
fn streams_are_grouped_under_their_device_under_the_process() {
    let out = Shared::default();
    let trace = Perfetto::new("server").to_writer(out.clone()).unwrap();
    let gpu = trace.device("GPU 0");
    trace.stream(gpu, "stream A");
    trace.host_thread("main");
    trace.finish().unwrap();
    let tracks: Vec<_> = packets(&out)
        .into_iter()
        .filter_map(|p| match p.data {
            Some(trace_packet::Data::TrackDescriptor(t)) => Some(t),
            _ => None,
        })
        .collect();
    let process = tracks.iter().find(|t| t.process.is_some()).unwrap();
    assert_eq!(process.process.process_name(), "server");
    assert_eq!(
        process.process.pid(),
        i32::try_from(std::process::id()).unwrap()
    );
    let by_name = |name: &str| {
        tracks
            .iter()
            .find(|t| t.name() == name || t.thread.thread_name() == name)
            .unwrap()
    };
    assert_eq!(by_name("GPU 0").parent_uuid(), process.uuid());
    assert_eq!(by_name("stream A").parent_uuid(), by_name("GPU 0").uuid());
    assert_eq!(by_name("main").thread.pid(), process.process.pid());
}

#[test]
fn the_trace_names_its_machine_boot_and_host_clock() {
    let out = Shared::default();
    let trace = Perfetto::new("test").to_writer(out.clone()).unwrap();
    trace.finish().unwrap();
    let packets = packets(&out);
    let found = annotations(named(&packets, "machine")[0]);
    let text = |key: &str| match found.get(key) {
        Some(debug_annotation::Value::StringValue(s)) => s.clone(),
        other => panic!("{key}: {other:?}"),
    };
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(text("boot_id"), boot.trim());
    let machine = std::fs::read_to_string("/etc/machine-id").unwrap_or_default();
    assert_eq!(text("machine_id"), machine.trim());
    assert!(found.contains_key("host_clock_synchronised"));
}

#[test]
fn a_simulated_machine_is_never_taken_for_this_one() {
    let out = Shared::default();
    let trace = Perfetto::new("test")
        .simulated_machine(5_000_000, Duration::from_millis(10))
        .to_writer(out.clone())
        .unwrap();
    trace.finish().unwrap();
    let packets = packets(&out);
    let found = annotations(named(&packets, "machine")[0]);
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_ne!(
        found.get("boot_id"),
        Some(&debug_annotation::Value::StringValue(boot.trim().into()))
    );
}

#[test]
fn a_window_is_handed_over_without_an_allocation() {
    let out = Shared::default();
    let trace = Perfetto::new("test")
        .capacity(1000)
        .to_writer(out.clone())
        .unwrap();
    let stream = trace.stream(trace.device("GPU"), "s");
    let placed = window(Instant::now(), 10);
    let before = ALLOCATIONS.with(Cell::get);
    for _ in 0..100 {
        trace.window(stream, "w", &placed);
    }
    assert_eq!(ALLOCATIONS.with(Cell::get), before);
    trace.finish().unwrap();
}

#[test]
fn a_window_the_writer_has_no_room_for_is_dropped_and_counted_not_waited_for() {
    /// A writer that holds the writer thread until told.
    struct Held(Arc<Mutex<()>>);
    impl Write for Held {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            drop(self.0.lock().unwrap());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            drop(self.0.lock().unwrap());
            Ok(())
        }
    }
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let trace = Perfetto::new("test")
        .capacity(4)
        .to_writer(Held(Arc::clone(&gate)))
        .unwrap();
    let placed = window(Instant::now(), 10);
    let track = device_events_trace::Trace::new().device_track("unregistered");
    // The writer thread is held at its header's flush: four fit, the rest
    // do not.
    let handed = (0..20)
        .filter(|_| trace.window(track, "w", &placed))
        .count();
    drop(held);
    assert_eq!(handed, 4);
    assert_eq!(trace.finish().unwrap(), 20 - handed as u64);
}

#[test]
fn a_failing_writer_is_an_error_from_finish_not_a_panic() {
    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk full"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::Error::other("disk full"))
        }
    }
    let trace = Perfetto::new("test").to_writer(Broken).unwrap();
    let track = trace.host_thread("main");
    let now = Instant::now();
    trace.host_span(track, "s", now, now);
    assert!(trace.finish().is_err());
}

fn utc_interval(packet: &TracePacket) -> (i64, i64) {
    let found = annotations(packet);
    match (found.get("utc_earliest_ns"), found.get("utc_latest_ns")) {
        (
            Some(debug_annotation::Value::IntValue(earliest)),
            Some(debug_annotation::Value::IntValue(latest)),
        ) => (*earliest, *latest),
        other => panic!("no UTC interval: {other:?}"),
    }
}

fn realtime_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

#[test]
fn a_window_on_utc_is_an_interval_adding_the_host_clocks_stated_error_or_is_flagged_unsynchronised()
{
    let out = Shared::default();
    let trace = Perfetto::new("test").to_writer(out.clone()).unwrap();
    let clock = trace.host_clock().unwrap();
    let stream = trace.stream(trace.device("GPU"), "s");
    let before = realtime_ns();
    trace.window(stream, "w", &window(Instant::now(), 10));
    let after = realtime_ns();
    trace.finish().unwrap();
    let packets = packets(&out);
    let begin = named(&packets, "w")[0];
    if clock.synchronised {
        let (earliest, latest) = utc_interval(begin);
        assert!((latest - earliest) / 2 >= 1500 + clock.max_error.as_nanos() as i64);
        assert!(earliest <= after && before <= latest);
    } else {
        assert_eq!(
            annotations(begin).get("host_clock_synchronised"),
            Some(&debug_annotation::Value::BoolValue(false))
        );
    }
}

#[test]
fn a_simulated_machine_off_by_its_stated_error_still_holds_the_true_time() {
    let out = Shared::default();
    // Its REALTIME 8 ms ahead, stating 10 ms more error: still true.
    let trace = Perfetto::new("test")
        .simulated_machine(8_000_000, Duration::from_millis(10))
        .to_writer(out.clone())
        .unwrap();
    let stream = trace.stream(trace.device("GPU"), "s");
    let before = realtime_ns();
    trace.window(stream, "w", &window(Instant::now(), 10));
    let after = realtime_ns();
    trace.finish().unwrap();
    let packets = packets(&out);
    let (earliest, latest) = utc_interval(named(&packets, "w")[0]);
    assert!(
        earliest <= after && before <= latest,
        "{earliest} {before} {after} {latest}"
    );
}

#[test]
fn a_manifest_of_one_machine_lines_files_up_on_boottime_without_correction() {
    let clock = device_events_trace::HostClock {
        max_error: Duration::from_millis(1),
        est_error: Duration::ZERO,
        synchronised: false,
    };
    let manifest =
        device_events_trace::perfetto_manifest(&[("a", "m", Some(clock)), ("b", "m", None)])
            .unwrap();
    let manifest = &manifest["perfetto_manifest"];
    assert_eq!(manifest["version"], 1);
    assert_eq!(manifest["trace_time"]["clock"], "BOOTTIME");
    assert!(manifest["files"][0].get("clocks").is_none());
}

#[test]
fn a_manifest_across_machines_refuses_an_unsynchronised_clocks_file() {
    let clock = |synchronised| {
        Some(device_events_trace::HostClock {
            max_error: Duration::from_millis(1),
            est_error: Duration::ZERO,
            synchronised,
        })
    };
    let refused = device_events_trace::perfetto_manifest(&[
        ("a.pftrace", "m1", clock(true)),
        ("b.pftrace", "m2", clock(false)),
    ])
    .unwrap_err();
    assert!(refused.to_string().contains("b.pftrace"), "{refused}");
}

#[test]
fn a_manifest_across_synchronised_machines_lines_them_up_on_realtime() {
    let clock = Some(device_events_trace::HostClock {
        max_error: Duration::from_millis(1),
        est_error: Duration::ZERO,
        synchronised: true,
    });
    let manifest =
        device_events_trace::perfetto_manifest(&[("a", "m1", clock), ("b", "m2", clock)]).unwrap();
    assert_eq!(
        manifest["perfetto_manifest"]["trace_time"]["clock"],
        "REALTIME"
    );
}

#[test]
fn a_simulated_unsynchronised_machine_states_no_bound_on_utc() {
    let out = Shared::default();
    let trace = Perfetto::new("test")
        .simulated_unsynchronised_machine(8_000_000)
        .to_writer(out.clone())
        .unwrap();
    assert!(!trace.host_clock().unwrap().synchronised);
    let stream = trace.stream(trace.device("GPU"), "s");
    trace.window(stream, "w", &window(Instant::now(), 10));
    trace.finish().unwrap();
    let packets = packets(&out);
    let window = annotations(named(&packets, "w")[0]);
    assert!(!window.contains_key("utc_earliest_ns"));
    assert_eq!(
        window.get("host_clock_synchronised"),
        Some(&debug_annotation::Value::BoolValue(false))
    );
}
