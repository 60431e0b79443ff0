//! Perfetto output: device windows and host spans as track-event slices on
//! CLOCK_MONOTONIC, related to BOOTTIME and REALTIME by clock snapshots,
//! written by a thread of its own.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use device_events_core::Placement;
use perfetto_protos::clock_snapshot::{ClockSnapshot, clock_snapshot};
use perfetto_protos::debug_annotation::{DebugAnnotation, debug_annotation};
use perfetto_protos::process_descriptor::ProcessDescriptor;
use perfetto_protos::system_info::{SystemInfo, Utsname};
use perfetto_protos::thread_descriptor::ThreadDescriptor;
use perfetto_protos::trace::Trace;
use perfetto_protos::trace_packet::{TracePacket, trace_packet};
use perfetto_protos::track_descriptor::{TrackDescriptor, track_descriptor};
use perfetto_protos::track_event::{TrackEvent, track_event};
use protobuf::{EnumOrUnknown, Message, MessageField};

use crate::TrackId;
use crate::host::{self, HostClock, Identity, InstantBase, Snapshot};

/// How often the writer pairs MONOTONIC with BOOTTIME and REALTIME.
const SNAPSHOT_EVERY: Duration = Duration::from_secs(1);
/// The one packet sequence a writer writes.
const SEQUENCE: u32 = 1;

/// How a Perfetto trace file is written: the process's name, how many
/// records may wait for the writer thread, and where it goes.
///
/// ```
/// use device_events_core::Placement;
/// use device_events_trace::Perfetto;
/// use std::time::{Duration, Instant};
///
/// let dir = std::env::temp_dir().join(format!("perfetto-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let trace = Perfetto::new("server").create(dir.join("server.pftrace"))?;
/// let gpu = trace.device("GPU 0");
/// let stream = trace.stream(gpu, "stream A");
/// let main = trace.host_thread("main");
/// let t0 = Instant::now();
/// trace.host_span(main, "enqueue", t0, t0 + Duration::from_micros(40));
/// let window = Placement {
///     duration: Duration::from_micros(300),
///     start: t0 + Duration::from_micros(50),
///     end: t0 + Duration::from_micros(350),
///     uncertainty: Duration::from_micros(1),
/// };
/// assert!(trace.window(stream, "matmul", &window), "handed to the writer");
/// let dropped = trace.finish()?;
/// assert_eq!(dropped, 0);
/// assert!(std::fs::metadata(dir.join("server.pftrace"))?.len() > 0);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Perfetto {
    process_name: String,
    capacity: usize,
    /// A simulated machine's REALTIME offset and its stated error, `None`
    /// for a clock that says it is unsynchronised.
    simulated: Option<(i64, Option<Duration>)>,
}

impl Perfetto {
    /// A trace of the process `process_name`, holding up to 4096 records
    /// for the writer.
    pub fn new(process_name: impl Into<String>) -> Perfetto {
        Perfetto {
            process_name: process_name.into(),
            capacity: 4096,
            simulated: None,
        }
    }

