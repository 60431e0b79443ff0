//! Chained windows: one record per boundary, the end of one window the
//! start of the next.

use std::cell::Cell;
use std::time::{Duration, Instant};

use device_events_core::{Backend, ErrorKind, EventApi, EventProfiler, ProfileError};

use crate::noting::{Note, Noting};
use crate::{Harness, Streams, at};

thread_local! {
    /// Records this thread made: the library's own threads record anchors.
    static RECORDS: Cell<usize> = const { Cell::new(0) };
}

/// Counts the records made on the calling thread.
struct CountRecords;

impl<A: EventApi> Note<A> for CountRecords {
    fn recorded(_: &A::Event) {
        RECORDS.set(RECORDS.get() + 1);
    }
}

/// A chain of windows over work of growing length: each measures its own
/// work, against the driver's stamps of its two boundaries where they can
/// be read; their durations add up to the chain's span (its first start to
/// its last end, as placed) within the readings' resolution and the two
/// ends' stated bounds; and the chain made one record per window.
pub fn a_chain_of_windows_adds_up_to_its_span<A: Backend>(h: &Harness<A>) {
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    let mut profiler = EventProfiler::<Noting<A, CountRecords>>::new();
    // The first chain fills the pool.
    chain(h, &mut profiler, s);
    let before = RECORDS.get();
    let windows = chain(h, &mut profiler, s);
    assert_eq!(
        RECORDS.get() - before,
        windows + 1,
        "one record per boundary, and one to start"
    );
}

/// A chain of windows on `s`, checked; how many.
fn chain<A: Backend>(
    h: &Harness<A>,
    profiler: &mut EventProfiler<Noting<A, CountRecords>>,
    s: A::Stream,
) -> usize {
    const WINDOWS: usize = 5;
    let began = Instant::now();
    let mut token = profiler.start(s);
    let mut boundary = h.last_event();
    let mut closed = Vec::new();
    for k in 0..WINDOWS {
        let work = Duration::from_millis(1 + k as u64);
        let work = h.enqueue(s, work);
        let start = boundary;
        let window = if k + 1 < WINDOWS {
            let (window, next) = profiler.split(s, token).unwrap();
            token = next;
            window
        } else {
            profiler.stop(s, token).unwrap()
        };
        boundary = h.last_event();
        closed.push((window, work, (start, boundary)));
    }
    assert_eq!(profiler.open_windows(), 0);
    let placed: Vec<_> = closed
        .into_iter()
        .map(|(window, work, events)| {
            let placed = pollster::block_on(window.resolve()).expect("a chained window read");
            h.assert_window(placed.duration, &[&work], events, began.elapsed());
            placed
        })
        .collect();
    let epoch = Instant::now() - Duration::from_secs(3600);
    let sum: Duration = placed.iter().map(|p| p.end - p.start).sum();
    let (first, last) = (&placed[0], &placed[WINDOWS - 1]);
    let span = at(epoch, last).1 - at(epoch, first).0;
    let allowed = h.resolution * (WINDOWS as u32 + 1)
        + first.uncertainty
        + last.uncertainty
        + Duration::from_nanos(WINDOWS as u64);
    assert!(
        sum.abs_diff(span) <= allowed,
        "durations sum to {sum:?}, the chain spans {span:?} (allowed {allowed:?})"
    );
    for pair in placed.windows(2) {
        let (end, start) = (at(epoch, &pair[0]).1, at(epoch, &pair[1]).0);
        assert!(
            end.abs_diff(start) <= pair[0].uncertainty + pair[1].uncertainty,
            "a boundary placed twice: {end:?} and {start:?}"
        );
    }
    WINDOWS
}

/// A boundary whose record fails (here on a destroyed stream) fails the
/// window it would close and the one it would open, and nothing else: the
/// windows before it read, and a new chain starts.
pub fn a_failed_boundary_fails_only_the_windows_it_bounds<A: Backend>(h: &Harness<A>) {
    let streams = Streams::<A>::new(1);
    let s = streams.get(0);
    let mut profiler = EventProfiler::<A>::new();
    let first = profiler.start(s);
    h.enqueue(s, Duration::from_millis(1));
    let (before, second) = profiler.split(s, first).unwrap();
    let gone = A::stream_create_non_blocking().unwrap();
    A::stream_destroy(gone).unwrap();
    let Err(ProfileError::Driver(err)) = profiler.split(gone, second) else {
        panic!("a boundary on a destroyed stream is refused");
    };
    assert_eq!(err.kind(), ErrorKind::InvalidHandle, "{err}");
    assert_eq!(profiler.open_windows(), 0, "the next window never opened");
    assert!(
        pollster::block_on(before.resolve()).is_some(),
        "the window before the failure reads"
    );
    let again = profiler.start(s);
    h.enqueue(s, Duration::from_millis(1));
    let (window, last) = profiler.split(s, again).unwrap();
    profiler.abandon(last).unwrap();
    assert!(
        pollster::block_on(window.resolve()).is_some(),
        "a new chain"
    );
}
