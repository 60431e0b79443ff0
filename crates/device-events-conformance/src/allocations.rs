//! Counting the heap allocations of a test's own thread: what a check of
//! "no allocation per window" reads.

/// Make this test binary's allocator the system's, counting each
/// allocation of the calling thread, and define `fn allocations() -> u64`,
/// this thread's count so far. Expanded once, at the top of a test file.
#[macro_export]
macro_rules! count_allocations {
    () => {
        struct CountingAllocator;

        thread_local! {
            static ALLOCATIONS: ::std::cell::Cell<u64> = const { ::std::cell::Cell::new(0) };
        }

        // SAFETY: every call is forwarded to the system allocator
        // unchanged; the count is a thread-local `Cell` of a const
        // initialiser, which allocates nothing.
        unsafe impl ::std::alloc::GlobalAlloc for CountingAllocator {
            unsafe fn alloc(&self, layout: ::std::alloc::Layout) -> *mut u8 {
                let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
                // SAFETY: as the caller promises for `layout`.
                unsafe { ::std::alloc::GlobalAlloc::alloc(&::std::alloc::System, layout) }
            }
            unsafe fn dealloc(&self, ptr: *mut u8, layout: ::std::alloc::Layout) {
                // SAFETY: as the caller promises: `ptr` is ours, of `layout`.
                unsafe { ::std::alloc::GlobalAlloc::dealloc(&::std::alloc::System, ptr, layout) }
            }
        }

        #[global_allocator]
        static COUNTING_ALLOCATOR: CountingAllocator = CountingAllocator;

        /// This thread's heap allocations so far.
        fn allocations() -> u64 {
            ALLOCATIONS.with(::std::cell::Cell::get)
        }
    };
}