    /// How many records may wait for the writer thread: one more is
    /// dropped, and counted, rather than wait.
    ///
    /// ```
    /// let trace = device_events_trace::Perfetto::new("p").capacity(16).to_writer(Vec::new())?;
    /// assert_eq!(trace.finish()?, 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn capacity(mut self, records: usize) -> Perfetto {
        self.capacity = records.max(1);
        self
    }

    /// Play another machine, for checks of a cross-machine merge: a
    /// synchronised one whose REALTIME is written `offset_ns` off this
    /// host's, stating `stated_error` against it, and whose machine and
    /// boot ids are this host's marked as simulated.
    #[doc(hidden)]
    pub fn simulated_machine(mut self, offset_ns: i64, stated_error: Duration) -> Perfetto {
        self.simulated = Some((offset_ns, Some(stated_error)));
        self
    }

    /// Play another machine, as [`simulated_machine`](Self::simulated_machine)
    /// does, whose clock says it is unsynchronised: its file states no
    /// bound against UTC.
    #[doc(hidden)]
    pub fn simulated_unsynchronised_machine(mut self, offset_ns: i64) -> Perfetto {
        self.simulated = Some((offset_ns, None));
        self
    }

    /// Write the trace to a new file at `path`.
    ///
    /// # Errors
    ///
    /// The file's creation, or the writer thread's start.
    pub fn create(self, path: impl AsRef<Path>) -> io::Result<PerfettoWriter> {
        let file = File::create(path)?;
        self.to_writer(file)
    }

    /// Write the trace to `out`, on a thread of its own.
    ///
    /// # Errors
    ///
    /// The writer thread's start.
    pub fn to_writer(self, out: impl Write + Send + 'static) -> io::Result<PerfettoWriter> {
        let (tx, rx) = std::sync::mpsc::sync_channel(self.capacity);
        let pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        let base = InstantBase::take();
        let mut identity = Identity::read();
        let mut clock = HostClock::read();
        if let Some((offset, error)) = self.simulated {
            // Distinct for each offset played: two played machines are two.
            let mark = format!("-simulated-{offset}");
            identity.machine_id.push_str(&mark);
            identity.boot_id.push_str(&mark);
            // A synchronised machine whose REALTIME is off this host's by
            // no more than it states: this host's REALTIME is its truth.
            clock = Some(HostClock {
                max_error: error.unwrap_or(Duration::ZERO),
                est_error: error.unwrap_or(Duration::ZERO),
                synchronised: error.is_some(),
            });
        }
        // Unique across the processes and boots of one merged timeline.
        let uuid_base = mix(u64::from(std::process::id())
            ^ host::now_ns(libc::CLOCK_REALTIME).rotate_left(17)
            ^ hash(&identity.boot_id));
        let shared = Arc::new(Shared {
            dropped: AtomicU64::new(0),
            tracks: AtomicUsize::new(0),
        });
        let writer = Writer {
            out: BufWriter::new(out),
            base,
            pid,
            process_uuid: uuid_base,
            uuid_base,
            clock,
            realtime_offset: self.simulated.map_or(0, |(offset, _)| offset),
            last: None,
            error: None,
        };
        let header = Header {
            process_name: self.process_name,
            identity,
        };
        let thread = std::thread::Builder::new()
            .name("perfetto writer".into())
            .spawn(move || writer.run(header, rx))?;
        Ok(PerfettoWriter {
            tx,
            shared,
            pid,
            thread: Mutex::new(Some(thread)),
            clock,
            id: uuid_base,
        })
    }
}

/// A Perfetto trace being written: tracks for devices, their streams and
/// host threads, grouped under this process, and slices on them. Made by
/// [`Perfetto`]. Every method takes `&self`; it is `Sync`, so threads may
/// share it.
///
/// Each window is a slice on CLOCK_MONOTONIC (which `Instant` reads on
/// Linux) with its stated bound (`bound_ns`), its device duration
/// (`device_duration_ns`) and, where the host clock is synchronised, its
/// start on UTC as an interval (`utc_earliest_ns`, `utc_latest_ns`) whose
/// half-width adds the host clock's stated error to the bound. Clock
/// snapshots pair MONOTONIC with BOOTTIME and REALTIME at the start, about
/// once a second and at the end; the machine and boot ids are the first
/// slice's annotations (`machine`, on the process's track).
#[derive(Debug)]
pub struct PerfettoWriter {
    tx: SyncSender<Record>,
    shared: Arc<Shared>,
    pid: i32,
    thread: Mutex<Option<JoinHandle<io::Result<()>>>>,
    clock: Option<HostClock>,
    id: u64,
}

#[derive(Debug)]
struct Shared {
    dropped: AtomicU64,
    tracks: AtomicUsize,
}

/// What the writer thread is handed. A slice is `Copy` and holds no heap
/// memory: handing one over allocates nothing.
enum Record {
    Track {
        index: usize,
        parent: Option<usize>,
        name: String,
        thread: Option<i32>,
    },
    Slice {
        track: usize,
        label: &'static str,
        start: Instant,
        end: Instant,
        window: Option<(Duration, Duration)>,
    },
    Finish,
}

