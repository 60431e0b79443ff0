//! What the submitting thread pays in heap allocations from a window's
//! start to its reading: a server that times every kernel splits a chain
//! at each one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use device_events_core::sim::Sim;
use device_events_core::{AnchorConfig, EventProfiler, OwnedStream, PlacedWindow, ProfilerConfig};
use std::time::Duration;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// count is a thread-local `Cell` of a const initialiser, which allocates
// nothing.
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

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// A profiler whose first anchor is taken and stays current for the
/// test: no window waits for one, so each is read on its first poll.
fn anchored(s: &OwnedStream<Sim>) -> EventProfiler<Sim> {
    let mut profiler = EventProfiler::<Sim>::with_config(ProfilerConfig {
        anchor: AnchorConfig {
            drift_correction: false,
            anchor_max_age: Duration::from_secs(3600),
            max_anchor_distance: Duration::from_secs(3600),
            ..AnchorConfig::default()
        },
        ..ProfilerConfig::default()
    });
    let token = profiler.start(s.get());
    assert!(pollster::block_on(profiler.stop(s.get(), token).unwrap()).is_some());
    assert!(device_events_core::process::wait_for_calibrations(
        Duration::from_secs(10)
    ));
    profiler
}

/// Read on the first poll, as a window the device already passed is.
fn read_now(mut window: PlacedWindow<Sim>) {
    assert!(
        matches!(window.try_resolve(), Some(Some(_))),
        "read at once"
    );
}

/// A window on `s`, read once ready (a refresh due, it may wait for it on
/// the resolver), then `pause`.
fn read_after_any_refresh(
    profiler: &mut EventProfiler<Sim>,
    s: &OwnedStream<Sim>,
    pause: Duration,
) {
    let token = profiler.start(s.get());
    let mut placed = profiler.stop(s.get(), token).unwrap();
    while placed.try_resolve().is_none() {
        std::thread::sleep(Duration::from_micros(50));
    }
    std::thread::sleep(pause);
}

/// A chained window costs the submitting thread no allocation from the
/// split that closes it to its reading, once warm: the boundary both
/// windows share lives in a reused slot of the profiler's pool (counted on
/// the simulated backend, whose records allocate nothing).
#[test]
fn a_chained_window_allocates_nothing_from_start_to_reading() {
    const WINDOWS: u64 = 1000;
    let _sim = Sim::exclusive();
    let s = OwnedStream::<Sim>::new().unwrap();
    let mut profiler = anchored(&s);
    let mut open = profiler.start(s.get());
    // Warm: the pool, the shared slots and the windows' slots are made once.
    for _ in 0..WINDOWS {
        let (done, next) = profiler.split(s.get(), open).unwrap();
        read_now(done);
        open = next;
    }
    let before = allocations();
    for _ in 0..WINDOWS {
        let (done, next) = profiler.split(s.get(), open).unwrap();
        read_now(done);
        open = next;
    }
    let allocated = allocations() - before;
    profiler.abandon(open).unwrap();
    assert_eq!(allocated, 0, "{allocated} allocations in {WINDOWS} windows");
}

/// A window, opened, closed and read, costs the submitting thread no
/// allocation once warm: the window is the core's own future, not boxed.
#[test]
fn a_window_allocates_nothing_from_start_to_reading() {
    const WINDOWS: u64 = 1000;
    let _sim = Sim::exclusive();
    let s = OwnedStream::<Sim>::new().unwrap();
    let mut profiler = anchored(&s);
    let window = |profiler: &mut EventProfiler<Sim>| {
        let token = profiler.start(s.get());
        read_now(profiler.stop(s.get(), token).unwrap());
    };
    // Warm: the pool and the windows' slots are made once.
    for _ in 0..WINDOWS {
        window(&mut profiler);
    }
    let before = allocations();
    for _ in 0..WINDOWS {
        window(&mut profiler);
    }
    let allocated = allocations() - before;
    assert_eq!(allocated, 0, "{allocated} allocations in {WINDOWS} windows");
}

