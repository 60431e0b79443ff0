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
/// its counter wrapping (`ProcessGpuTime`: `2^31` ticks, period 1 ns):
/// a context's times only go forward here, so none does.
#[cfg(test)]
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
    /// The placement's uncertainty (ns): how far two placements of one
    /// boundary may disagree.
    pub(crate) slack: i64,
}

struct Stream<C> {
    context: Option<C>,
    /// The next zone to upload, by its place in the stream.
    next: u64,
    /// Zones placed ahead of `next`; `None`: a window with no timing.
    waiting: BTreeMap<u64, Option<Zone>>,
    /// The end of the last zone uploaded, and its uncertainty: Tracy
    /// wants a context's times in increasing order.
    end: i64,
    slack: i64,
}

/// The streams' contexts and their zones waiting for the ones before.
pub(crate) struct Order<S: Sink> {
    sink: S,
    /// By the stream's index; `None`: its record has not come yet.
    streams: Vec<Option<Stream<S::Context>>>,
    dropped: u64,
    /// Zones waiting, on every stream.
    waiting: usize,
}

impl<S: Sink> Order<S> {
    pub(crate) fn new(sink: S) -> Self {
        Self {
            sink,
            streams: Vec::new(),
            dropped: 0,
            waiting: 0,
        }
    }

