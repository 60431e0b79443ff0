//! Each stream's zones in the order they were reserved: a zone placed
//! early waits for the ones before it, a zone with no timing lets the rest
//! go, and each stream has a context of its own.

use std::borrow::Cow;
use std::collections::BTreeMap;

/// A pairing whose call took longer than this (ns) is taken again: Tracy
/// reads its clock somewhere inside the call, so the call's width bounds
/// the pairing's error.
const TIGHT: i64 = 2_000;
/// How many times a pairing is taken at most.
const TRIES: usize = 4;

/// How far back (ns) a GPU time may go before Tracy's server reads it as
/// its counter wrapping (`ProcessGpuTime`: `2^31` ticks, period 1 ns).
const WRAP: i64 = 1 << 31;

/// Where zones go: Tracy's client, or a test's record. Times are
/// nanoseconds on the writer's clock (see `Tracy`).
pub(crate) trait Sink {
    /// One GPU context.
    type Context;
    /// A context named `name`, its GPU time `now` paired with Tracy's own
    /// clock read in the call; `None` when Tracy makes no more.
    fn context(&mut self, name: &str, now: i64) -> Option<Self::Context>;
    /// One zone from `start` to `end`; false when Tracy refused it.
    fn zone(&mut self, context: &mut Self::Context, label: &str, start: i64, end: i64) -> bool;
    /// Pair `now` with Tracy's clock again, where the client can.
    fn sync(&mut self, context: &mut Self::Context, now: i64);
}

/// A placed window, as the writer uploads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Zone {
    pub(crate) label: Cow<'static, str>,
    pub(crate) start: i64,
    pub(crate) end: i64,
}

struct Stream<C> {
    context: Option<C>,
    /// The next zone to upload, by its place in the stream.
    next: u64,
    /// Zones placed ahead of `next`; `None`: a window with no timing.
    waiting: BTreeMap<u64, Option<Zone>>,
    /// The last GPU time uploaded to the context, as the server keeps it
    /// for its wrap check (0 after a context's creation or sync).
    last: i64,
}

/// The streams' contexts and their zones waiting for the ones before.
pub(crate) struct Order<S: Sink> {
    sink: S,
    streams: Vec<Stream<S::Context>>,
    dropped: u64,
}

impl<S: Sink> Order<S> {
    pub(crate) fn new(sink: S) -> Self {
        Self {
            sink,
            streams: Vec::new(),
            dropped: 0,
        }
    }

    /// The next stream, its context named `name` (none past Tracy's last),
    /// paired at creation and at once again where that call was wide;
    /// `clock` reads the writer's clock.
    pub(crate) fn stream(&mut self, name: &str, clock: &dyn Fn() -> i64) {
        let before = clock();
        let mut context = self.sink.context(name, before);
        match &mut context {
            Some(context) if clock() - before > TIGHT => Self::pair(&mut self.sink, context, clock),
            Some(_) => {}
            None => log::warn!("Tracy made no context for {name}: its windows make no zones"),
        }
        self.streams.push(Stream {
            context,
            next: 0,
            waiting: BTreeMap::new(),
            last: 0,
        });
    }

    /// Pair `context` again, until a call is narrow or the tries are spent.
    fn pair(sink: &mut S, context: &mut S::Context, clock: &dyn Fn() -> i64) {
        for _ in 0..TRIES {
            let before = clock();
            sink.sync(context, before);
            if clock() - before <= TIGHT {
                return;
            }
        }
    }