/// A running server's windows: the anchor refreshed every few windows
/// (each refresh begun by the `start` that finds it due), so the window
/// that hands a refresh to the calibrator thread is counted too.
#[test]
fn a_window_allocates_nothing_across_anchor_refreshes() {
    const WINDOWS: u64 = 1000;
    let _sim = Sim::exclusive();
    let s = OwnedStream::<Sim>::new().unwrap();
    let mut profiler = EventProfiler::<Sim>::with_config(ProfilerConfig {
        anchor: AnchorConfig {
            anchor_max_age: Duration::from_millis(2),
            ..AnchorConfig::default()
        },
        ..ProfilerConfig::default()
    });
    let window = |profiler: &mut EventProfiler<Sim>| {
        read_after_any_refresh(profiler, &s, Duration::from_micros(50));
    };
    for _ in 0..WINDOWS {
        window(&mut profiler);
    }
    let (before, records) = (allocations(), Sim::calls_of("simEventRecord"));
    for _ in 0..WINDOWS {
        window(&mut profiler);
    }
    let allocated = allocations() - before;
    let refreshes = Sim::calls_of("simEventRecord") - records - 2 * WINDOWS;
    assert!(refreshes > 0, "no anchor refreshed in {WINDOWS} windows");
    assert_eq!(
        allocated, 0,
        "{allocated} allocations in {WINDOWS} windows across anchor refreshes"
    );
}

/// A server whose anchor is refreshed less often than a calibrator thread
/// idles by default: the refresh that `start` hands over finds the thread
/// still up, rather than start it again (which allocates).
#[test]
fn a_window_allocates_nothing_across_refreshes_seconds_apart() {
    const EVERY: Duration = Duration::from_millis(2500);
    let _sim = Sim::exclusive();
    let s = OwnedStream::<Sim>::new().unwrap();
    let mut profiler = EventProfiler::<Sim>::with_config(ProfilerConfig {
        anchor: AnchorConfig {
            drift_correction: false,
            anchor_max_age: EVERY,
            max_anchor_distance: Duration::from_secs(3600),
            ..AnchorConfig::default()
        },
        ..ProfilerConfig::default()
    });
    let window = |profiler: &mut EventProfiler<Sim>| {
        read_after_any_refresh(profiler, &s, Duration::from_millis(1));
    };
    let began = std::time::Instant::now();
    while began.elapsed() < Duration::from_millis(200) {
        window(&mut profiler);
    }
    // Windows handed to the resolver, as one that waits for a refresh is:
    // its thread started, its spares made, before counting.
    for _ in 0..3 {
        let token = profiler.start(s.get());
        let held = Sim::hold(s.get());
        let mut placed = profiler.stop(s.get(), token).unwrap();
        assert!(placed.try_resolve().is_none(), "handed to the resolver");
        held.release();
        assert!(pollster::block_on(placed.resolve()).is_some());
    }
    let (before, records, mut windows) = (allocations(), Sim::calls_of("simEventRecord"), 0);
    while began.elapsed() < EVERY * 2 + Duration::from_millis(500) {
        window(&mut profiler);
        windows += 1;
    }
    let allocated = allocations() - before;
    let refreshes = Sim::calls_of("simEventRecord") - records - 2 * windows;
    assert!(refreshes > 0, "no anchor refreshed in {windows} windows");
    assert_eq!(
        allocated, 0,
        "{allocated} allocations in {windows} windows across refreshes {EVERY:?} apart"
    );
}

/// Windows the device has not reached when first asked: each is handed to
/// the resolver thread, which answers it later.
#[test]
fn a_window_handed_to_the_resolver_allocates_nothing() {
    const WINDOWS: u64 = 300;
    let _sim = Sim::exclusive();
    let s = OwnedStream::<Sim>::new().unwrap();
    let mut profiler = anchored(&s);
    let window = |profiler: &mut EventProfiler<Sim>| {
        let hold = Sim::hold(s.get());
        let token = profiler.start(s.get());
        let mut placed = profiler.stop(s.get(), token).unwrap();
        assert!(placed.try_resolve().is_none(), "held ahead of the device");
        hold.release();
        while placed.try_resolve().is_none() {
            std::thread::sleep(Duration::from_micros(100));
        }
    };
    for _ in 0..WINDOWS {
        window(&mut profiler);
    }
    let before = allocations();
    for _ in 0..WINDOWS {
        window(&mut profiler);
    }
    let allocated = allocations() - before;
    assert_eq!(
        allocated, 0,
        "{allocated} allocations in {WINDOWS} windows handed to the resolver"
    );
}
