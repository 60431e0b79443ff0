//! The submitting thread's side of Tracy zones, through Tracy's real
//! client: reserving and placing allocate nothing on that thread.
#![cfg(any(feature = "tracy", feature = "tracy-0-17"))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

use device_events_core::Placement;
use device_events_trace::Tracy;

/// Counts the allocations of each thread.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// count is a thread-local cell that allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: as `GlobalAlloc::realloc` requires of its caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn reserving_and_placing_zones_allocates_nothing_on_the_submitting_thread() -> std::io::Result<()> {
    let tracy = Tracy::new().start()?;
    let stream = tracy.stream("stream A");
    // One after the other, as one stream's windows are.
    let t0 = Instant::now();
    let placed: Vec<Placement> = (0..1000u32)
        .map(|i| Placement {
            duration: Duration::from_micros(10),
            start: t0 + Duration::from_micros(10) * i,
            end: t0 + Duration::from_micros(10) * (i + 1),
            uncertainty: Duration::from_micros(1),
        })
        .collect();
    let before = allocations();
    for placed in &placed {
        let zone = tracy.zone(stream, "kernel");
        assert!(zone.place(Some(placed)));
        let unplaced = tracy.zone(stream, "no timing");
        drop(unplaced);
    }
    let during = allocations() - before;
    assert_eq!(tracy.finish(), 0);
    assert_eq!(during, 0, "allocations on the submitting thread");
    Ok(())
}