    /// The zone reserved `seq`-th on `stream` was placed (`None`: it has
    /// no timing): it and every zone it held back that is placed go up.
    pub(crate) fn placed(&mut self, stream: usize, seq: u64, zone: Option<Zone>) {
        let Some(s) = self.streams.get_mut(stream) else {
            self.dropped += u64::from(zone.is_some());
            return;
        };
        s.waiting.insert(seq, zone);
        while let Some(zone) = s.waiting.remove(&s.next) {
            s.next += 1;
            let Some(zone) = zone else { continue };
            // A start this far behind would read as a wrap and shift every
            // later zone of the context.
            let uploaded = zone.start >= s.last.saturating_sub(WRAP)
                && s.context.as_mut().is_some_and(|context| {
                    self.sink.zone(context, &zone.label, zone.start, zone.end)
                });
            if uploaded {
                s.last = zone.end;
            } else {
                self.dropped += 1;
            }
        }
    }

    /// Pair every context's GPU time with Tracy's clock again, each as
    /// tightly as a few tries allow.
    pub(crate) fn sync(&mut self, clock: &dyn Fn() -> i64) {
        for stream in &mut self.streams {
            if let Some(context) = &mut stream.context {
                Self::pair(&mut self.sink, context, clock);
                stream.last = 0;
            }
        }
    }