    /// Stream `index`, its context named `name` (none past Tracy's last),
    /// paired at creation and at once again where that call was wide;
    /// `clock` reads the writer's clock. Streams made on several threads
    /// at once may come out of their indices' order.
    pub(crate) fn stream(&mut self, index: usize, name: &str, clock: &dyn Fn() -> i64) {
        let before = clock();
        let mut context = self.sink.context(name, before);
        match &mut context {
            Some(context) if clock() - before > TIGHT => Self::pair(&mut self.sink, context, clock),
            Some(_) => {}
            None => log::warn!("Tracy made no context for {name}: its windows make no zones"),
        }
        if self.streams.len() <= index {
            self.streams.resize_with(index + 1, || None);
        }
        self.streams[index] = Some(Stream {
            context,
            next: 0,
            waiting: BTreeMap::new(),
            end: i64::MIN,
            slack: 0,
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
    ///
    /// A zone must start where the last one ended or later: a window
    /// closes (and is reserved) after the windows nested in it, so on one
    /// stream a window starting before an earlier-closed one ended makes
    /// no zone and is counted, unless it is the same boundary placed twice
    /// (within the two placements' uncertainties), when it starts at that
    /// end.
    pub(crate) fn placed(&mut self, stream: usize, seq: u64, zone: Option<Zone>) {
        let Some(s) = self.streams.get_mut(stream).and_then(Option::as_mut) else {
            self.dropped += u64::from(zone.is_some());
            return;
        };
        if s.waiting.insert(seq, zone).is_none() {
            self.waiting += 1;
        }
        while let Some(zone) = s.waiting.remove(&s.next) {
            self.waiting -= 1;
            s.next += 1;
            let Some(mut zone) = zone else { continue };
            if zone.start < s.end {
                if zone.start < s.end.saturating_sub(s.slack.saturating_add(zone.slack)) {
                    self.dropped += 1;
                    continue;
                }
                zone.start = s.end;
                zone.end = zone.end.max(zone.start);
            }
            // Times only going forward, none reads to the server as its
            // counter wrapping.
            let uploaded = s
                .context
                .as_mut()
                .is_some_and(|context| self.sink.zone(context, &zone.label, zone.start, zone.end));
            if uploaded {
                s.end = zone.end;
                s.slack = zone.slack;
            } else {
                self.dropped += 1;
            }
        }
    }

    /// Zones placed or reserved-and-unplaced that wait for an earlier one
    /// of their stream.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting
    }

    /// The writer stops: every zone still waiting, with timing, is lost.
    pub(crate) fn finish(&mut self) {
        for s in self.streams.iter_mut().flatten() {
            let lost = s.waiting.values().filter(|z| z.is_some()).count();
            self.dropped += lost as u64;
            s.waiting.clear();
        }
        self.waiting = 0;
    }

    /// Pair every context's GPU time with Tracy's clock again, each as
    /// tightly as a few tries allow.
    pub(crate) fn sync(&mut self, clock: &dyn Fn() -> i64) {
        for stream in self.streams.iter_mut().flatten() {
            if let Some(context) = &mut stream.context {
                Self::pair(&mut self.sink, context, clock);
            }
        }
    }

    /// Zones with timing that made no zone: no context, too far back,
    /// starting before the last one ended, or waiting at the finish.
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
            slack: 0,
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
        order.stream(0, "s", &|| 0);
        order.placed(0, 2, zone(300));
        order.placed(0, 0, zone(100));
        order.placed(0, 1, zone(200));
        assert_eq!(zones(&order), [(0, 100), (0, 200), (0, 300)]);
    }

    #[test]
    fn a_pending_window_holds_the_later_ones_of_its_stream_back() {
        let mut order = order(1);
        order.stream(0, "s", &|| 0);
        order.placed(0, 1, zone(200));
        order.placed(0, 2, zone(300));
        assert_eq!(zones(&order), [], "zone 0 is still pending");
        order.placed(0, 0, zone(100));
        assert_eq!(zones(&order), [(0, 100), (0, 200), (0, 300)]);
    }

    #[test]
    fn a_window_with_no_timing_makes_no_zone_and_holds_nothing_back() {
        let mut order = order(1);
        order.stream(0, "s", &|| 0);
        order.placed(0, 1, zone(200));
        order.placed(0, 0, None);
        assert_eq!(zones(&order), [(0, 200)]);
        assert_eq!(order.dropped(), 0, "no timing is not a loss");
    }

    #[test]
    fn each_stream_gets_a_context_named_for_it() {
        let mut order = order(2);
        order.stream(0, "stream A", &|| 0);
        order.stream(1, "stream B", &|| 0);
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
        order.stream(0, "A", &|| 0);
        order.stream(1, "B", &|| 0);
        order.placed(0, 1, zone(200));
        order.placed(1, 0, zone(100));
        assert_eq!(zones(&order), [(1, 100)]);
    }

    #[test]
    fn a_stream_past_tracys_last_context_drops_its_zones_and_counts_them() {
        let mut order = order(1);
        order.stream(0, "A", &|| 0);
        order.stream(1, "B", &|| 0);
        order.placed(1, 0, zone(100));
        order.placed(1, 1, None);
        order.placed(0, 0, zone(100));
        assert_eq!(zones(&order), [(0, 100)]);
        assert_eq!(order.dropped(), 1);
    }

    fn span(start: i64, end: i64, slack: i64) -> Option<Zone> {
        Some(Zone {
            label: Cow::Borrowed("a"),
            start,
            end,
            slack,
        })
    }

    fn spans(order: &Order<Record>) -> Vec<(i64, i64)> {
        order
            .sink()
            .calls
            .iter()
            .filter_map(|c| match c {
                Call::Zone(_, _, start, end) => Some((*start, *end)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_window_enclosing_an_earlier_closed_one_makes_no_zone_and_is_counted() {
        let mut order = order(1);
        order.stream(0, "s", &|| 0);
        // The inner window closes, and is reserved, first.
        order.placed(0, 0, span(200, 300, 5));
        order.placed(0, 1, span(100, 400, 5));
        order.placed(0, 2, span(500, 600, 5));
        assert_eq!(spans(&order), [(200, 300), (500, 600)]);
        assert_eq!(order.dropped(), 1);
    }

    #[test]
    fn a_window_overlapping_the_last_by_more_than_both_uncertainties_makes_no_zone() {
        let mut order = order(1);
        order.stream(0, "s", &|| 0);
        order.placed(0, 0, span(100, 300, 5));
        order.placed(0, 1, span(289, 400, 5));
        assert_eq!(spans(&order), [(100, 300)]);
        assert_eq!(order.dropped(), 1);
    }

    #[test]
    fn one_boundary_placed_twice_within_its_uncertainties_starts_the_next_zone_at_the_last_end() {
        let mut order = order(1);
        order.stream(0, "s", &|| 0);
        order.placed(0, 0, span(100, 300, 5));
        order.placed(0, 1, span(291, 400, 5));
        assert_eq!(spans(&order), [(100, 300), (300, 400)]);
        assert_eq!(order.dropped(), 0);
    }

    #[test]
    fn streams_made_out_of_their_indices_order_keep_their_names() {
        let mut order = order(2);
        order.stream(1, "B", &|| 0);
        order.placed(1, 0, zone(100));
        order.stream(0, "A", &|| 0);
        order.placed(0, 0, zone(50));
        let calls = &order.sink().calls;
        // Contexts are numbered as made: B is context 0, A context 1.
        assert_eq!(calls[0], Call::Context("B".into()));
        assert_eq!(zones(&order), [(0, 100), (1, 50)]);
    }

    #[test]
    fn zones_waiting_at_the_finish_are_counted_as_dropped() {
        let mut order = order(1);
        order.stream(0, "s", &|| 0);
        order.placed(0, 1, zone(200));
        order.placed(0, 2, None);
        order.placed(0, 3, zone(300));
        assert_eq!(order.waiting(), 3);
        order.finish();
        assert_eq!(order.dropped(), 2, "the one without timing is no loss");
        assert_eq!(order.waiting(), 0);
    }

    #[test]
    fn no_zone_starts_2_1_s_or_more_before_the_last_end_so_none_reads_as_a_wrap() {
        let mut order = order(1);
        order.stream(0, "A", &|| 0);
        let far = 10 * WRAP;
        order.placed(0, 0, zone(far));
        order.placed(0, 1, zone(far - WRAP));
        assert_eq!(zones(&order), [(0, far)]);
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
        order.stream(0, "A", &|| 0);
        // Bracket widths: 5 µs, 3 µs, then 0.1 µs.
        order.sync(&clock(vec![0, 5_000, 10_000, 13_000, 20_000, 20_100]));
        assert_eq!(syncs(&order), 3);
    }

    #[test]
    fn a_pairing_is_taken_at_most_four_times() {
        let mut order = order(1);
        order.stream(0, "A", &|| 0);
        order.sync(&clock((0..20).map(|i| i * 10_000).collect()));
        assert_eq!(syncs(&order), TRIES);
    }

    #[test]
    fn a_context_made_in_a_wide_call_is_paired_again_at_once() {
        let mut order = order(1);
        order.stream(0, "A", &clock(vec![0, 9_000, 10_000, 10_100]));
        assert_eq!(syncs(&order), 1);
    }

    #[test]
    fn a_sync_reaches_every_context() {
        let mut order = order(2);
        order.stream(0, "A", &|| 0);
        order.stream(1, "B", &|| 0);
        order.sync(&|| 20);
        assert!(order.sink().calls.contains(&Call::Sync(0)));
        assert!(order.sink().calls.contains(&Call::Sync(1)));
    }
}
