//! Values behind generation-checked keys: a key finds its value until the
//! value is taken, and never again, even once its slot holds another.
//!
//! A profiler keeps its open windows in one; its keys are the backends'
//! handles' too. A slot whose generation would overflow is retired, never
//! reused: wrapping would bring an old key back to life.

/// A key into an [`Arena`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl Key {
    /// The key as one word.
    pub(crate) fn to_bits(self) -> u64 {
        (u64::from(self.index) << 32) | u64::from(self.generation)
    }

    /// A key from [`to_bits`](Self::to_bits); any word is some key, live
    /// or not.
    #[allow(clippy::cast_possible_truncation)]
    pub(crate) fn from_bits(bits: u64) -> Self {
        Self {
            index: (bits >> 32) as u32,
            generation: bits as u32,
        }
    }
}

/// A slot [`Arena::take_vacant`] emptied, neither free nor held: no key
/// finds it until it is filled.
#[must_use = "a vacant slot is reused only once filled or freed"]
pub(crate) struct Vacant {
    index: u32,
    /// Its generation would have overflowed: never reused.
    retired: bool,
}

struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// Values behind [`Key`]s.
pub(crate) struct Arena<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Arena<T> {
    pub(crate) const fn new() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    /// Keep `value`; its key finds it until [`take`](Self::take).
    #[inline]
    pub(crate) fn insert(&mut self, value: T) -> Key {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            slot.value = Some(value);
            return Key {
                index,
                generation: slot.generation,
            };
        }
        // Past `u32::MAX` slots the index saturates onto the last one, which
        // is taken: a table that large is out of memory long before.
        let index = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
        self.slots.push(Slot {
            generation: 0,
            value: Some(value),
        });
        Key {
            index,
            generation: 0,
        }
    }

    /// Take the value out; `key`, and every copy of it, finds nothing from
    /// now on.
    #[inline]
    pub(crate) fn take(&mut self, key: Key) -> Option<T> {
        let slot = self
            .slots
            .get_mut(key.index as usize)
            .filter(|slot| slot.generation == key.generation)?;
        let value = slot.value.take()?;
        self.len -= 1;
        if let Some(next) = slot.generation.checked_add(1) {
            slot.generation = next;
            self.free.push(key.index);
        }
        Some(value)
    }

    /// Take the value out as [`take`](Self::take) does, keeping its slot
    /// for the caller's next value ([`fill`](Self::fill)), or to
    /// [`free`](Self::free): a chain's next window takes the closed one's
    /// slot, with no trip through the free list.
    #[inline]
    pub(crate) fn take_vacant(&mut self, key: Key) -> Option<(T, Vacant)> {
        let slot = self
            .slots
            .get_mut(key.index as usize)
            .filter(|slot| slot.generation == key.generation)?;
        let value = slot.value.take()?;
        self.len -= 1;
        let next = slot.generation.checked_add(1);
        if let Some(next) = next {
            slot.generation = next;
        }
        Some((
            value,
            Vacant {
                index: key.index,
                retired: next.is_none(),
            },
        ))
    }

    /// Keep `value` in `vacant`'s slot; its key is a new one.
    #[inline]
    pub(crate) fn fill(&mut self, vacant: Vacant, value: T) -> Key {
        if vacant.retired {
            return self.insert(value);
        }
        let slot = &mut self.slots[vacant.index as usize];
        slot.value = Some(value);
        self.len += 1;
        Key {
            index: vacant.index,
            generation: slot.generation,
        }
    }

    /// Give `vacant`'s slot back to the free ones.
    pub(crate) fn free(&mut self, vacant: Vacant) {
        if !vacant.retired {
            self.free.push(vacant.index);
        }
    }

    /// The key of every value held.
    pub(crate) fn keys(&self) -> impl Iterator<Item = Key> + '_ {
        (0u32..).zip(&self.slots).filter_map(|(index, slot)| {
            slot.value.as_ref().map(|_| Key {
                index,
                generation: slot.generation,
            })
        })
    }

    /// Every value held, mutably.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(|slot| slot.value.as_mut())
    }

    /// How many values are held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_key_finds_nothing_even_once_its_slot_is_reused() {
        let mut arena = Arena::new();
        let old = arena.insert('a');
        assert_eq!(arena.take(old), Some('a'));
        let new = arena.insert('b');
        assert_eq!(new.index, old.index, "the slot is reused");
        assert_eq!(arena.take(old), None);
        assert_eq!(arena.len(), 1);
        assert_eq!(arena.take(new), Some('b'));
    }

    #[test]
    fn a_key_taken_vacant_finds_nothing_once_its_slot_is_filled_again() {
        let mut arena = Arena::new();
        let old = arena.insert('a');
        let (value, vacant) = arena.take_vacant(old).expect("held");
        assert_eq!(value, 'a');
        let new = arena.fill(vacant, 'b');
        assert_eq!(new.index, old.index, "the slot is reused");
        assert_eq!(arena.take(old), None);
        assert_eq!(arena.len(), 1);
        assert_eq!(arena.take(new), Some('b'));
    }

    #[test]
    fn a_vacant_slot_freed_is_reused_by_the_next_insert() {
        let mut arena = Arena::new();
        let old = arena.insert('a');
        let (_, vacant) = arena.take_vacant(old).expect("held");
        arena.free(vacant);
        assert_eq!(arena.len(), 0);
        let new = arena.insert('b');
        assert_eq!(new.index, old.index);
        assert_ne!(new, old);
    }

    #[test]
    fn a_vacant_slot_whose_generation_would_overflow_is_filled_elsewhere() {
        let mut arena = Arena::new();
        let key = arena.insert(1);
        arena.slots[key.index as usize].generation = u32::MAX;
        let last = Key {
            index: key.index,
            generation: u32::MAX,
        };
        let (_, vacant) = arena.take_vacant(last).expect("held");
        let next = arena.fill(vacant, 2);
        assert_ne!(next.index, key.index, "the retired slot is not reused");
        assert_eq!(arena.take(last), None);
    }

    #[test]
    fn a_slot_whose_generation_would_overflow_is_retired() {
        let mut arena = Arena::new();
        let key = arena.insert(1);
        arena.slots[key.index as usize].generation = u32::MAX;
        let last = Key {
            index: key.index,
            generation: u32::MAX,
        };
        assert_eq!(arena.take(last), Some(1));
        let next = arena.insert(2);
        assert_ne!(next.index, key.index, "the retired slot is not reused");
        assert_eq!(arena.take(last), None);
    }
}