    /// Zones with timing that made no zone: no context, or too far back.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    #[cfg(test)]
    pub(crate) fn sink(&self) -> &S {
        &self.sink
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a sink was asked, in order.
    #[derive(Debug, PartialEq, Eq)]
    enum Call {
        Context(String),
        Zone(usize, &'static str, i64, i64),
        Sync(usize),
    }

    /// Records every call; makes at most `room` contexts.
    struct Record {
        calls: Vec<Call>,
        room: usize,
        made: usize,
    }

    impl Sink for Record {
        type Context = usize;
        fn context(&mut self, name: &str, _now: i64) -> Option<usize> {
            (self.made < self.room).then(|| {
                self.calls.push(Call::Context(name.to_owned()));
                self.made += 1;
                self.made - 1
            })
        }
        fn zone(&mut self, context: &mut usize, label: &str, start: i64, end: i64) -> bool {
            let label = if label == "a" { "a" } else { "b" };
            self.calls.push(Call::Zone(*context, label, start, end));
            true
        }
        fn sync(&mut self, context: &mut usize, _now: i64) {
            self.calls.push(Call::Sync(*context));
        }
    }

    fn order(room: usize) -> Order<Record> {
        Order::new(Record {
            calls: Vec::new(),
            room,
            made: 0,
        })
    }

    fn zone(start: i64) -> Option<Zone> {
        Some(Zone {
            label: Cow::Borrowed("a"),
            start,
            end: start + 10,
        })
    }

    fn zones(order: &Order<Record>) -> Vec<(usize, i64)> {
        order
            .sink()
            .calls
            .iter()
            .filter_map(|c| match c {
                Call::Zone(context, _, start, _) => Some((*context, *start)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn zones_go_up_in_the_order_reserved_whatever_the_order_placed() {
        let mut order = order(1);
        order.stream("s", &|| 0);
        order.placed(0, 2, zone(300));
        order.placed(0, 0, zone(100));
        order.placed(0, 1, zone(200));
        assert_eq!(zones(&order), [(0, 100), (0, 200), (0, 300)]);
    }

    #[test]
    fn a_pending_window_holds_the_later_ones_of_its_stream_back() {
        let mut order = order(1);
        order.stream("s", &|| 0);
        order.placed(0, 1, zone(200));
        order.placed(0, 2, zone(300));
        assert_eq!(zones(&order), [], "zone 0 is still pending");
        order.placed(0, 0, zone(100));
        assert_eq!(zones(&order), [(0, 100), (0, 200), (0, 300)]);
    }

    #[test]
    fn a_window_with_no_timing_makes_no_zone_and_holds_nothing_back() {
        let mut order = order(1);
        order.stream("s", &|| 0);
        order.placed(0, 1, zone(200));
        order.placed(0, 0, None);
        assert_eq!(zones(&order), [(0, 200)]);
        assert_eq!(order.dropped(), 0, "no timing is not a loss");
    }

    #[test]
    fn each_stream_gets_a_context_named_for_it() {
        let mut order = order(2);
        order.stream("stream A", &|| 0);
        order.stream("stream B", &|| 0);
        order.placed(1, 0, zone(100));
        order.placed(0, 0, zone(50));
        let calls = &order.sink().calls;
        assert_eq!(calls[0], Call::Context("stream A".into()));
        assert_eq!(calls[1], Call::Context("stream B".into()));
        assert_eq!(zones(&order), [(1, 100), (0, 50)]);
    }

    #[test]
    fn a_pending_window_holds_back_no_other_stream() {
        let mut order = order(2);
        order.stream("A", &|| 0);
        order.stream("B", &|| 0);
        order.placed(0, 1, zone(200));
        order.placed(1, 0, zone(100));
        assert_eq!(zones(&order), [(1, 100)]);
    }

    #[test]
    fn a_stream_past_tracys_last_context_drops_its_zones_and_counts_them() {
        let mut order = order(1);
        order.stream("A", &|| 0);
        order.stream("B", &|| 0);
        order.placed(1, 0, zone(100));
        order.placed(1, 1, None);
        order.placed(0, 0, zone(100));
        assert_eq!(zones(&order), [(0, 100)]);
        assert_eq!(order.dropped(), 1);
    }

    #[test]
    fn a_zone_starting_over_2_1_s_before_the_last_time_uploaded_is_dropped() {
        let mut order = order(1);
        order.stream("A", &|| 0);
        let far = 10 * WRAP;
        order.placed(0, 0, zone(far));
        order.placed(0, 1, zone(far + 10 - WRAP - 1));
        order.placed(0, 2, zone(far + 10 - WRAP));
        assert_eq!(zones(&order), [(0, far), (0, far + 10 - WRAP)]);
        assert_eq!(order.dropped(), 1);
    }

    /// A clock whose successive reads are `reads`, then stands still.
    fn clock(reads: Vec<i64>) -> impl Fn() -> i64 {
        let reads = std::cell::RefCell::new(reads.into_iter());
        let last = std::cell::Cell::new(0);
        move || {
            let next = reads.borrow_mut().next().unwrap_or(last.get());
            last.set(next);
            next
        }
    }

    fn syncs(order: &Order<Record>) -> usize {
        order
            .sink()
            .calls
            .iter()
            .filter(|c| matches!(c, Call::Sync(_)))
            .count()
    }

    #[test]
    fn a_pairing_whose_call_was_wide_is_taken_again_until_narrow() {
        let mut order = order(1);
        order.stream("A", &|| 0);
        // Bracket widths: 5 µs, 3 µs, then 0.1 µs.
        order.sync(&clock(vec![0, 5_000, 10_000, 13_000, 20_000, 20_100]));
        assert_eq!(syncs(&order), 3);
    }

    #[test]
    fn a_pairing_is_taken_at_most_four_times() {
        let mut order = order(1);
        order.stream("A", &|| 0);
        order.sync(&clock((0..20).map(|i| i * 10_000).collect()));
        assert_eq!(syncs(&order), TRIES);
    }

    #[test]
    fn a_context_made_in_a_wide_call_is_paired_again_at_once() {
        let mut order = order(1);
        order.stream("A", &clock(vec![0, 9_000, 10_000, 10_100]));
        assert_eq!(syncs(&order), 1);
    }

    #[test]
    fn a_sync_reaches_every_context_and_clears_the_wrap_check() {
        let mut order = order(2);
        order.stream("A", &|| 0);
        order.stream("B", &|| 0);
        order.placed(0, 0, zone(10 * WRAP));
        order.sync(&|| 20 * WRAP);
        order.placed(0, 1, zone(WRAP));
        assert!(order.sink().calls.contains(&Call::Sync(0)));
        assert!(order.sink().calls.contains(&Call::Sync(1)));
        assert_eq!(zones(&order), [(0, 10 * WRAP), (0, WRAP)]);
    }
}
