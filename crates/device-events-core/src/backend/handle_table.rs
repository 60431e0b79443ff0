//! A table of live driver handles, so that a `Copy` handle can be checked
//! before it reaches a driver that checks nothing.
//!
//! The trait's streams are `Copy` and released through a safe call, so a
//! copy can outlive the stream. A backend keeps the raw stream here and hands
//! out a [`Handle`], an index plus a generation: once the entry is removed,
//! every copy of the handle finds nothing, and the backend refuses the call
//! instead of passing a freed (or recycled, someone else's) stream to the
//! driver.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

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

/// One entry's place. `generation` is the live handle's, or past it while
/// the entry is being removed and after: a handle finds the value only
/// while the two agree. Past `u32::MAX` the slot is retired: wrapping would
/// bring an old handle back to life.
struct Slot<T> {
    generation: AtomicU64,
    value: RwLock<Option<T>>,
}

impl<T> Slot<T> {
    fn new() -> Self {
        Self {
            generation: AtomicU64::new(0),
            value: RwLock::new(None),
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
    pub fn remove(&self, handle: Handle) -> Option<T> {
        let slot = self.slot(handle.0.index)?;
        let generation = u64::from(handle.0.generation);
        // From here no lookup finds it; one removal only wins.
        slot.generation
            .compare_exchange(
                generation,
                generation + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .ok()?;
        // Waits (parked) for the calls in flight on it.
        let value = slot.value.write().take();
        let mut book = self.book.lock();
        book.len -= 1;
        if generation < u64::from(u32::MAX) {
            book.free.push(handle.0.index);
        }
        value
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
