//! A table's buffered cells: keys and values in one arena, sorted by key when written.

use std::cmp::Ordering;

/// One buffered cell: where its key and value are in the arena, and its key's first bytes.
///
/// Sorting a buffer compares keys, and comparing two keys in the 8 MiB arena is a `memcmp` of
/// two random places in it: in `perf` of a replay of 100,000 devices the buffers' sort was a
/// seventh of the timely workers' time, most of it in those comparisons. The first 16 bytes of a
/// key, held here, tell most keys apart (`<bucket>_<device>_`, `<device>_<hour>`) without
/// touching the arena.
///
/// A slot takes 32 bytes, offsets being `u32`: a buffer of wide cells (~45 bytes of key and
/// value each) holds almost as many bytes of slots as of arena, and with `usize` offsets and a
/// vector that doubled, the slots of a replay's last firing took more memory than the arenas.
#[derive(Clone, Copy)]
pub(super) struct Slot {
    /// The key's first 16 bytes as two big-endian words, zero-padded: ordered as the keys are,
    /// except that keys equal in them may still differ.
    prefix: [u64; 2],
    start: u32,
    key_end: u32,
    /// Where the value ends; it starts at `key_end`.
    end: u32,
}

/// Most bytes a buffer's arena may hold, so that its offsets fit a [`Slot`]'s `u32`: a put that
/// would pass it writes the buffer out first ([`EmbeddedWriter::put`](super::EmbeddedWriter::put)).
pub(super) const MAX_ARENA: usize = u32::MAX as usize;

/// Bytes a [`Slot`] adds to a buffer's size ([`Pending::bytes`]).
const SLOT_BYTES: usize = std::mem::size_of::<Slot>();

impl Slot {
    pub(super) fn key(self) -> std::ops::Range<usize> {
        self.start as usize..self.key_end as usize
    }

    /// The cell's value with its timestamp in front, as stored.
    pub(super) fn value(self) -> std::ops::Range<usize> {
        self.key_end as usize..self.end as usize
    }

    /// Bytes a cell takes in the arena: its key, its timestamp and its value.
    pub(super) fn arena_bytes(key: &[u8], value: &[u8]) -> usize {
        key.len() + 8 + value.len()
    }

    /// Bytes a stored key-value takes in the arena: its key and its value as stored.
    pub(super) fn stored_bytes(key: &[u8], stored: &[u8]) -> usize {
        key.len() + stored.len()
    }

    fn prefix_of(key: &[u8]) -> [u64; 2] {
        let mut bytes = [0u8; 16];
        let n = key.len().min(16);
        bytes[..n].copy_from_slice(&key[..n]);
        let word = u128::from_be_bytes(bytes);
        [(word >> 64) as u64, word as u64]
    }
}

/// Cells of one table waiting to be written: keys and values in one arena, in arrival order.
pub(super) struct Pending {
    pub(super) arena: Vec<u8>,
    /// The cells in arrival order, which is the order of their `start`.
    pub(super) cells: Vec<Slot>,
    /// Whether the buffer was ingested for being full since the last flush.
    pub(super) bulk: bool,
    /// How many of the cells are removals ([`Pending::push_removal`]).
    pub(super) removals: usize,
    /// The smallest and largest timestamp of the cells (`i64::MAX`, `i64::MIN` when empty).
    pub(super) lo: i64,
    pub(super) hi: i64,
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            arena: Vec::new(),
            cells: Vec::new(),
            bulk: false,
            removals: 0,
            lo: i64::MAX,
            hi: i64::MIN,
        }
    }
}

impl Pending {
    /// Appends a cell. `limit` is the size ([`Pending::bytes`]) at which the writer ingests the
    /// buffer: the arena and the slots grow by doubling, but each not past its share of a buffer
    /// an eighth past the limit, not to twice it, since the buffer is written, and its capacity
    /// kept, once it reaches the limit. Doubling from just under 8 MiB left 16 MiB arenas.
    ///
    /// The arena must have room for the cell below [`MAX_ARENA`].
    pub(super) fn push(&mut self, key: &[u8], ts_ms: i64, value: &[u8], limit: usize) {
        self.push_parts(key, &ts_ms.to_be_bytes(), value, (ts_ms, ts_ms), limit);
    }

    /// Appends a key-value whose value is already encoded as stored (a put's packed cells,
    /// stamped `lo` to `hi`), as [`Pending::push`] does a cell.
    pub(super) fn push_stored(
        &mut self,
        key: &[u8],
        stored: &[u8],
        (lo, hi): (i64, i64),
        limit: usize,
    ) {
        self.push_parts(key, &[], stored, (lo, hi), limit);
    }

    /// Appends the removal of `key`, ordered with the puts as a put is: of a key's puts and
    /// removals, the last wins ([`Pending::sorted`]). A removal has no value, where a stored cell
    /// always has one (its timestamp, or a packed put's header), and carries no timestamp into
    /// [`Pending::lo`] and [`Pending::hi`]: it adds no cell to a generation.
    pub(super) fn push_removal(&mut self, key: &[u8], limit: usize) {
        let (lo, hi) = (self.lo, self.hi);
        self.push_parts(key, &[], &[], (lo, hi), limit);
        self.removals += 1;
    }

