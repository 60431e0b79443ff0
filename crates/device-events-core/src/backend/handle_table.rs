//! A table of live driver handles, so that a `Copy` handle can be checked
//! before it reaches a driver that checks nothing.
//!
//! The trait's streams are `Copy` and released through a safe call, so a
//! copy can outlive the stream. A backend keeps the raw stream here and hands
//! out a [`Handle`], an index plus a generation: once the entry is removed,
//! every copy of the handle finds nothing, and the backend refuses the call
//! instead of passing a freed (or recycled, someone else's) stream to the
//! driver.

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard, RwLock};

use crate::arena::{Arena, Key};
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

type Cell<T> = Arc<RwLock<Option<T>>>;

thread_local! {
    /// The entries this thread is inside [`HandleTable::with_noted`] on:
    /// their table's address and handle.
    static HELD: std::cell::RefCell<Vec<(usize, Handle)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Live values behind [`Handle`]s, shared by every thread.
///
/// A call holds its entry for as long as it uses the value ([`with`](Self::with)),
/// and [`remove`](Self::remove) waits for calls in flight before it hands the
/// value back: no call can use a value after its removal returns.
pub struct HandleTable<T> {
    cells: Mutex<Arena<Cell<T>>>,
}

impl<T> Default for HandleTable<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> HandleTable<T> {
    /// An empty table; `const`, so a backend can keep one in a `static`.
    pub const fn new() -> Self {
        Self {
            cells: Mutex::new(Arena::new()),
        }
    }

    fn cells(&self) -> MutexGuard<'_, Arena<Cell<T>>> {
        // Every update leaves the arena consistent between statements.
        self.cells.lock()
    }

    /// Keep `value`; the handle finds it until [`remove`](Self::remove).
    pub fn insert(&self, value: T) -> Handle {
        let cell = Arc::new(RwLock::new(Some(value)));
        Handle(self.cells().insert(cell))
    }

    /// Run `f` on the live value, holding it against removal meanwhile;
    /// `None` when the handle is not live. `f` may use the table again,
    /// this entry included, but not remove it.
    pub fn with<R>(&self, handle: Handle, f: impl FnOnce(&T) -> R) -> Option<R> {
        let cell = self.cells().get(handle.0).cloned()?;
        // Recursive: a nested `with` of this entry must not queue behind a
        // removal waiting on the outer one.
        let value = cell.read_recursive();
        value.as_ref().map(f)
    }

    /// [`with`](Self::with) for a caller's closure, which might remove the
    /// entry: noted for [`held_here`](Self::held_here) meanwhile, so that
    /// the removal is refused instead of waiting for itself.
    pub fn with_noted<R>(&self, handle: Handle, f: impl FnOnce(&T) -> R) -> Option<R> {
        let key = self.noted(handle);
        self.with(handle, |value| {
            // `try_with`: from a thread-local's destructor, once `HELD` is
            // gone, the entry is simply not noted.
            let _ = HELD.try_with(|held| held.borrow_mut().push(key));
            let _release = Undo(Some(|| {
                let _ = HELD.try_with(|held| {
                    let mut held = held.borrow_mut();
                    if let Some(at) = held.iter().rposition(|k| *k == key) {
                        held.swap_remove(at);
                    }
                });
            }));
            f(value)
        })
    }

    /// Whether the calling thread is inside [`with_noted`](Self::with_noted)
    /// on `handle`: removing it now would wait for itself.
    pub fn held_here(&self, handle: Handle) -> bool {
        let key = self.noted(handle);
        HELD.try_with(|held| held.borrow().contains(&key))
            .unwrap_or(false)
    }

    /// `handle` in this table, as `HELD` notes it: a handle is never
    /// reused, and the table does not move while borrowed.
    fn noted(&self, handle: Handle) -> (usize, Handle) {
        (std::ptr::from_ref(self) as usize, handle)
    }

    /// Take the value out, once calls using it have returned; `None` when the
    /// handle is not live (removed already, or never this table's).
    pub fn remove(&self, handle: Handle) -> Option<T> {
        let cell = self.cells().take(handle.0)?;
        let mut value = cell.write();
        value.take()
    }

    /// How many values are live.
    pub fn len(&self) -> usize {
        self.cells().len()
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
}
