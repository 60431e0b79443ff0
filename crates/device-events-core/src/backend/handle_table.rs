//! A table of live driver handles, so that a `Copy` handle can be checked
//! before it reaches a driver that checks nothing.
//!
//! The trait's streams are `Copy` and released through a safe call, so a
//! copy can outlive the stream. A backend keeps the raw stream here and hands
//! out a [`Handle`], an index plus a generation: once the entry is removed,
//! every copy of the handle finds nothing, and the backend refuses the call
//! instead of passing a freed (or recycled, someone else's) stream to the
//! driver.
//!
//! A removal can run a closing call on the value before it is gone (a
//! driver's destroy, which may wait for the stream's work): meanwhile the
//! entry is *closing*, which a lookup can tell from gone, and wait out.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use parking_lot::{Condvar, MappedRwLockReadGuard, Mutex, RwLock, RwLockReadGuard};

use crate::arena::Key;
use crate::driver::Undo;

/// A key into a [`HandleTable`]: live until its entry is removed, then never
/// again, even when the slot is reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle(Key);

impl Handle {
    /// The handle as one word, for an atomic slot; never `u64::MAX`.
    pub(crate) fn to_bits(self) -> u64 {
        (u64::from(self.0.index) << 32) | u64::from(self.0.generation)
    }

    /// A handle from [`to_bits`](Self::to_bits); `None` for `u64::MAX`.
    pub(crate) fn from_bits(bits: u64) -> Option<Self> {
        #[allow(clippy::cast_possible_truncation)]
        (bits != u64::MAX).then_some(Self(Key {
            index: (bits >> 32) as u32,
            generation: bits as u32,
        }))
    }
}

/// The first chunk's slots; chunk `c` has `FIRST << c`.
const FIRST_SHIFT: u32 = 5;
/// Chunks enough for every `u32` index: `FIRST · (2^CHUNKS − 1) > 2^32`.
const CHUNKS: usize = 28;

/// Set in a slot's generation while its entry is closing
/// ([`HandleTable::remove_with`]): above every `u32` generation, so no
/// handle matches it.
const CLOSING: u64 = 1 << 40;

/// One entry's place. `generation` is the live handle's, the handle's with
/// [`CLOSING`] while the entry is being removed, and past it after: a
/// handle finds the value only while the two agree. Past `u32::MAX` the
/// slot is retired: wrapping would bring an old handle back to life.
struct Slot<T> {
    generation: AtomicU64,
    value: RwLock<Option<T>>,
    /// The process whose thread runs the entry's close, while it is
    /// closing: a fork child's copy of a closing entry is never closed.
    closer: AtomicU32,
}

impl<T> Slot<T> {
    fn new() -> Self {
        Self {
            generation: AtomicU64::new(0),
            value: RwLock::new(None),
            closer: AtomicU32::new(0),
        }
    }
}

/// Which slots are free, and how many were ever handed out.
struct Book {
    free: Vec<u32>,
    next: u32,
    len: usize,
}