    fn push_parts(
        &mut self,
        key: &[u8],
        head: &[u8],
        value: &[u8],
        (lo, hi): (i64, i64),
        limit: usize,
    ) {
        let most = limit.saturating_add(limit / 8);
        let start = self.arena.len();
        let need = key.len() + head.len() + value.len();
        // The arena's and the slots' shares of a full buffer, as in the buffer so far with
        // this cell: one pair of bounds for buffers of large cells and of small ones.
        let with_cell = self.bytes() + need + SLOT_BYTES;
        let share = |part: usize| (most as u128 * part as u128 / with_cell as u128) as usize;
        if self.arena.capacity() - start < need {
            let capacity = self.arena.capacity();
            // Past its share (one put of many cells), by an eighth at a time.
            let target = (capacity * 2)
                .min(share(start + need).max(capacity + capacity / 8))
                .max(start + need);
            self.arena.reserve_exact(target - start);
        }
        let capacity = self.cells.capacity();
        if self.cells.len() == capacity {
            let room = share(self.slot_bytes() + SLOT_BYTES) / SLOT_BYTES;
            // Past its share (one put of many cells), by an eighth at a time.
            let more = if room > capacity {
                (room - capacity).min(capacity.max(64))
            } else {
                (capacity / 8).max(64)
            };
            self.cells.reserve_exact(more);
        }
        self.lo = self.lo.min(lo);
        self.hi = self.hi.max(hi);
        self.arena.extend_from_slice(key);
        let key_end = self.arena.len();
        self.arena.extend_from_slice(head);
        self.arena.extend_from_slice(value);
        // `EmbeddedWriter::put` writes a buffer out before its arena would pass `MAX_ARENA`.
        let offset = |at: usize| u32::try_from(at).expect("embedded writer arena past 4 GiB");
        self.cells.push(Slot {
            prefix: Slot::prefix_of(key),
            start: offset(start),
            key_end: offset(key_end),
            end: offset(self.arena.len()),
        });
    }

    /// The buffer's size against its limit: its cells' keys and values, and their slots.
    pub(super) fn bytes(&self) -> usize {
        self.arena.len() + self.slot_bytes()
    }

    fn slot_bytes(&self) -> usize {
        self.cells.len() * SLOT_BYTES
    }

    pub(super) fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The cells sorted by key, the last put (or removal) of a key winning, as a memtable would
    /// keep them. A removal's value is empty.
    pub(super) fn sorted(&mut self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let arena = &self.arena;
        let key = |slot: &Slot| &arena[slot.key()];
        // First by the 16 bytes held in the slots, in arrival order (`start`) among equals, which
        // reads no key; then each run of cells sharing those bytes by key, in arrival order among
        // puts of one key, so the last of each run of equal keys is the newest. A run already in
        // order (a row's cells put in qualifier order) is only checked, reading each key once;
        // a wide row's run is sorted (its qualifiers are decimal second offsets: "10" sorts
        // before "9"), its keys read about log2(run) times each, as in a sort of the whole
        // buffer.
        self.cells
            .sort_unstable_by(|a, b| a.prefix.cmp(&b.prefix).then(a.start.cmp(&b.start)));
        let mut repeated = false;
        for run in self.cells.chunk_by_mut(|a, b| a.prefix == b.prefix) {
            if run.len() < 2 {
                continue;
            }
            let mut in_order = true;
            for pair in run.windows(2) {
                match key(&pair[0]).cmp(key(&pair[1])) {
                    Ordering::Less => {}
                    Ordering::Equal => repeated = true,
                    Ordering::Greater => {
                        in_order = false;
                        break;
                    }
                }
            }
            if !in_order {
                sort_run(arena, run, 0);
                repeated |= run.windows(2).any(|pair| key(&pair[0]) == key(&pair[1]));
            }
        }
        let cells = &self.cells;
        cells.iter().enumerate().filter_map(move |(i, cell)| {
            // Without repeated keys, no cell is superseded and no key needs reading.
            let superseded = repeated
                && cells
                    .get(i + 1)
                    .is_some_and(|next| next.prefix == cell.prefix && key(next) == key(cell));
            (!superseded).then(|| (key(cell), &arena[cell.value()]))
        })
    }

    pub(super) fn clear(&mut self) {
        self.arena.clear();
        self.cells.clear();
        self.removals = 0;
        (self.lo, self.hi) = (i64::MAX, i64::MIN);
    }
}

