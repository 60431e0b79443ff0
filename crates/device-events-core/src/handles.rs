//! A table of live driver handles, so that a `Copy` handle can be checked
//! before it reaches a driver that checks nothing.
//!
//! The trait's streams are `Copy` and released through a safe call, so a
//! copy can outlive the stream. A backend keeps the raw stream here and hands
//! out a [`Handle`], an index plus a generation: once the entry is removed,
//! every copy of the handle finds nothing, and the backend refuses the call
//! instead of passing a freed (or recycled, someone else's) stream to the
//! driver.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

/// A key into a [`HandleTable`]: live until its entry is removed, then never
/// again, even when the slot is reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
    index: u32,
    generation: u32,
}

type Cell<T> = Arc<RwLock<Option<T>>>;

struct Entry<T> {
    generation: u32,
    live: Option<Cell<T>>,
}

struct Slots<T> {
    entries: Vec<Entry<T>>,
    free: Vec<u32>,
}

/// Live values behind [`Handle`]s, shared by every thread.
///
/// A call holds its entry for as long as it uses the value ([`with`](Self::with)),
/// and [`remove`](Self::remove) waits for calls in flight before it hands the
/// value back: no call can use a value after its removal returns.
///
/// ```
/// use device_events_core::handles::HandleTable;
///
/// static STREAMS: HandleTable<u64> = HandleTable::new();
///
/// let stream = STREAMS.insert(0xbeef);
/// assert_eq!(STREAMS.with(stream, |raw| *raw), Some(0xbeef));
/// assert_eq!(STREAMS.remove(stream), Some(0xbeef));
/// // Every copy of the handle is dead now, even once its slot is reused.
/// let other = STREAMS.insert(0xcafe);
/// assert_eq!(STREAMS.with(stream, |raw| *raw), None);
/// assert_eq!(STREAMS.remove(stream), None);
/// assert_eq!(STREAMS.with(other, |raw| *raw), Some(0xcafe));
/// # STREAMS.remove(other);
/// ```
pub struct HandleTable<T> {
    slots: Mutex<Slots<T>>,
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
            slots: Mutex::new(Slots {
                entries: Vec::new(),
                free: Vec::new(),
            }),
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots<T>> {
        // Every update below leaves the table consistent between statements.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keep `value`; the handle finds it until [`remove`](Self::remove).
    pub fn insert(&self, value: T) -> Handle {
        let cell = Arc::new(RwLock::new(Some(value)));
        let mut slots = self.slots();
        let index = match slots.free.pop() {
            Some(index) => index,
            None => {
                let index = u32::try_from(slots.entries.len()).unwrap_or(u32::MAX);
                slots.entries.push(Entry {
                    generation: 0,
                    live: None,
                });
                index
            }
        };
        let entry = &mut slots.entries[index as usize];
        entry.live = Some(cell);
        Handle {
            index,
            generation: entry.generation,
        }
    }

    fn cell(&self, handle: Handle) -> Option<Cell<T>> {
        let slots = self.slots();
        let entry = slots.entries.get(handle.index as usize)?;
        (entry.generation == handle.generation)
            .then(|| entry.live.clone())
            .flatten()
    }

    /// Run `f` on the live value, holding it against removal meanwhile;
    /// `None` when the handle is not live.
    pub fn with<R>(&self, handle: Handle, f: impl FnOnce(&T) -> R) -> Option<R> {
        let cell = self.cell(handle)?;
        let value = cell.read().unwrap_or_else(PoisonError::into_inner);
        value.as_ref().map(f)
    }

    /// Take the value out, once calls using it have returned; `None` when the
    /// handle is not live (removed already, or never this table's).
    pub fn remove(&self, handle: Handle) -> Option<T> {
        let cell = {
            let mut slots = self.slots();
            let entry = slots.entries.get_mut(handle.index as usize)?;
            if entry.generation != handle.generation {
                return None;
            }
            let cell = entry.live.take()?;
            // A slot whose generation would wrap is retired, never reused:
            // an old handle must not come back to life.
            if let Some(next) = entry.generation.checked_add(1) {
                entry.generation = next;
                slots.free.push(handle.index);
            }
            cell
        };
        let mut value = cell.write().unwrap_or_else(PoisonError::into_inner);
        value.take()
    }

    /// How many values are live.
    pub fn len(&self) -> usize {
        let slots = self.slots();
        slots.entries.iter().filter(|e| e.live.is_some()).count()
    }

    /// Whether no value is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