thread_local! {
    /// The entries this thread is inside [`HandleTable::with_noted`] on:
    /// their table's address and handle.
    static INSIDE: std::cell::RefCell<Vec<(usize, Handle)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether the calling thread is inside [`HandleTable::with_noted`] on any
/// entry of any table: a wait for a close could then wait for itself,
/// through a close that waits for that entry.
pub fn inside_any() -> bool {
    INSIDE
        .try_with(|inside| !inside.borrow().is_empty())
        .unwrap_or(false)
}

/// Live values behind [`Handle`]s, shared by every thread.
///
/// A call holds its entry for as long as it uses the value ([`with`](Self::with)),
/// and [`remove`](Self::remove) waits for calls in flight before it hands the
/// value back: no call can use a value after its removal returns.
///
/// Every call on a stream looks its handle up, so a lookup takes no lock
/// of the table's: the slots live in chunks made once and never moved
/// (each a `OnceLock`), and a lookup only reads its slot's lock, shared
/// with other lookups. Only an insert and a removal's end take the
/// table's lock, for the list of free slots.
pub struct HandleTable<T> {
    chunks: [OnceLock<Box<[Slot<T>]>>; CHUNKS],
    book: Mutex<Book>,
    /// Told, under `book`, each time a closing entry is gone.
    closed: Condvar,
}

/// An entry as a lookup finds it ([`HandleTable::pin`]).
pub enum Pinned<'a, T> {
    /// Live, and held against removal while this lives.
    Live(MappedRwLockReadGuard<'a, T>),
    /// Being removed: its closing call has begun, or waits for calls in
    /// flight ([`HandleTable::wait_closed`] waits it out).
    Closing,
    /// Removed, or never this table's.
    Gone,
}

impl<T> Default for HandleTable<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// The chunk and the place in it of slot `index`.
#[inline]
fn place(index: u32) -> (usize, usize) {
    let at = u64::from(index) + (1 << FIRST_SHIFT);
    let chunk = 63 - at.leading_zeros() - FIRST_SHIFT;
    #[allow(clippy::cast_possible_truncation)]
    (chunk as usize, (at - (1 << (chunk + FIRST_SHIFT))) as usize)
}

impl<T> HandleTable<T> {
    /// An empty table; `const`, so a backend can keep one in a `static`.
    pub const fn new() -> Self {
        Self {
            chunks: [const { OnceLock::new() }; CHUNKS],
            book: Mutex::new(Book {
                free: Vec::new(),
                next: 0,
                len: 0,
            }),
            closed: Condvar::new(),
        }
    }

    #[inline]
    fn slot(&self, index: u32) -> Option<&Slot<T>> {
        let (chunk, at) = place(index);
        self.chunks.get(chunk)?.get()?.get(at)
    }

    /// Keep `value`; the handle finds it until [`remove`](Self::remove).
    pub fn insert(&self, value: T) -> Handle {
        let index = {
            let mut book = self.book.lock();
            book.len += 1;
            match book.free.pop() {
                Some(index) => index,
                None => {
                    // Past `u32::MAX` slots the index saturates onto the
                    // last one, which is taken: a table that large is out of
                    // memory long before.
                    let index = book.next;
                    book.next = book.next.saturating_add(1);
                    index
                }
            }
        };
        let (chunk, at) = place(index);
        let slots = self.chunks[chunk].get_or_init(|| {
            (0..(1usize << (chunk as u32 + FIRST_SHIFT)))
                .map(|_| Slot::new())
                .collect()
        });
        let slot = &slots[at];
        // Free: no handle of this generation was handed out yet, and a
        // lookup of an older one reads a generation that is not its own.
        *slot.value.write() = Some(value);
        #[allow(clippy::cast_possible_truncation)]
        let generation = slot.generation.load(Ordering::Acquire) as u32;
        Handle(Key { index, generation })
    }

    /// Run `f` on the live value, holding it against removal meanwhile;
    /// `None` when the handle is not live. `f` may use the table again,
    /// this entry included, but not remove it.
    #[inline]
    pub fn with<R>(&self, handle: Handle, f: impl FnOnce(&T) -> R) -> Option<R> {
        let slot = self.slot(handle.0.index)?;
        let live = || slot.generation.load(Ordering::Acquire) == u64::from(handle.0.generation);
        if !live() {
            return None;
        }
        // Recursive: a nested `with` of this entry must not queue behind a
        // removal waiting on the outer one.
        let value = slot.value.read_recursive();
        // Asked again under the lock: a removal that began meanwhile has
        // moved the generation on, and may have ended, and the slot been
        // given to another value.
        if !live() {
            return None;
        }
        value.as_ref().map(f)
    }

    /// [`with`](Self::with) for a caller's closure, which might remove the
    /// entry: noted for [`inside_here`](Self::inside_here) meanwhile, so that
    /// the removal is refused instead of waiting for itself.
    pub fn with_noted<R>(&self, handle: Handle, f: impl FnOnce(&T) -> R) -> Option<R> {
        let key = self.noted(handle);
        self.with(handle, |value| {
            // `try_with`: from a thread-local's destructor, once `INSIDE` is
            // gone, the entry is simply not noted.
            let _ = INSIDE.try_with(|inside| inside.borrow_mut().push(key));
            let _release = Undo(Some(|| {
                let _ = INSIDE.try_with(|inside| {
                    let mut inside = inside.borrow_mut();
                    if let Some(at) = inside.iter().rposition(|k| *k == key) {
                        inside.swap_remove(at);
                    }
                });
            }));
            f(value)
        })
    }

    /// Whether the calling thread is inside [`with_noted`](Self::with_noted)
    /// on `handle`: removing it now would wait for itself.
    pub fn inside_here(&self, handle: Handle) -> bool {
        let key = self.noted(handle);
        INSIDE
            .try_with(|inside| inside.borrow().contains(&key))
            .unwrap_or(false)
    }

    /// `handle` in this table, as `INSIDE` notes it: a handle is never
    /// reused, and the table does not move while borrowed.
    fn noted(&self, handle: Handle) -> (usize, Handle) {
        (std::ptr::from_ref(self) as usize, handle)
    }

    /// Take the value out, once calls using it have returned; `None` when the
    /// handle is not live (removed already, or never this table's).
    #[cfg(test)]
    pub fn remove(&self, handle: Handle) -> Option<T> {
        self.remove_with(handle, |value| value)
    }

    /// Take the value out, once calls using it have returned, and run
    /// `close` on it before the entry is gone: meanwhile a lookup finds it
    /// closing ([`pin`](Self::pin)), not gone, and can wait for the close
    /// to end ([`wait_closed`](Self::wait_closed)). `None` when the handle
    /// is not live (removed already, or never this table's).
    pub fn remove_with<R>(&self, handle: Handle, close: impl FnOnce(T) -> R) -> Option<R> {
        let slot = self.slot(handle.0.index)?;
        let generation = u64::from(handle.0.generation);
        // Before the entry reads closing; no other removal of it runs.
        slot.closer.store(std::process::id(), Ordering::Relaxed);
        // From here no lookup finds it live; one removal only wins.
        slot.generation
            .compare_exchange(
                generation,
                generation | CLOSING,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .ok()?;
        // Told whatever `close` does, unwinding included.
        let _closed = crate::driver::Undo(Some(|| {
            let mut book = self.book.lock();
            slot.generation.store(generation + 1, Ordering::Release);
            book.len -= 1;
            if generation < u64::from(u32::MAX) {
                book.free.push(handle.0.index);
            }
            self.closed.notify_all();
        }));
        // Waits (parked) for the calls in flight on it.
        let value = slot.value.write().take();
        value.map(close)
    }

    /// The entry of `handle`: live (and held against removal while the
    /// result lives), closing, or gone. A thread inside
    /// [`with_noted`](Self::with_noted) on a closing entry finds it live:
    /// its removal waits for that thread, which may use it meanwhile.
    pub fn pin(&self, handle: Handle) -> Pinned<'_, T> {
        let Some(slot) = self.slot(handle.0.index) else {
            return Pinned::Gone;
        };
        let generation = u64::from(handle.0.generation);
        let seen = |pinned: &mut Option<bool>| match slot.generation.load(Ordering::Acquire) {
            now if now == generation => Some(true),
            now if now == generation | CLOSING => {
                Some(*pinned.get_or_insert_with(|| self.inside_here(handle)))
            }
            _ => None,
        };
        let mut pinned = None;
        match seen(&mut pinned) {
            None => return Pinned::Gone,
            Some(false) => return Pinned::Closing,
            Some(true) => {}
        }
        // Recursive, as in `with`.
        let value = slot.value.read_recursive();
        match seen(&mut pinned) {
            None => Pinned::Gone,
            Some(false) => Pinned::Closing,
            Some(true) => {
                RwLockReadGuard::try_map(value, Option::as_ref).map_or(Pinned::Gone, Pinned::Live)
            }
        }
    }

    /// Wait until the entry of `handle` is no longer closing: at once when
    /// it is live or gone, and in a fork child whose parent was closing
    /// it (no thread of the child will). The caller holds no entry of any
    /// table (see [`inside_any`]): the close may wait for
    /// a call in flight on its entry, which may be waiting for another.
    pub fn wait_closed(&self, handle: Handle) {
        let Some(slot) = self.slot(handle.0.index) else {
            return;
        };
        let closing = u64::from(handle.0.generation) | CLOSING;
        let mut book = self.book.lock();
        while slot.generation.load(Ordering::Acquire) == closing {
            if slot.closer.load(Ordering::Relaxed) != std::process::id() {
                return;
            }
            self.closed.wait(&mut book);
        }
    }

    /// How many values are live.
    pub fn len(&self) -> usize {
        self.book.lock().len
    }
}

#[cfg(test)]
mod tests {
    use super::HandleTable;

    #[test]
    fn a_removed_handle_finds_nothing_even_once_its_slot_is_reused() {
        static STREAMS: HandleTable<u64> = HandleTable::new();

        let stream = STREAMS.insert(0xbeef);
        assert_eq!(STREAMS.with(stream, |raw| *raw), Some(0xbeef));
        assert_eq!(STREAMS.remove(stream), Some(0xbeef));
        let other = STREAMS.insert(0xcafe);
        assert_eq!(STREAMS.with(stream, |raw| *raw), None);
        assert_eq!(STREAMS.remove(stream), None);
        assert_eq!(STREAMS.with(other, |raw| *raw), Some(0xcafe));
    }

    /// Past the first chunk's slots each handle finds its own value, in
    /// every chunk made since, and removed ones nothing.
    #[test]
    fn handles_in_every_chunk_find_their_own_values() {
        let table = HandleTable::new();
        let handles: Vec<_> = (0..1000u32).map(|n| (n, table.insert(n))).collect();
        assert_eq!(table.len(), 1000);
        for &(n, handle) in &handles {
            assert_eq!(table.with(handle, |v| *v), Some(n));
        }
        for &(n, handle) in handles.iter().filter(|(n, _)| n % 3 == 0) {
            assert_eq!(table.remove(handle), Some(n));
        }
        for &(n, handle) in &handles {
            let found = table.with(handle, |v| *v);
            assert_eq!(found, (n % 3 != 0).then_some(n));
        }
        assert_eq!(table.len(), 1000 - 334);
    }

    #[test]
    fn slots_map_onto_chunks_without_gaps() {
        let mut expected = (0, 0);
        for index in 0..100_000u32 {
            let (chunk, at) = super::place(index);
            assert_eq!((chunk, at), expected, "index {index}");
            expected = if at + 1 == 1 << (chunk as u32 + super::FIRST_SHIFT) {
                (chunk + 1, 0)
            } else {
                (chunk, at + 1)
            };
        }
        assert_eq!(super::place(u32::MAX).0, super::CHUNKS - 1);
    }

    /// A slot whose generation would pass `u32::MAX` is retired, not
    /// handed out again.
    #[test]
    fn a_slot_at_the_last_generation_is_retired() {
        use std::sync::atomic::Ordering;
        let table = HandleTable::new();
        let first = table.insert(1);
        let slot = table.slot(first.0.index).unwrap();
        slot.generation
            .store(u64::from(u32::MAX), Ordering::Release);
        let last = super::Handle(crate::arena::Key {
            index: first.0.index,
            generation: u32::MAX,
        });
        assert_eq!(table.remove(last), Some(1));
        let next = table.insert(2);
        assert_ne!(next.0.index, first.0.index);
        assert_eq!(table.with(last, |v| *v), None);
    }

    /// While a removal's close runs, a lookup finds the entry closing, not
    /// gone, and a wait for it returns only once the close has ended.
    #[test]
    fn a_closing_entry_is_told_from_a_gone_one_and_waited_out() {
        use super::Pinned;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::mpsc;
        static TABLE: HandleTable<u64> = HandleTable::new();
        static CLOSED: AtomicBool = AtomicBool::new(false);
        let handle = TABLE.insert(7);
        assert!(matches!(TABLE.pin(handle), Pinned::Live(v) if *v == 7));
        let (closing, began) = mpsc::channel();
        let (release, go) = mpsc::channel::<()>();
        let remover = std::thread::spawn(move || {
            TABLE.remove_with(handle, |v| {
                closing.send(()).unwrap();
                go.recv().unwrap();
                CLOSED.store(true, Ordering::SeqCst);
                v
            })
        });
        began.recv().unwrap();
        assert!(matches!(TABLE.pin(handle), Pinned::Closing));
        assert_eq!(TABLE.with(handle, |v| *v), None);
        let waiter = std::thread::spawn(move || {
            TABLE.wait_closed(handle);
            CLOSED.load(Ordering::SeqCst)
        });
        // However long the waiter has had, it is still waiting.
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!waiter.is_finished());
        release.send(()).unwrap();
        assert!(waiter.join().unwrap(), "the wait ended before the close");
        assert_eq!(remover.join().unwrap(), Some(7));
        assert!(matches!(TABLE.pin(handle), Pinned::Gone));
        assert_eq!(TABLE.len(), 0);
    }

    /// A thread inside `with_noted` on an entry whose removal has begun
    /// still finds it live: the removal waits for that thread.
    #[test]
    fn a_closing_entry_is_live_to_the_thread_holding_it() {
        use super::Pinned;
        static TABLE: HandleTable<u64> = HandleTable::new();
        let handle = TABLE.insert(7);
        let found = TABLE.with_noted(handle, |_| {
            let remover = std::thread::spawn(move || TABLE.remove(handle));
            while !matches!(
                TABLE.slot(handle.0.index).map(|s| s.generation.load(std::sync::atomic::Ordering::Acquire)),
                Some(g) if g & super::CLOSING != 0
            ) {
                std::thread::yield_now();
            }
            let found = matches!(TABLE.pin(handle), Pinned::Live(v) if *v == 7);
            (found, remover)
        });
        let (found, remover) = found.unwrap();
        assert!(found);
        assert_eq!(remover.join().unwrap(), Some(7));
    }

    /// A removal returns only once the call using its value has: no call
    /// uses a value after its removal.
    #[test]
    fn a_removal_waits_for_the_call_in_flight() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::mpsc;
        static TABLE: HandleTable<u64> = HandleTable::new();
        static LEFT: AtomicBool = AtomicBool::new(false);
        let handle = TABLE.insert(7);
        let (inside, entered) = mpsc::channel();
        let (release, go) = mpsc::channel::<()>();
        let user = std::thread::spawn(move || {
            TABLE.with(handle, |v| {
                inside.send(()).unwrap();
                go.recv().unwrap();
                LEFT.store(true, Ordering::SeqCst);
                *v
            })
        });
        entered.recv().unwrap();
        let remover = std::thread::spawn(move || {
            let value = TABLE.remove(handle);
            (value, LEFT.load(Ordering::SeqCst))
        });
        // However long the remover has had, it is still waiting.
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!remover.is_finished());
        release.send(()).unwrap();
        assert_eq!(user.join().unwrap(), Some(7));
        assert_eq!(remover.join().unwrap(), (Some(7), true));
        assert_eq!(TABLE.with(handle, |v| *v), None);
    }
}
