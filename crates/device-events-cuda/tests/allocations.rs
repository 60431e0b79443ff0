//! What the submitting thread pays in heap allocations for a window the
//! resolver thread answers, on the driver under test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

device_events_conformance::tests_run_on_the_software_driver!();

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// count is a thread-local `Cell` of a const initialiser, which allocates
// nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
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

#[test]
fn a_window_handed_to_the_resolver_allocates_nothing() {
    let _suite = support::suite();
    device_events_conformance::a_window_handed_to_the_resolver_allocates_nothing::<
        device_events_cuda::Cuda,
    >(allocations);
}
