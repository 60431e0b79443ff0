//! Placed windows as Tracy GPU zones: a context per stream, each stream's
//! zones in the order reserved, written by a thread of its own.

mod client;
mod order;

use std::borrow::Cow;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use device_events_core::Placement;

use crate::TrackId;
use order::{Order, Sink, Zone};

/// Tracy makes at most this many GPU contexts in a process (a `u8` id),
/// its other users' included.
const MAX_CONTEXTS: usize = 255;
/// How often each context's GPU time is paired with Tracy's clock again.
const SYNC_EVERY: Duration = Duration::from_secs(1);

/// How placed windows become Tracy GPU zones: how many may wait for the
/// writer thread.
///
/// Each stream is a GPU context of its own, named for it: Tracy nests the
/// zones of one context, which windows of concurrent streams do not. A
/// window's "GPU time" is its placement, already on the host clock:
/// nanoseconds of `Instant`'s clock, paired with the clock of Tracy's CPU
/// zones (its TSC reads on x86-64) when the context is made and, with
/// `tracy-client` 0.18.4 or later, again every second, so that the two
/// clocks' drift over a long capture is taken out. Tracy reads its clock
/// inside the call, so the call's width bounds a pairing's error: one
/// wider than 2 µs is taken again, up to four times.
///
/// ```
/// use device_events_core::Placement;
/// use device_events_trace::Tracy;
/// use std::time::{Duration, Instant};
///
/// let tracy = Tracy::new().start()?;
/// let stream = tracy.stream("stream A");
/// // Reserved in the stream's order, when the window closes...
/// let zone = tracy.zone(stream, "matmul");
/// let t0 = Instant::now();
/// let window = Placement {
///     duration: Duration::from_micros(300),
///     start: t0,
///     end: t0 + Duration::from_micros(300),
///     uncertainty: Duration::from_micros(1),
/// };
/// // ...placed when it resolves (`None`: no timing, no zone).
/// assert!(zone.place(Some(&window)), "handed to the writer");
/// assert_eq!(tracy.finish(), 0, "nothing dropped");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Tracy {
    capacity: usize,
}

impl Default for Tracy {
    fn default() -> Self {
        Self::new()
    }
}

impl Tracy {
    /// Up to 4096 zones reserved and not yet written.
    pub fn new() -> Tracy {
        Tracy { capacity: 4096 }
    }

    /// How many zones may be reserved and not yet written: one more is
    /// refused, and counted, rather than wait.
    ///
    /// ```
    /// let tracy = device_events_trace::Tracy::new().capacity(1).start()?;
    /// let stream = tracy.stream("s");
    /// let first = tracy.zone(stream, "a");
    /// let refused = tracy.zone(stream, "b");
    /// drop((first, refused));
    /// assert_eq!(tracy.finish(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn capacity(mut self, zones: usize) -> Tracy {
        self.capacity = zones.max(1);
        self
    }

    /// Start Tracy's client (if it is not running) and the writer thread.
    ///
    /// # Errors
    ///
    /// The writer thread's start.
    pub fn start(self) -> io::Result<TracyWriter> {
        let client = client::Client::start();
        self.start_with(client)
    }

    fn start_with<S: Sink + Send + 'static>(self, sink: S) -> io::Result<TracyWriter> {
        // Room for every zone reserved, every stream's context and the
        // finish: a zone's one message never finds the queue full.
        let (tx, rx) = std::sync::mpsc::sync_channel(self.capacity + MAX_CONTEXTS + 1);
        let shared = Arc::new(Shared {
            dropped: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            streams: AtomicUsize::new(0),
            next: (0..MAX_CONTEXTS).map(|_| AtomicU64::new(0)).collect(),
        });
        // An hour back: windows placed before the writer started still
        // have positive GPU times, as Tracy's wrap check expects.
        let now = Instant::now();
        let origin = now.checked_sub(Duration::from_secs(3600)).unwrap_or(now);
        let writer = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("tracy writer".into())
            .spawn(move || write(Order::new(sink), origin, &rx, &writer))?;
        Ok(TracyWriter {
            tx,
            shared,
            capacity: self.capacity,
            thread: Mutex::new(Some(thread)),
        })
    }
}

