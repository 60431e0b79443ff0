//! What the submitting thread pays in heap allocations: a server that
//! times every kernel splits a chain at each one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use device_events_core::sim::Sim;
use device_events_core::{EventProfiler, OwnedStream};

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

/// A chained window costs the submitting thread two allocations: the
/// boundary both windows share, and the `ProfileDuration` cubecl boxes
/// (counted on the simulated backend, whose records allocate nothing),
/// with a slot's growth now and then, under one in a hundred windows.
#[test]
fn a_chained_window_costs_two_allocations() {
    const WINDOWS: u64 = 1000;
    let s = OwnedStream::<Sim>::new().unwrap();
    let mut profiler = EventProfiler::<Sim>::new();
    let mut open = profiler.start(s.get());
    let mut closed = Vec::with_capacity(2 * WINDOWS as usize);
    // Warm: the pool and the windows' slots are made once.
    for _ in 0..WINDOWS {
        let (done, next) = profiler.split(s.get(), open).unwrap();
        closed.push(done);
        open = next;
    }
    let before = allocations();
    for _ in 0..WINDOWS {
        let (done, next) = profiler.split(s.get(), open).unwrap();
        closed.push(done);
        open = next;
    }
    let per_window = (allocations() - before) as f64 / WINDOWS as f64;
    profiler.abandon(open).unwrap();
    drop(closed);
    assert!(per_window < 2.01, "{per_window} allocations per window");
}

/// A window, opened and closed, costs the submitting thread one
/// allocation once warm: the `ProfileDuration` cubecl boxes.
#[test]
fn a_window_costs_one_allocation_the_boxed_duration() {
    const WINDOWS: u64 = 1000;
    let s = OwnedStream::<Sim>::new().unwrap();
    let mut profiler = EventProfiler::<Sim>::new();
    let mut closed = Vec::with_capacity(2 * WINDOWS as usize);
    let window = |profiler: &mut EventProfiler<Sim>| {
        let token = profiler.start(s.get());
        profiler.stop(s.get(), token).unwrap()
    };
    // Warm: the pool and the windows' slots are made once.
    for _ in 0..WINDOWS {
        closed.push(window(&mut profiler));
    }
    let before = allocations();
    for _ in 0..WINDOWS {
        closed.push(window(&mut profiler));
    }
    let per_window = (allocations() - before) as f64 / WINDOWS as f64;
    drop(closed);
    assert!(per_window < 1.01, "{per_window} allocations per window");
}