impl PerfettoWriter {
    /// A track for a device, under this process: its streams go under it.
    pub fn device(&self, name: impl Into<String>) -> TrackId {
        self.track(None, name.into(), None)
    }

    /// A track for one of `device`'s streams.
    pub fn stream(&self, device: TrackId, name: impl Into<String>) -> TrackId {
        self.track(Some(device.0), name.into(), None)
    }

    /// A track for the calling thread, named `name`.
    pub fn host_thread(&self, name: impl Into<String>) -> TrackId {
        self.track(None, name.into(), Some(host::thread_id()))
    }

    fn track(&self, parent: Option<usize>, name: String, thread: Option<i32>) -> TrackId {
        let index = self.shared.tracks.fetch_add(1, Ordering::Relaxed);
        // A track is waited for rather than dropped: its slices need it.
        if self
            .tx
            .send(Record::Track {
                index,
                parent,
                name,
                thread,
            })
            .is_err()
        {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
        TrackId(index)
    }

    /// A device window, as its profiler placed it: handed to the writer
    /// thread without an allocation or a wait. False when it was dropped
    /// instead, the writer being that far behind or gone (counted, see
    /// [`finish`](Self::finish)).
    pub fn window(&self, track: TrackId, label: &'static str, placed: &Placement) -> bool {
        self.slice(
            track,
            label,
            placed.start,
            placed.end,
            Some((placed.duration, placed.uncertainty)),
        )
    }

    /// A host span from `start` to `end`, handed over as a window is.
    pub fn host_span(
        &self,
        track: TrackId,
        label: &'static str,
        start: Instant,
        end: Instant,
    ) -> bool {
        self.slice(track, label, start, end, None)
    }

    fn slice(
        &self,
        track: TrackId,
        label: &'static str,
        start: Instant,
        end: Instant,
        window: Option<(Duration, Duration)>,
    ) -> bool {
        let record = Record::Slice {
            track: track.0,
            label,
            start,
            end: end.max(start),
            window,
        };
        match self.tx.try_send(record) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// The host clock's state against UTC as it was read when the trace
    /// began (and as the trace states it); `None` where unreadable.
    pub fn host_clock(&self) -> Option<HostClock> {
        self.clock
    }

    /// This process's id, as the trace names it.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Write what is queued, a last clock snapshot, and close the file:
    /// what is handed over after is dropped. Returns how many records were
    /// dropped rather than waited for. Takes `&self`, so that a trace
    /// shared with a [`PerfettoLayer`](crate::PerfettoLayer) can be
    /// finished; dropping the last handle finishes it too.
    ///
    /// # Errors
    ///
    /// The first write that failed.
    pub fn finish(&self) -> io::Result<u64> {
        let thread = match self.thread.lock() {
            Ok(mut guard) => guard.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        let Some(thread) = thread else {
            return Ok(self.shared.dropped.load(Ordering::Relaxed));
        };
        let _ = self.tx.send(Record::Finish);
        let outcome = thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the Perfetto writer thread panicked")));
        outcome.map(|()| self.shared.dropped.load(Ordering::Relaxed))
    }

    /// Which writer this is, for a thread's cached track.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for PerfettoWriter {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

struct Header {
    process_name: String,
    identity: Identity,
}

struct Writer<W: Write> {
    out: BufWriter<W>,
    base: InstantBase,
    pid: i32,
    process_uuid: u64,
    uuid_base: u64,
    clock: Option<HostClock>,
    realtime_offset: i64,
    last: Option<Snapshot>,
    error: Option<io::Error>,
}

impl<W: Write> Writer<W> {
    fn run(mut self, header: Header, rx: Receiver<Record>) -> io::Result<()> {
        self.header(header);
        // On disk before the first window: a process that dies early still
        // leaves its machine and clocks.
        if let Err(err) = self.out.flush() {
            self.error.get_or_insert(err);
        }
        let mut next = Instant::now() + SNAPSHOT_EVERY;
        loop {
            match rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok(Record::Finish) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(record) => self.record(record),
                Err(RecvTimeoutError::Timeout) => {}
            }
            if Instant::now() >= next {
                self.snapshot();
                let _ = self.out.flush();
                next = Instant::now() + SNAPSHOT_EVERY;
            }
        }
        // Whatever was queued before the finish was taken above; a record
        // sent after it is counted as dropped by its sender.
        self.snapshot();
        if let Err(err) = self.out.flush() {
            self.error.get_or_insert(err);
        }
        self.error.map_or(Ok(()), Err)
    }

    fn header(&mut self, header: Header) {
        let mut first = TracePacket::new();
        first.first_packet_on_sequence = Some(true);
        // SEQ_INCREMENTAL_STATE_CLEARED: nothing on this sequence is interned.
        first.sequence_flags = Some(1);
        let mut uts = Utsname::new();
        // SAFETY: a zeroed `utsname` is valid; uname fills it or fails.
        let mut name: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: `name` is a valid, writable `utsname`.
        if unsafe { libc::uname(&mut name) } == 0 {
            let text = |field: &[libc::c_char]| {
                let bytes: Vec<u8> = field
                    .iter()
                    .take_while(|c| **c != 0)
                    .map(|c| *c as u8)
                    .collect();
                String::from_utf8_lossy(&bytes).into_owned()
            };
            uts.sysname = Some(text(&name.sysname));
            uts.release = Some(text(&name.release));
            uts.version = Some(text(&name.version));
            uts.machine = Some(text(&name.machine));
        }
        let mut info = SystemInfo::new();
        info.utsname = MessageField::some(uts);
        first.data = Some(trace_packet::Data::SystemInfo(info));
        self.packet(first);
        self.snapshot();

        let mut process = TrackDescriptor::new();
        process.uuid = Some(self.process_uuid);
        let mut descriptor = ProcessDescriptor::new();
        descriptor.pid = Some(self.pid);
        descriptor.process_name = Some(header.process_name);
        process.process = MessageField::some(descriptor);
        self.descriptor(process);

        // The machine, the boot and the clock, on the process's track.
        let now = self.base.monotonic_ns(Instant::now());
        let identity = header.identity;
        let mut annotations = vec![
            annotation("machine_id", Value::String(identity.machine_id)),
            annotation("boot_id", Value::String(identity.boot_id)),
            annotation("hostname", Value::String(identity.hostname)),
        ];
        match self.clock {
            Some(clock) => annotations.extend([
                annotation("host_clock_synchronised", Value::Bool(clock.synchronised)),
                annotation("host_clock_max_error_ns", Value::Uint(ns(clock.max_error))),
                annotation("host_clock_est_error_ns", Value::Uint(ns(clock.est_error))),
            ]),
            None => annotations.push(annotation(
                "host_clock_synchronised",
                Value::String("unknown: adjtimex unreadable".into()),
            )),
        }
        self.event(self.process_uuid, "machine", now, now, annotations);
    }

    fn record(&mut self, record: Record) {
        match record {
            Record::Track {
                index,
                parent,
                name,
                thread,
            } => {
                let mut track = TrackDescriptor::new();
                track.uuid = Some(self.uuid(index));
                if let Some(tid) = thread {
                    let mut descriptor = ThreadDescriptor::new();
                    descriptor.pid = Some(self.pid);
                    descriptor.tid = Some(tid);
                    descriptor.thread_name = Some(name);
                    track.thread = MessageField::some(descriptor);
                } else {
                    track.parent_uuid =
                        Some(parent.map_or(self.process_uuid, |parent| self.uuid(parent)));
                    track.static_or_dynamic_name =
                        Some(track_descriptor::Static_or_dynamic_name::Name(name));
                }
                self.descriptor(track);
            }
            Record::Slice {
                track,
                label,
                start,
                end,
                window,
            } => {
                let (start, end) = (self.base.monotonic_ns(start), self.base.monotonic_ns(end));
                let mut annotations = Vec::new();
                if let Some((duration, bound)) = window {
                    annotations.push(annotation("bound_ns", Value::Uint(ns(bound))));
                    annotations.push(annotation("device_duration_ns", Value::Uint(ns(duration))));
                    annotations.extend(self.utc(start, bound));
                }
                self.event(self.uuid(track), label, start, end, annotations);
            }
            Record::Finish => {}
        }
    }

    /// The start on UTC, as an interval whose half-width adds the host
    /// clock's stated error and the snapshot's spread to the window's
    /// bound; only where the kernel says the clock is synchronised.
    fn utc(&self, start: u64, bound: Duration) -> Vec<DebugAnnotation> {
        let (Some(clock), Some(snapshot)) = (self.clock, self.last) else {
            return vec![annotation(
                "host_clock_synchronised",
                Value::String("unknown".into()),
            )];
        };
        if !clock.synchronised {
            return vec![annotation("host_clock_synchronised", Value::Bool(false))];
        }
        let at = i128::from(snapshot.realtime) + i128::from(start) - i128::from(snapshot.monotonic);
        let half = i128::from(ns(bound) + ns(clock.max_error) + snapshot.spread.div_ceil(2));
        let clamp = |v: i128| i64::try_from(v).unwrap_or(i64::MAX);
        vec![
            annotation("utc_earliest_ns", Value::Int(clamp(at - half))),
            annotation("utc_latest_ns", Value::Int(clamp(at + half))),
        ]
    }

    fn uuid(&self, index: usize) -> u64 {
        mix(self.uuid_base ^ (index as u64 + 1))
    }

    fn snapshot(&mut self) {
        let mut snapshot = Snapshot::take();
        snapshot.realtime = snapshot
            .realtime
            .saturating_add_signed(self.realtime_offset);
        self.last = Some(snapshot);
        let mut clocks = ClockSnapshot::new();
        for (id, value) in [
            (host::BOOTTIME, snapshot.boottime),
            (host::MONOTONIC, snapshot.monotonic),
            (host::REALTIME, snapshot.realtime),
        ] {
            let mut clock = clock_snapshot::Clock::new();
            clock.clock_id = Some(id);
            clock.timestamp = Some(value);
            clocks.clocks.push(clock);
        }
        let mut packet = TracePacket::new();
        packet.timestamp = Some(snapshot.boottime);
        packet.timestamp_clock_id = Some(host::BOOTTIME);
        packet.data = Some(trace_packet::Data::ClockSnapshot(clocks));
        self.packet(packet);
    }

    fn descriptor(&mut self, track: TrackDescriptor) {
        let mut packet = TracePacket::new();
        packet.data = Some(trace_packet::Data::TrackDescriptor(track));
        self.packet(packet);
    }

    /// A slice: a begin at `start` with `annotations`, an end at `end`.
    fn event(
        &mut self,
        track: u64,
        name: &str,
        start: u64,
        end: u64,
        annotations: Vec<DebugAnnotation>,
    ) {
        for (at, kind, annotations) in [
            (start, track_event::Type::TYPE_SLICE_BEGIN, annotations),
            (end, track_event::Type::TYPE_SLICE_END, Vec::new()),
        ] {
            let mut event = TrackEvent::new();
            event.type_ = Some(EnumOrUnknown::new(kind));
            event.track_uuid = Some(track);
            if kind == track_event::Type::TYPE_SLICE_BEGIN {
                event.name_field = Some(track_event::Name_field::Name(name.to_owned()));
            }
            event.debug_annotations = annotations;
            let mut packet = TracePacket::new();
            packet.timestamp = Some(at);
            packet.timestamp_clock_id = Some(host::MONOTONIC);
            packet.data = Some(trace_packet::Data::TrackEvent(event));
            self.packet(packet);
        }
    }

    /// One packet, as a one-packet `Trace`: concatenated, they are the
    /// trace.
    fn packet(&mut self, mut packet: TracePacket) {
        if self.error.is_some() {
            return;
        }
        packet.optional_trusted_packet_sequence_id = Some(
            trace_packet::Optional_trusted_packet_sequence_id::TrustedPacketSequenceId(SEQUENCE),
        );
        let mut trace = Trace::new();
        trace.packet.push(packet);
        if let Err(err) = trace.write_to_writer(&mut self.out) {
            self.error = Some(io::Error::other(err));
        }
    }
}

enum Value {
    String(String),
    Bool(bool),
    Uint(u64),
    Int(i64),
}

fn annotation(name: &str, value: Value) -> DebugAnnotation {
    let mut annotation = DebugAnnotation::new();
    annotation.name_field = Some(debug_annotation::Name_field::Name(name.to_owned()));
    annotation.value = Some(match value {
        Value::String(s) => debug_annotation::Value::StringValue(s),
        Value::Bool(b) => debug_annotation::Value::BoolValue(b),
        Value::Uint(u) => debug_annotation::Value::UintValue(u),
        Value::Int(i) => debug_annotation::Value::IntValue(i),
    });
    annotation
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// splitmix64's finaliser: distinct inputs, well-spread uuids.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One file of a merge: its name in the archive, the machine it was
/// written on, and its host clock as its writer stated it
/// ([`PerfettoWriter::host_clock`]).
pub type ManifestFile<'a> = (&'a str, &'a str, Option<HostClock>);

/// A `perfetto_manifest` (Perfetto's JSON, version 1) merging `files` onto
/// one timeline: each file attributed to its machine, the timeline
/// BOOTTIME where every file is of one machine (the processes of one boot
/// share its clocks: nothing is corrected), else REALTIME.
///
/// To merge, pack the manifest (as `perfetto_manifest.json`) and the files
/// into one archive (`tar cf merged.tar perfetto_manifest.json *.pftrace`)
/// and open it in the Perfetto UI or `trace_processor`. That tool downloads
/// its binary from a host this project's machines cannot reach, so CI
/// reads every file with Perfetto's published schema instead of merging.
///
/// ```
/// use device_events_trace::{HostClock, perfetto_manifest};
/// use std::time::Duration;
///
/// let synced = Some(HostClock { max_error: Duration::from_millis(2), est_error: Duration::ZERO, synchronised: true });
/// let manifest = perfetto_manifest(&[("a.pftrace", "node-1", synced), ("b.pftrace", "node-1", synced)])?;
/// assert_eq!(manifest["perfetto_manifest"]["trace_time"]["clock"], "BOOTTIME");
/// assert_eq!(manifest["perfetto_manifest"]["files"][1]["machine"]["name"], "node-1");
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
///
/// Across machines, a file whose host clock is unsynchronised or
/// unknown: lined up on REALTIME it would be placed wrongly, so it is
/// refused, named in the error.
pub fn perfetto_manifest(files: &[ManifestFile<'_>]) -> io::Result<serde_json::Value> {
    let machines: std::collections::BTreeSet<&str> = files.iter().map(|f| f.1).collect();
    let across = machines.len() > 1;
    if across {
        let refused: Vec<&str> = files
            .iter()
            .filter(|f| !f.2.is_some_and(|clock| clock.synchronised))
            .map(|f| f.0)
            .collect();
        if !refused.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "refused for a merge across machines: the host clock of {} is unsynchronised \
                     or unknown, so REALTIME places it nowhere in particular",
                    refused.join(", ")
                ),
            ));
        }
    }
    let entries: Vec<serde_json::Value> = files
        .iter()
        .map(|(path, machine, _)| serde_json::json!({ "path": path, "machine": { "name": machine } }))
        .collect();
    Ok(serde_json::json!({
        "perfetto_manifest": {
            "version": 1,
            "trace_time": { "clock": if across { "REALTIME" } else { "BOOTTIME" } },
            "files": entries,
        }
    }))
}