/// Placed windows going to Tracy as GPU zones, a context per stream. Made
/// by [`Tracy`]; every method takes `&self`, and it is `Sync`.
///
/// A window's zone is reserved with [`zone`](Self::zone) in its stream's
/// order (where the window closes) and placed with [`TracyZone::place`]
/// once it resolves, in any order and on any thread: a stream's zones go
/// up in the order reserved, a zone still unplaced holding back the later
/// ones of its stream and no other. Chained windows are consecutive
/// zones. Tracy wants a context's times in increasing order: on one
/// stream, a window starting before an earlier-closed one ended (one
/// enclosing nested windows) makes no zone, and is counted. Reserving and placing allocate nothing and never wait; Tracy's
/// own calls are made on the writer thread.
#[derive(Debug)]
pub struct TracyWriter {
    tx: SyncSender<Record>,
    shared: Arc<Shared>,
    capacity: usize,
    thread: Mutex<Option<JoinHandle<u64>>>,
}

#[derive(Debug)]
struct Shared {
    dropped: AtomicU64,
    /// Zones reserved and not yet uploaded or dropped by the writer.
    in_flight: AtomicUsize,
    streams: AtomicUsize,
    /// Each stream's next place in its order.
    next: Box<[AtomicU64]>,
}

/// A window's label, start, end and uncertainty.
type Placed = (Cow<'static, str>, Instant, Instant, Duration);

/// What the writer thread is handed; a zone holds no heap memory but a
/// label its caller made.
enum Record {
    Stream(usize, String),
    Zone {
        stream: usize,
        seq: u64,
        placed: Option<Placed>,
    },
    Finish,
}

impl TracyWriter {
    /// A stream, as a GPU context named `name`. Past Tracy's 255 contexts
    /// in the process its zones are dropped and counted, with a warning.
    pub fn stream(&self, name: impl Into<String>) -> TrackId {
        let index = self.shared.streams.fetch_add(1, Ordering::Relaxed);
        // A stream is waited for rather than dropped: its zones need it.
        if index < MAX_CONTEXTS && self.tx.send(Record::Stream(index, name.into())).is_err() {
            log::warn!("the Tracy writer is gone: a stream made no context");
        }
        TrackId(index)
    }

    /// A zone's place in `stream`'s order, for the window closing there
    /// now, named `label`: a `&'static str` costs nothing, a `String` (a
    /// kernel's name) is moved, not copied. A zone refused (the writer
    /// `capacity` behind, the stream past Tracy's last context) places
    /// nothing and is counted; one placed after the writer finished is
    /// counted too.
    pub fn zone(&self, stream: TrackId, label: impl Into<Cow<'static, str>>) -> TracyZone {
        let seq = self.shared.next.get(stream.0).and_then(|next| {
            if self.shared.in_flight.fetch_add(1, Ordering::AcqRel) >= self.capacity {
                self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                return None;
            }
            Some(next.fetch_add(1, Ordering::AcqRel))
        });
        if seq.is_none() {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
        TracyZone {
            tx: seq.map(|_| self.tx.clone()),
            stream: stream.0,
            seq: seq.unwrap_or(0),
            label: label.into(),
            shared: Arc::clone(&self.shared),
        }
    }

    /// Write every zone placed, and stop: a zone placed after is dropped.
    /// Returns how many windows with timing made no zone, so far: for
    /// lack of room or of a context, placed after the finish, still held
    /// back by an unplaced one, or (on one stream) starting before an
    /// earlier-closed window ended, as a window enclosing nested ones
    /// does. Dropping the writer finishes it too.
    pub fn finish(&self) -> u64 {
        let thread = match self.thread.lock() {
            Ok(mut guard) => guard.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(thread) = thread {
            let _ = self.tx.send(Record::Finish);
            match thread.join() {
                Ok(dropped) => {
                    self.shared.dropped.fetch_add(dropped, Ordering::Relaxed);
                }
                Err(_) => log::error!("the Tracy writer panicked: its zones' count is lost"),
            }
        }
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for TracyWriter {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// A window's place in its stream's zones, from [`TracyWriter::zone`].
/// Dropped unplaced, it is a window with no timing: it holds nothing back.
#[must_use = "an unplaced zone makes none"]
#[derive(Debug)]
pub struct TracyZone {
    tx: Option<SyncSender<Record>>,
    stream: usize,
    seq: u64,
    label: Cow<'static, str>,
    shared: Arc<Shared>,
}

impl TracyZone {
    /// The window's placement (`None`: it has no timing, and makes no
    /// zone), handed to the writer without an allocation or a wait. False
    /// when the zone was refused or the writer is finished.
    pub fn place(mut self, placed: Option<&Placement>) -> bool {
        let label = std::mem::take(&mut self.label);
        self.send(placed.map(|p| (label, p.start, p.end.max(p.start), p.uncertainty)))
    }

    fn send(&mut self, placed: Option<Placed>) -> bool {
        let Some(tx) = self.tx.take() else {
            return false;
        };
        let timed = placed.is_some();
        let record = Record::Zone {
            stream: self.stream,
            seq: self.seq,
            placed,
        };
        match tx.try_send(record) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                // A window with no timing is no loss.
                self.shared
                    .dropped
                    .fetch_add(u64::from(timed), Ordering::Relaxed);
                false
            }
        }
    }
}

impl Drop for TracyZone {
    fn drop(&mut self) {
        self.send(None);
    }
}

/// Nanoseconds from `origin` to `at`, on `Instant`'s clock.
fn ticks(origin: Instant, at: Instant) -> i64 {
    let ns = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    match at.checked_duration_since(origin) {
        Some(after) => ns(after),
        None => ns(origin.duration_since(at)).saturating_neg(),
    }
}

/// The writer thread: contexts, zones in order, a sync every second.
/// Returns how many zones with timing it dropped, those it had not
/// uploaded when told to finish included.
fn write<S: Sink>(
    mut order: Order<S>,
    origin: Instant,
    rx: &Receiver<Record>,
    shared: &Shared,
) -> u64 {
    let clock = || ticks(origin, Instant::now());
    let mut next_sync = Instant::now() + SYNC_EVERY;
    loop {
        match rx.recv_timeout(next_sync.saturating_duration_since(Instant::now())) {
            Ok(Record::Finish) | Err(RecvTimeoutError::Disconnected) => break,
            Ok(Record::Stream(index, name)) => order.stream(index, &name, &clock),
            Ok(Record::Zone {
                stream,
                seq,
                placed,
            }) => {
                // A zone waiting behind an unplaced one still counts
                // against the capacity: the waiting stay bounded.
                let before = order.waiting();
                let zone = placed.map(|(label, start, end, uncertainty)| Zone {
                    label,
                    start: ticks(origin, start),
                    end: ticks(origin, end),
                    slack: ticks(origin, origin + uncertainty),
                });
                order.placed(stream, seq, zone);
                let released = (before + 1).saturating_sub(order.waiting());
                shared.in_flight.fetch_sub(released, Ordering::AcqRel);
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        if Instant::now() >= next_sync {
            order.sync(&clock);
            next_sync = Instant::now() + SYNC_EVERY;
        }
    }
    // Zones queued behind the finish were placed too late.
    let late = rx
        .try_iter()
        .filter(|r| {
            matches!(
                r,
                Record::Zone {
                    placed: Some(_),
                    ..
                }
            )
        })
        .count();
    order.finish();
    order.dropped() + late as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use device_events_core::{EventProfiler, OwnedStream, sim::Sim};

    /// A zone written: its context, start and end.
    type Written = (usize, i64, i64);

    /// The labels of the zones written.
    #[derive(Clone, Default)]
    struct Labels(Arc<Mutex<Vec<String>>>);

    impl Sink for Labels {
        type Context = ();
        fn context(&mut self, _name: &str, _now: i64) -> Option<()> {
            Some(())
        }
        fn zone(&mut self, _context: &mut (), label: &str, _start: i64, _end: i64) -> bool {
            self.0.lock().map(|mut l| l.push(label.to_owned())).is_ok()
        }
        fn sync(&mut self, _context: &mut (), _now: i64) {}
    }

    #[test]
    fn a_zone_named_at_run_time_keeps_its_name() -> io::Result<()> {
        let labels = Labels::default();
        let tracy = Tracy::new().start_with(labels.clone())?;
        let stream = tracy.stream("s");
        let kernel = format!("matmul_{}x{}", 64, 32);
        let first = placement(Instant::now(), 1);
        assert!(tracy.zone(stream, kernel).place(Some(&first)));
        let second = placement(first.end, 1);
        assert!(tracy.zone(stream, "static").place(Some(&second)));
        assert_eq!(tracy.finish(), 0);
        let written = labels.0.lock().map(|l| l.clone()).unwrap_or_default();
        assert_eq!(written, ["matmul_64x32", "static"]);
        Ok(())
    }

    /// The contexts' names, and the zones written.
    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<(Vec<String>, Vec<Written>)>>);

    impl Sink for Seen {
        type Context = usize;
        fn context(&mut self, name: &str, _now: i64) -> Option<usize> {
            let mut seen = self.0.lock().ok()?;
            seen.0.push(name.to_owned());
            Some(seen.0.len() - 1)
        }
        fn zone(&mut self, context: &mut usize, _label: &str, start: i64, end: i64) -> bool {
            self.0
                .lock()
                .map(|mut seen| seen.1.push((*context, start, end)))
                .is_ok()
        }
        fn sync(&mut self, _context: &mut usize, _now: i64) {}
    }

    impl Seen {
        fn zones(&self) -> Vec<Written> {
            self.0.lock().map(|seen| seen.1.clone()).unwrap_or_default()
        }
    }

    fn placement(start: Instant, micros: u64) -> Placement {
        Placement {
            duration: Duration::from_micros(micros),
            start,
            end: start + Duration::from_micros(micros),
            uncertainty: Duration::ZERO,
        }
    }

    #[test]
    fn a_zone_dropped_unplaced_lets_the_later_zones_of_its_stream_go() -> io::Result<()> {
        let seen = Seen::default();
        let tracy = Tracy::new().start_with(seen.clone())?;
        let stream = tracy.stream("s");
        let first = tracy.zone(stream, "first");
        let second = tracy.zone(stream, "second");
        assert!(second.place(Some(&placement(Instant::now(), 5))));
        drop(first);
        assert_eq!(tracy.finish(), 0);
        assert_eq!(seen.zones().len(), 1);
        Ok(())
    }

    #[test]
    fn a_zone_spans_exactly_its_placed_ends_in_nanoseconds() -> io::Result<()> {
        let seen = Seen::default();
        let tracy = Tracy::new().start_with(seen.clone())?;
        let stream = tracy.stream("s");
        let first = placement(Instant::now(), 7);
        let second = placement(first.start + Duration::from_nanos(12_345), 3);
        assert!(tracy.zone(stream, "a").place(Some(&first)));
        assert!(tracy.zone(stream, "b").place(Some(&second)));
        assert_eq!(tracy.finish(), 0);
        let zones = seen.zones();
        assert_eq!(zones[0].2 - zones[0].1, 7_000);
        assert_eq!(zones[1].1 - zones[0].1, 12_345);
        assert_eq!(zones[1].2 - zones[1].1, 3_000);
        Ok(())
    }

    #[test]
    fn a_stream_past_the_255th_makes_no_context_and_its_zones_count_as_dropped() -> io::Result<()> {
        let seen = Seen::default();
        let tracy = Tracy::new().start_with(seen.clone())?;
        let streams: Vec<TrackId> = (0..=MAX_CONTEXTS)
            .map(|i| tracy.stream(format!("s{i}")))
            .collect();
        let last = streams[MAX_CONTEXTS];
        assert!(
            !tracy
                .zone(last, "a")
                .place(Some(&placement(Instant::now(), 1)))
        );
        assert_eq!(tracy.finish(), 1);
        assert_eq!(seen.0.lock().map(|s| s.0.len()).unwrap_or(0), MAX_CONTEXTS);
        Ok(())
    }

    #[test]
    fn zones_held_back_at_the_finish_are_counted_as_dropped() -> io::Result<()> {
        let seen = Seen::default();
        let tracy = Tracy::new().start_with(seen.clone())?;
        let stream = tracy.stream("s");
        let first = tracy.zone(stream, "never placed before the finish");
        assert!(
            tracy
                .zone(stream, "held back")
                .place(Some(&placement(Instant::now(), 1)))
        );
        assert_eq!(tracy.finish(), 1);
        assert_eq!(seen.zones().len(), 0);
        drop(first);
        assert_eq!(
            tracy.finish(),
            1,
            "no timing is no loss, and the count stays"
        );
        Ok(())
    }

    #[test]
    fn zones_held_back_count_against_the_capacity() -> io::Result<()> {
        let seen = Seen::default();
        let tracy = Tracy::new().capacity(3).start_with(seen.clone())?;
        let held = tracy.stream("held");
        let other = tracy.stream("other");
        let first = tracy.zone(held, "unplaced");
        assert!(
            tracy
                .zone(held, "waiting")
                .place(Some(&placement(Instant::now(), 1)))
        );
        assert!(
            tracy
                .zone(other, "goes up")
                .place(Some(&placement(Instant::now(), 1)))
        );
        // The writer took "waiting" before "goes up", placed after it.
        while seen.zones().is_empty() {
            std::thread::yield_now();
        }
        let third = tracy.zone(other, "third of three");
        let refused = tracy.zone(other, "a fourth");
        assert!(!refused.place(Some(&placement(Instant::now(), 1))));
        drop((first, third));
        assert_eq!(tracy.finish(), 1);
        Ok(())
    }

    #[test]
    fn chained_windows_are_consecutive_zones_end_to_start() -> Result<(), Box<dyn std::error::Error>>
    {
        let seen = Seen::default();
        let tracy = Tracy::new().start_with(seen.clone())?;
        let track = tracy.stream("s");
        let stream = OwnedStream::<Sim>::new()?;
        let s = stream.get();
        let mut profiler = EventProfiler::<Sim>::new();
        let mut token = profiler.start(s);
        let mut windows = Vec::new();
        for _ in 0..4 {
            Sim::enqueue_work(s, Duration::from_micros(50));
            let (closed, next) = profiler.split(s, token)?;
            windows.push((tracy.zone(track, "kernel"), closed));
            token = next;
        }
        profiler.abandon(token)?;
        // Resolved last first: the zones still go up in the chain's order.
        for (zone, window) in windows.into_iter().rev() {
            assert!(zone.place(pollster::block_on(window).as_ref()));
        }
        assert_eq!(tracy.finish(), 0);
        let zones = seen.zones();
        assert_eq!(zones.len(), 4);
        for pair in zones.windows(2) {
            let gap = pair[1].1 - pair[0].2;
            assert!(
                gap.abs() <= 1_000,
                "one boundary, placed twice: {gap} ns apart"
            );
        }
        drop(profiler);
        Ok(())
    }
}