/// Sorts `run`, cells whose keys are equal in their first `depth` bytes and no shorter, by
/// key, in arrival order among equal keys: each slot's `prefix` is replaced by its key's 16
/// bytes from `depth` (zero-padded), the run sorted by those and by how many of them the key
/// has, and each run of keys equal in all 16 refined in turn. An index's keys share their first
/// 16 bytes by the thousand (`<tag code>_<mark>`), and a sort comparing them whole read each
/// key from the arena about log2(run) times. Equal keys keep equal prefixes, which
/// [`Pending::sorted`]'s check for repeats needs.
fn sort_run(arena: &[u8], run: &mut [Slot], depth: usize) {
    if run.len() < 8 {
        let key = |slot: &Slot| &arena[slot.key()];
        run.sort_unstable_by(|a, b| key(a).cmp(key(b)).then(a.start.cmp(&b.start)));
        return;
    }
    for slot in run.iter_mut() {
        slot.prefix = Slot::prefix_of(&arena[slot.start as usize + depth..slot.key_end as usize]);
    }
    // A key ending within the window is a prefix of any longer key with the same window (the
    // longer one's bytes past its end are zeros, as the padding): it comes first.
    let held = |slot: &Slot| (slot.key().len() - depth).min(16);
    run.sort_unstable_by_key(|s| (s.prefix, held(s), s.start));
    for equal in run.chunk_by_mut(|a, b| a.prefix == b.prefix && held(a) == held(b)) {
        // Keys that end within the window are equal, already in arrival order.
        if equal.len() > 1 && held(&equal[0]) == 16 {
            sort_run(arena, equal, depth + 16);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Pending;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_buffer_and_its_slots_grow_to_an_eighth_past_its_limit_not_to_twice_it() {
        let limit = 1 << 20;
        let mut pending = Pending::default();
        let value = [7u8; 40];
        let mut cells = 0usize;
        while pending.bytes() < limit {
            pending.push(format!("row{cells:08}").as_bytes(), 1, &value, limit);
            cells += 1;
        }
        // Arena and slots together: the slots are a third of this buffer.
        let slot = super::SLOT_BYTES;
        assert_eq!(slot, 32);
        let capacity = pending.arena.capacity() + pending.cells.capacity() * slot;
        assert!(
            capacity <= limit + limit / 8,
            "capacity {capacity} for a limit of {limit}: arena {}, slots {} of {}",
            pending.arena.capacity(),
            pending.cells.capacity(),
            pending.cells.len()
        );
        assert!(pending.slot_bytes() > limit / 4, "{}", pending.slot_bytes());
        // Every cell is still there, in order.
        assert_eq!(pending.cells.len(), cells);
        let last = pending.cells[cells - 1];
        assert_eq!(
            &pending.arena[last.key()],
            format!("row{:08}", cells - 1).as_bytes()
        );
        assert_eq!(&pending.arena[last.value()][8..], &value);

        // A put past the slack still fits: the arena grows on.
        let big = vec![1u8; limit];
        pending.push(b"big", 2, &big, limit);
        assert!(pending.bytes() > limit * 2);
        let big_slot = pending.cells[cells];
        assert_eq!(&pending.arena[big_slot.key()], b"big");
        assert_eq!(&pending.arena[big_slot.value()][8..], &big[..]);
    }

    proptest! {
        /// A sorted buffer holds what a map written in arrival order holds: every key once, in
        /// byte order, with its last value (a removal's being empty). Keys come from a few bytes, with long shared
        /// prefixes, so that many of them are equal in their first 16 bytes and some are
        /// prefixes of others; in arrival order or already in key order, with or without repeats.
        #[test]
        fn a_sorted_buffer_is_a_map_of_the_last_put_of_each_key(
            puts in proptest::collection::vec(
                (proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(b'a'), Just(0xff)], 0..24),
                 any::<u8>(), proptest::bool::weighted(0.2)),
                0..200,
            ),
            // At least one byte: a buffered key is never empty (it holds its row, which is
            // not), and an empty removal would take no arena byte, leaving two cells at one
            // `start`, which is their arrival order.
            shared in 1usize..20,
            // Puts in key order (puts of one key still in arrival order), as a narrow row's
            // cells come, which the sort checks rather than sorts.
            in_order in any::<bool>(),
        ) {
            let mut puts = puts;
            if in_order {
                puts.sort_by(|a, b| a.0.cmp(&b.0));
            }
            let mut pending = Pending::default();
            let mut model = BTreeMap::new();
            for (suffix, value, removal) in &puts {
                let mut key = vec![b'k'; shared];
                key.extend_from_slice(suffix);
                if *removal {
                    // A removal is kept as an empty value, the last of its key winning.
                    pending.push_removal(&key, 1 << 20);
                    model.insert(key, Vec::new());
                    continue;
                }
                pending.push(&key, 5, &[*value], 1 << 20);
                let mut stored = 5i64.to_be_bytes().to_vec();
                stored.push(*value);
                model.insert(key, stored);
            }
            prop_assert_eq!(pending.removals, puts.iter().filter(|p| p.2).count());
            let sorted: Vec<(Vec<u8>, Vec<u8>)> =
                pending.sorted().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
            let expected: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
            prop_assert_eq!(sorted, expected);
        }
    }
}
