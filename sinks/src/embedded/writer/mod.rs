//! The write side: mutations buffered per worker, then committed in fjall write batches or, in
//! bulk, ingested as sorted tables.

use super::codec::{self, Column};
use super::generations::{self, Lease};
use super::store::{EmbeddedStore, Table};
use crate::table::{Cell, Mutation, TableWriter};
use crate::{Error, Result};
use fjall::{OwnedWriteBatch, PersistMode, Slice};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// Mutations buffered before the writer commits them as one fjall batch, in the mode that reads
/// before it writes ([`EmbeddedWriter::newest_timestamp_wins`]).
pub(crate) const BATCH_MUTATIONS: usize = 4096;

/// Bytes of cells buffered per table before the writer ingests them as a sorted table: their
/// keys and values, and a 32-byte slot per cell.
///
/// Ingesting skips the memtable, whose skiplist inserts (a key comparison per level, on keys
/// that share long prefixes) were the largest single cost of a replay in `perf`, and the
/// journal. The bound is the writer's memory: 8 MiB per table, times three tables, per worker.
pub(crate) const INGEST_BYTES: usize = 8 << 20;

/// Smallest buffer a flush ingests; a smaller one goes through the memtable, so a live job that
/// flushes often does not make one tiny table per flush for compactions to merge.
///
/// A table that filled a buffer since the last flush is written in bulk, and the flush ingests
/// its remainder whatever its size: an ingestion first flushes the keyspace's memtable, and in a
/// replay of 100,000 devices × 20 min the odd remainder through the memtable made fjall's
/// compactions take 39–44 CPU s instead of 27–30.
pub(crate) const MIN_INGEST_BYTES: usize = 1 << 20;

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
struct Slot {
    /// The key's first 16 bytes as two big-endian words, zero-padded: ordered as the keys are,
    /// except that keys equal in them may still differ.
    prefix: [u64; 2],
    start: u32,
    key_end: u32,
    /// Where the value ends; it starts at `key_end`.
    end: u32,
}

/// Most bytes a buffer's arena may hold, so that its offsets fit a [`Slot`]'s `u32`: a put that
/// would pass it writes the buffer out first ([`EmbeddedWriter::put`]).
const MAX_ARENA: usize = u32::MAX as usize;

/// Bytes a [`Slot`] adds to a buffer's size ([`Pending::bytes`]).
const SLOT_BYTES: usize = std::mem::size_of::<Slot>();

impl Slot {
    fn key(self) -> std::ops::Range<usize> {
        self.start as usize..self.key_end as usize
    }

    /// The cell's value with its timestamp in front, as stored.
    fn value(self) -> std::ops::Range<usize> {
        self.key_end as usize..self.end as usize
    }

    /// Bytes a cell takes in the arena: its key, its timestamp and its value.
    fn arena_bytes(key: &[u8], value: &[u8]) -> usize {
        key.len() + 8 + value.len()
    }

    /// Bytes a stored key-value takes in the arena: its key and its value as stored.
    fn stored_bytes(key: &[u8], stored: &[u8]) -> usize {
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
struct Pending {
    arena: Vec<u8>,
    /// The cells in arrival order, which is the order of their `start`.
    cells: Vec<Slot>,
    /// Whether the buffer was ingested for being full since the last flush.
    bulk: bool,
    /// The smallest and largest timestamp of the cells (`i64::MAX`, `i64::MIN` when empty).
    lo: i64,
    hi: i64,
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            arena: Vec::new(),
            cells: Vec::new(),
            bulk: false,
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
    fn push(&mut self, key: &[u8], ts_ms: i64, value: &[u8], limit: usize) {
        self.push_parts(key, &ts_ms.to_be_bytes(), value, (ts_ms, ts_ms), limit);
    }

    /// Appends a key-value whose value is already encoded as stored (a put's packed cells,
    /// stamped `lo` to `hi`), as [`Pending::push`] does a cell.
    fn push_stored(&mut self, key: &[u8], stored: &[u8], (lo, hi): (i64, i64), limit: usize) {
        self.push_parts(key, &[], stored, (lo, hi), limit);
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
    fn bytes(&self) -> usize {
        self.arena.len() + self.slot_bytes()
    }

    fn slot_bytes(&self) -> usize {
        self.cells.len() * SLOT_BYTES
    }

    fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The cells sorted by key, the last put of a key winning, as a memtable would keep them.
    fn sorted(&mut self) -> impl Iterator<Item = (&[u8], &[u8])> {
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
                run.sort_unstable_by(|a, b| key(a).cmp(key(b)).then(a.start.cmp(&b.start)));
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

    fn clear(&mut self) {
        self.arena.clear();
        self.cells.clear();
        (self.lo, self.hi) = (i64::MAX, i64::MIN);
    }
}

/// Writes mutations for one worker: buffers them per table and writes a table's buffer when it
/// reaches 8 MiB, and every buffer on [`TableWriter::flush`].
///
/// A large buffer is sorted and ingested as a new table of the LSM tree (fjall's bulk load,
/// registered atomically under a sequence number newer than every earlier write); the small ones
/// of a flush are committed as one write batch through the journal and memtable. Either way,
/// written cells are visible to every reader of the store at once and survive a crash of the
/// process; they survive a crash of the machine after [`EmbeddedStore::persist`]. Dropping a writer writes what it
/// still buffers, as HBase's `BufferedMutator.close()` does, but only `flush` reports failures.
///
/// A family with [`crate::schema::FamilySpec::max_versions`] above 1 keeps each put as a
/// version of its own, the same stamp replacing it, and a put removes the versions it leaves
/// past the family's count. Other families keep one version per cell. By default a put
/// replaces the cell whatever its timestamp (last write wins), which for hourglass is the same
/// as HBase's rule that the newest timestamp wins: every hourglass cell timestamp is a function
/// of the cell's coordinates (a narrow cell is stamped with the reading's event time, which is
/// part of its row key; a wide cell with its row's hour start plus its qualifier's offset), so
/// two puts of one cell carry one timestamp. [`EmbeddedWriter::newest_timestamp_wins`] enforces HBase's rule exactly, at the
/// price of a read per cell; that mode commits write batches of 4096 mutations and never ingests.
pub struct EmbeddedWriter {
    store: EmbeddedStore,
    /// Per table (the store's order): cells not written yet.
    pending: Vec<Pending>,
    /// Removals (and, with `newest_timestamp_wins`, puts) queued for the next commit.
    batch: OwnedWriteBatch,
    /// Mutations in `batch`.
    queued: usize,
    /// The generations `batch` writes to, kept until it is committed.
    leases: Vec<Lease>,
    /// With `newest_timestamp_wins`, per table: the timestamp each cell queued in `batch` will
    /// have once committed (`i64::MIN` for a queued delete), which the store cannot tell yet.
    queued_ts: Option<Vec<HashMap<Vec<u8>, i64>>>,
    /// [`INGEST_BYTES`] and [`MIN_INGEST_BYTES`], smaller in tests.
    ingest_bytes: usize,
    min_ingest_bytes: usize,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl fmt::Debug for EmbeddedWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedWriter")
            .field("store", &self.store)
            .field("queued", &self.queued)
            .field(
                "pending_cells",
                &self.pending.iter().map(|p| p.cells.len()).sum::<usize>(),
            )
            .field("newest_timestamp_wins", &self.queued_ts.is_some())
            .finish_non_exhaustive()
    }
}

impl EmbeddedStore {
    /// A writer for one worker. It buffers mutations per table and writes them in bulk; see
    /// [`EmbeddedWriter`].
    pub fn writer(&self) -> EmbeddedWriter {
        EmbeddedWriter::new(self.clone())
    }
}

impl EmbeddedWriter {
    fn new(store: EmbeddedStore) -> Self {
        let batch = new_batch(&store, 0);
        let pending = store
            .inner
            .tables
            .iter()
            .map(|_| Pending::default())
            .collect();
        EmbeddedWriter {
            store,
            pending,
            batch,
            queued: 0,
            leases: Vec::new(),
            queued_ts: None,
            ingest_bytes: INGEST_BYTES,
            min_ingest_bytes: MIN_INGEST_BYTES,
            key: Vec::new(),
            value: Vec::new(),
        }
    }

    /// With `true`, a put whose timestamp is older than the cell's visible one is ignored, as in
    /// HBase with `VERSIONS => 1`; each put then reads the cell first. With `false` (the
    /// default), the last put wins without a read. Set it before the first write: cells queued
    /// before the switch are compared as if already committed.
    #[must_use]
    pub fn newest_timestamp_wins(mut self, on: bool) -> Self {
        self.queued_ts = on.then(|| vec![HashMap::new(); self.store.inner.tables.len()]);
        self
    }

    /// Sets the buffer size that starts an ingestion, and the smallest a flush ingests, so that
    /// tests reach the ingestion path with a few cells.
    #[cfg(test)]
    pub(crate) fn ingest_thresholds(
        mut self,
        ingest_bytes: usize,
        min_ingest_bytes: usize,
    ) -> Self {
        self.ingest_bytes = ingest_bytes;
        self.min_ingest_bytes = min_ingest_bytes;
        self
    }

    /// Commits the queued batch, if any.
    fn commit(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            self.queued = 0;
            return Ok(());
        }
        let next = new_batch(&self.store, self.batch.len());
        let full = std::mem::replace(&mut self.batch, next);
        self.queued = 0;
        if let Some(queued_ts) = &mut self.queued_ts {
            queued_ts.iter_mut().for_each(HashMap::clear);
        }
        let inner = &self.store.inner;
        let committed = full.commit().map_err(|e| inner.fjall_error("write", e));
        self.leases.clear();
        committed?;
        for index in 0..inner.tables.len() {
            inner.close_full_generation(index)?;
        }
        Ok(())
    }

    /// Writes table `index`'s pending cells: ingested as a sorted table when there are at least
    /// `min_ingest` bytes of them, else queued in the writer's batch for the next commit.
    fn write_pending(&mut self, index: usize, min_ingest: usize) -> Result<()> {
        let pending = &mut self.pending[index];
        if pending.is_empty() {
            return Ok(());
        }
        let inner = &self.store.inner;
        let lease = inner.covering(index, pending.lo, pending.hi)?;
        let keyspace = &lease.keyspace;
        if pending.bytes() < min_ingest {
            // Queued in the writer's batch, which `write_all` commits once for all tables.
            for slot in &pending.cells {
                self.batch.insert(
                    keyspace,
                    &pending.arena[slot.key()],
                    &pending.arena[slot.value()],
                );
            }
            pending.clear();
            self.leases.push(lease);
            return Ok(());
        }
        let mut ingestion = keyspace
            .start_ingestion()
            .map_err(|e| inner.fjall_error("ingest", e))?;
        for (key, value) in pending.sorted() {
            ingestion
                .write(key, value)
                .map_err(|e| inner.fjall_error("ingest", e))?;
        }
        ingestion
            .finish()
            .map_err(|e| inner.fjall_error("ingest", e))?;
        lease.ingested();
        pending.clear();
        inner.close_full_generation(index)
    }

    /// Writes every table's pending cells and the queued batch: the small buffers of all tables
    /// go in one write batch, so a live job's flush is one journal write, not one per table.
    fn write_all(&mut self) -> Result<()> {
        for index in 0..self.pending.len() {
            let bulk = std::mem::take(&mut self.pending[index].bulk);
            self.write_pending(index, if bulk { 0 } else { self.min_ingest_bytes })?;
        }
        self.commit()
    }

    /// Encodes into `self.key` and `self.value` one put of a packed family's `cells`
    /// (`(qualifier, timestamp, value)`, sorted by qualifier without repeats) under a new seq,
    /// and returns the smallest and largest of their timestamps.
    fn encode_packed<'c>(
        &mut self,
        row: &[u8],
        family: &str,
        cells: impl Iterator<Item = (&'c [u8], i64, &'c [u8])> + Clone,
    ) -> Result<(i64, i64)> {
        let seq = self.store.inner.next_seq()?;
        codec::encode_packed_key(&mut self.key, row, family, cells.clone().map(|(q, _, _)| q));
        codec::encode_packed_value(
            &mut self.value,
            seq,
            cells.clone().map(|(_, ts, v)| (ts, v)),
        );
        let (lo, hi) = cells.fold((i64::MAX, i64::MIN), |(lo, hi), (_, ts, _)| {
            (lo.min(ts), hi.max(ts))
        });
        Ok((lo, hi))
    }

    /// Makes room in table `index`'s buffer for `need` more bytes of arena.
    fn make_room(&mut self, index: usize, need: usize) -> Result<()> {
        if self.pending[index].arena.len() + need > MAX_ARENA {
            // Only a put of gigabytes gets here: its cells so far go out in bulk, as a full
            // buffer's do, and the rest into an empty buffer.
            self.pending[index].bulk = true;
            self.write_pending(index, 0)?;
        }
        Ok(())
    }

    fn put(&mut self, table_index: usize, table: &Table, row: &[u8], cells: &[Cell]) -> Result<()> {
        if table.packed.is_empty() {
            return self.put_cells(table_index, table, row, cells.iter());
        }
        if let [family] = table.packed[..] {
            // A narrow row's put: all its cells in the one packed family.
            if cells.iter().all(|c| c.family == family) {
                return self.put_packed(table_index, table, row, family, cells.iter().collect());
            }
        }
        let (packed, single): (Vec<&Cell>, Vec<&Cell>) =
            cells.iter().partition(|c| table.is_packed(&c.family));
        self.put_cells(table_index, table, row, single.into_iter())?;
        for family in table.packed.iter().copied() {
            let of_family: Vec<&Cell> = packed
                .iter()
                .copied()
                .filter(|c| c.family == family)
                .collect();
            if !of_family.is_empty() {
                self.put_packed(table_index, table, row, family, of_family)?;
            }
        }
        Ok(())
    }

    /// Queues a put's cells of one packed family, in the put's order, as one key-value (with
    /// `newest_timestamp_wins`, those newer than the visible ones).
    fn put_packed(
        &mut self,
        table_index: usize,
        table: &Table,
        row: &[u8],
        family: &str,
        mut cells: Vec<&Cell>,
    ) -> Result<()> {
        if let Some(queued_ts) = &mut self.queued_ts {
            let visible = visible_ts(&self.store, table, row, family)?;
            let queued = &mut queued_ts[table_index];
            cells.retain(|cell| {
                codec::encode_key(&mut self.key, row, family, &cell.qualifier);
                let ts = queued
                    .get(self.key.as_slice())
                    .or_else(|| visible.get(&cell.qualifier))
                    .copied();
                // HBase keeps the newest timestamp; on a tie the later put wins.
                let wins = ts.is_none_or(|ts| cell.ts_ms >= ts);
                if wins {
                    queued.insert(self.key.clone(), cell.ts_ms);
                }
                wins
            });
            if cells.is_empty() {
                return Ok(());
            }
        }
        // By qualifier, the last of a qualifier's cells in the put winning, as it would were
        // they stored one by one; then by kind (`codec::packed_chunks`).
        let apart = is_apart(table.packed_apart(family));
        cells.reverse();
        cells.sort_by(|a, b| a.qualifier.cmp(&b.qualifier));
        // Stable: among a qualifier's cells the put's last comes first, and stays.
        cells.dedup_by(|later, kept| later.qualifier == kept.qualifier);
        codec::apart_last(&mut cells, |c| &c.qualifier, apart);
        for chunk in codec::packed_chunks(&cells, |c| &c.qualifier, apart) {
            let (lo, hi) = self.encode_packed(
                row,
                family,
                chunk
                    .iter()
                    .map(|c| (&c.qualifier[..], c.ts_ms, &c.value[..])),
            )?;
            if self.queued_ts.is_some() {
                self.leases
                    .push(self.store.inner.covering(table_index, lo, hi)?);
                let newest = &self.leases[self.leases.len() - 1].keyspace;
                self.batch
                    .insert(newest, self.key.as_slice(), self.value.as_slice());
                continue;
            }
            self.make_room(table_index, Slot::stored_bytes(&self.key, &self.value))?;
            self.pending[table_index].push_stored(
                &self.key,
                &self.value,
                (lo, hi),
                self.ingest_bytes,
            );
            if self.pending[table_index].bytes() >= self.ingest_bytes {
                self.pending[table_index].bulk = true;
                self.write_pending(table_index, self.ingest_bytes)?;
            }
        }
        Ok(())
    }

    fn put_cells<'c>(
        &mut self,
        table_index: usize,
        table: &Table,
        row: &[u8],
        cells: impl Iterator<Item = &'c Cell>,
    ) -> Result<()> {
        let Some(queued_ts) = &mut self.queued_ts else {
            for cell in cells {
                if table.is_versioned(&cell.family) {
                    let (batch, leases) = (&mut self.batch, &mut self.leases);
                    if !version_key(&self.store, table, row, cell, batch, leases, &mut self.key)? {
                        continue;
                    }
                } else {
                    codec::encode_key(&mut self.key, row, &cell.family, &cell.qualifier);
                }
                self.make_room(table_index, Slot::arena_bytes(&self.key, &cell.value))?;
                self.pending[table_index].push(
                    &self.key,
                    cell.ts_ms,
                    &cell.value,
                    self.ingest_bytes,
                );
            }
            if self.pending[table_index].bytes() >= self.ingest_bytes {
                self.pending[table_index].bulk = true;
                self.write_pending(table_index, self.ingest_bytes)?;
            }
            return Ok(());
        };
        let queued = &mut queued_ts[table_index];
        let cells: Vec<&Cell> = cells.collect();
        if cells.is_empty() {
            return Ok(());
        }
        let lo = cells.iter().map(|c| c.ts_ms).min().unwrap_or(i64::MAX);
        let hi = cells.iter().map(|c| c.ts_ms).max().unwrap_or(i64::MIN);
        let lease = self.store.inner.covering(table_index, lo, hi)?;
        let newest = lease.keyspace.clone();
        self.leases.push(lease);
        for cell in cells {
            if table.is_versioned(&cell.family) {
                // Every version is kept, whatever its stamp: no read of the visible one.
                let (batch, leases) = (&mut self.batch, &mut self.leases);
                if !version_key(&self.store, table, row, cell, batch, leases, &mut self.key)? {
                    continue;
                }
                codec::encode_value(&mut self.value, cell.ts_ms, &cell.value);
                self.batch
                    .insert(&newest, self.key.as_slice(), self.value.as_slice());
                continue;
            }
            codec::encode_key(&mut self.key, row, &cell.family, &cell.qualifier);
            let visible = match queued.get(self.key.as_slice()) {
                Some(&ts) => Some(ts),
                None => table
                    .get_cell(&self.key)
                    .map_err(|e| self.store.inner.fjall_error("read before write", e))?
                    .and_then(|stored| codec::decode_ts(&stored)),
            };
            // HBase keeps the newest timestamp; on a tie the later put wins.
            if visible.is_some_and(|ts| cell.ts_ms < ts) {
                continue;
            }
            queued.insert(self.key.clone(), cell.ts_ms);
            codec::encode_value(&mut self.value, cell.ts_ms, &cell.value);
            self.batch
                .insert(&newest, self.key.as_slice(), self.value.as_slice());
        }
        Ok(())
    }

    /// Removes the row's cells stamped at most `ts_ms`. HBase would instead write a delete
    /// marker that also hides later puts stamped at most `ts_ms` until a major compaction;
    /// hourglass never puts a cell it has deleted, so removing what exists is the same.
    fn delete_row(
        &mut self,
        table_index: usize,
        table: &Table,
        row: &[u8],
        ts_ms: i64,
    ) -> Result<()> {
        // The scan below reads written cells only, so write the puts buffered before it; the
        // removals are committed at once, so that a later put of the row is not removed.
        self.write_all()?;
        codec::encode_row_prefix(&mut self.key, row);
        let generations = table.leases();
        // Per packed family: its stored key-values in the row, and its qualifiers' visible cells.
        let mut packed: Vec<(&str, Vec<Slice>, Visible)> = Vec::new();
        for item in table.prefix(&self.key, None) {
            let (key, stored) = item.map_err(|e| self.store.inner.fjall_error("delete row", e))?;
            let corrupt = || self.store.inner.corrupt(table.name, &key);
            let (_, family, column) = codec::decode_key(&key).ok_or_else(corrupt)?;
            if let Some(family) = table.packed.iter().find(|f| f.as_bytes() == family) {
                if packed.last().is_none_or(|(f, _, _)| f != family) {
                    packed.push((family, Vec::new(), Visible::default()));
                }
                let (_, keys, visible) = packed.last_mut().expect("pushed above");
                visible.add(column, &stored).ok_or_else(corrupt)?;
                keys.push(key);
                continue;
            }
            let Some(ts) = codec::decode_ts(&stored) else {
                return Err(corrupt());
            };
            if ts <= ts_ms {
                if let Some(queued_ts) = &mut self.queued_ts {
                    queued_ts[table_index].insert(key.to_vec(), i64::MIN);
                }
                generations::remove_everywhere(&mut self.batch, &generations, &key);
            }
        }
        for (family, keys, visible) in packed {
            self.delete_packed(
                table_index,
                row,
                family,
                table.packed_apart(family),
                &keys,
                visible,
                ts_ms,
                &generations,
            )?;
        }
        if self.queued_ts.is_none() {
            self.commit()?;
        } else {
            self.leases.extend(generations);
        }
        Ok(())
    }
}

impl EmbeddedWriter {
    /// Deletes a packed family's cells stamped at most `ts_ms` from `row`, given its stored
    /// `keys` there and their `visible` cells: when any goes, every key is removed and the
    /// visible cells that stay are written back as one put, so no cell an earlier put hid
    /// shows again.
    #[allow(clippy::too_many_arguments)]
    fn delete_packed(
        &mut self,
        table_index: usize,
        row: &[u8],
        family: &str,
        apart: &'static [&'static str],
        keys: &[Slice],
        visible: Visible,
        ts_ms: i64,
        generations: &[Lease],
    ) -> Result<()> {
        if visible
            .0
            .values()
            .all(|cell| cell.ts > ts_ms && !cell.hidden)
        {
            return Ok(());
        }
        let mut kept: Vec<(Vec<u8>, VisibleCell)> = Vec::new();
        for (qualifier, cell) in visible.0 {
            if let Some(queued_ts) = &mut self.queued_ts {
                codec::encode_key(&mut self.key, row, family, &qualifier);
                let ts = if cell.ts > ts_ms && !cell.hidden {
                    cell.ts
                } else {
                    i64::MIN
                };
                queued_ts[table_index].insert(self.key.clone(), ts);
            }
            if cell.ts > ts_ms && !cell.hidden {
                kept.push((qualifier, cell));
            }
        }
        // Written back as a put is, in the same key-values.
        let apart = is_apart(apart);
        codec::apart_last(&mut kept, |(q, _)| q, apart);
        // `(keyspace, key)` of each key-value written back.
        let mut written: Vec<(String, Vec<u8>)> = Vec::new();
        for chunk in codec::packed_chunks(&kept, |(q, _)| q, apart) {
            let (lo, hi) = self.encode_packed(
                row,
                family,
                chunk.iter().map(|(q, c)| (&q[..], c.ts, &c.value[..])),
            )?;
            let lease = self.store.inner.covering(table_index, lo, hi)?;
            self.batch
                .insert(&lease.keyspace, self.key.as_slice(), self.value.as_slice());
            written.push((lease.keyspace.name().to_string(), self.key.clone()));
            self.leases.push(lease);
        }
        for key in keys {
            for generation in generations {
                // A batch that removes and inserts one key in one keyspace does not say which
                // comes last: the insert replaces it there.
                let rewritten = written.iter().any(|(keyspace, written)| {
                    keyspace.as_str() == generation.keyspace.name().as_ref()
                        && key.as_ref() == written.as_slice()
                });
                if !rewritten {
                    self.batch.remove(&generation.keyspace, key.clone());
                }
            }
        }
        Ok(())
    }
}

/// The versions of a cell that a put of one of them leaves past its family's count
/// ([`past_versions`]).
struct PastVersions {
    /// Keys of stored versions.
    stored: Vec<Slice>,
    /// Whether the put's own version is past the count (older than as many stored ones).
    this: bool,
}

/// What a put of `cell` leaves past its family's count in `row`: of the versions written
/// (`cell`'s own stamp excluded, which the put replaces) and `cell`, those after the newest
/// [`crate::schema::FamilySpec::max_versions`]. Reads never return them; removing them as puts
/// come, and not writing a put already past the count, keeps a cell's versions on disk near
/// that count. Versions still buffered by a writer are not seen, and are left to a later put
/// or [`EmbeddedStore::purge_expired`].
///
/// A version once past the count stays invisible: newer versions are deleted only along with
/// it (deletes remove what is stamped at most their stamp) and expire after it.
fn past_versions(
    store: &EmbeddedStore,
    table: &Table,
    row: &[u8],
    cell: &Cell,
) -> Result<PastVersions> {
    let keeps = table.max_versions(cell.family.as_bytes()) as usize;
    // Every version of the column, and those of longer qualifiers that start with this one.
    let mut prefix = Vec::new();
    codec::encode_version_key(&mut prefix, row, &cell.family, &cell.qualifier, 0);
    prefix.truncate(prefix.len() - 8);
    // Newest first, in key order; a later version of the same stamp replaces this one.
    let mut versions = Vec::new();
    for item in table.prefix(&prefix, None) {
        let (key, _) = item.map_err(|e| store.inner.fjall_error("read before write", e))?;
        let corrupt = || store.inner.corrupt(table.name, &key);
        let (_, _, column) = codec::decode_key(&key).ok_or_else(corrupt)?;
        if let Column::Version(qualifier, ts) = column {
            if qualifier == cell.qualifier.as_slice() && ts != cell.ts_ms {
                versions.push((ts, key));
            }
        }
    }
    let newer = versions.iter().filter(|(ts, _)| *ts > cell.ts_ms).count();
    // `cell` takes the place after the `newer` ones.
    let stored = versions
        .into_iter()
        .enumerate()
        .filter(|&(i, _)| i + usize::from(i >= newer) >= keeps)
        .map(|(_, (_, key))| key)
        .collect();
    Ok(PastVersions {
        stored,
        this: newer >= keeps,
    })
}

/// Prepares a put of `cell`, of a versioned family, in `row`: queues in `batch` the removal of
/// the stored versions it leaves past the family's count ([`past_versions`]), their generations
/// leased in `leases` until the batch is committed, and writes the version's key into `key`.
/// `false` if the put is itself past the count and is not to be written.
fn version_key(
    store: &EmbeddedStore,
    table: &Table,
    row: &[u8],
    cell: &Cell,
    batch: &mut OwnedWriteBatch,
    leases: &mut Vec<Lease>,
    key: &mut Vec<u8>,
) -> Result<bool> {
    let past = past_versions(store, table, row, cell)?;
    if !past.stored.is_empty() {
        let generations = table.leases();
        for stored in &past.stored {
            generations::remove_everywhere(batch, &generations, stored);
        }
        leases.extend(generations);
    }
    if past.this {
        return Ok(false);
    }
    codec::encode_version_key(key, row, &cell.family, &cell.qualifier, cell.ts_ms);
    Ok(true)
}

/// Whether a qualifier is one of `apart` ([`crate::schema::FamilySpec::packed_apart`]).
fn is_apart(apart: &'static [&'static str]) -> impl Fn(&[u8]) -> bool + Copy {
    move |qualifier| apart.iter().any(|a| a.as_bytes() == qualifier)
}

/// A packed family's visible cell of one qualifier in a row, and the put it comes from.
struct VisibleCell {
    seq: u64,
    ts: i64,
    value: Vec<u8>,
    /// Its put expired in a compaction: it hides earlier cells and shows nothing.
    hidden: bool,
}

/// A packed family's visible cells in a row, by qualifier: of each qualifier's stored cells,
/// the newest put's.
#[derive(Default)]
struct Visible(BTreeMap<Vec<u8>, VisibleCell>);

impl Visible {
    /// Adds the cells of one stored key-value of the family; `None` if it is malformed.
    fn add(&mut self, column: Column<'_>, stored: &[u8]) -> Option<()> {
        let mut offer = |qualifier: &[u8], cell: VisibleCell| {
            if self.0.get(qualifier).is_none_or(|v| v.seq < cell.seq) {
                self.0.insert(qualifier.to_vec(), cell);
            }
        };
        match column {
            // A version, in a family that was versioned before it was packed: one cell.
            Column::Cell(qualifier) | Column::Version(qualifier, _) => {
                let (ts, value) = codec::decode_value(stored)?;
                let cell = VisibleCell {
                    seq: 0,
                    ts,
                    value: value.to_vec(),
                    hidden: false,
                };
                offer(qualifier, cell);
            }
            Column::Packed(qualifiers) => {
                let packed = codec::PackedValue::decode(stored)?;
                let hidden = packed.is_expired_marker();
                for cell in codec::packed_cells(qualifiers, &packed) {
                    let (qualifier, ts, value) = cell?;
                    let cell = VisibleCell {
                        seq: packed.seq,
                        ts,
                        value: value.to_vec(),
                        hidden,
                    };
                    offer(qualifier, cell);
                }
            }
        }
        Some(())
    }
}

/// The timestamps of a packed family's visible cells in `row`, by qualifier, expired or not
/// ([`codec::EXPIRED`] for those of a put a compaction expired), as `newest_timestamp_wins`
/// compares a put's cells with.
fn visible_ts(
    store: &EmbeddedStore,
    table: &Table,
    row: &[u8],
    family: &str,
) -> Result<HashMap<Vec<u8>, i64>> {
    let mut prefix = Vec::new();
    codec::encode_row_prefix(&mut prefix, row);
    let mut visible = Visible::default();
    for item in table.prefix(&prefix, None) {
        let (key, stored) = item.map_err(|e| store.inner.fjall_error("read before write", e))?;
        let corrupt = || store.inner.corrupt(table.name, &key);
        let (_, f, column) = codec::decode_key(&key).ok_or_else(corrupt)?;
        if f == family.as_bytes() {
            visible.add(column, &stored).ok_or_else(corrupt)?;
        }
    }
    Ok(visible.0.into_iter().map(|(q, c)| (q, c.ts)).collect())
}

fn new_batch(store: &EmbeddedStore, capacity: usize) -> OwnedWriteBatch {
    // `Buffer` hands the journal to the OS on each commit, as `Database::batch` does, so a
    // committed batch survives a crash of the process.
    OwnedWriteBatch::with_capacity(store.inner.db.clone(), capacity)
        .durability(Some(PersistMode::Buffer))
}

/// Checks a mutation against the store's tables before anything of it is queued.
fn validate(store: &EmbeddedStore, mutation: &Mutation) -> Result<()> {
    let (_, table) = store.inner.table(mutation.table())?;
    codec::check_row(table.name, mutation.row())?;
    if let Mutation::Put { row, cells, .. } = mutation {
        for cell in cells {
            if table.family(cell.family.as_bytes()).is_none() {
                return Err(Error::Invalid(format!(
                    "table {} has no column family {:?}; put cells in one of {}",
                    table.name,
                    cell.family,
                    table
                        .families
                        .iter()
                        .map(|(f, _)| *f)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            if table.is_packed(&cell.family) {
                // A put's packed cells are split into key-values that fit
                // (`codec::packed_chunks`), as long as each qualifier fits on its own.
                codec::check_packed_key_len(table.name, row, &cell.family, &cell.qualifier)?;
            } else if table.is_versioned(&cell.family) {
                codec::check_version_key_len(table.name, row, &cell.family, &cell.qualifier)?;
            } else {
                codec::check_key_len(table.name, row, &cell.family, &cell.qualifier)?;
            }
            if u32::try_from(cell.value.len() + 8).is_err() {
                return Err(Error::Invalid(format!(
                    "a cell value of {} bytes for table {} exceeds the embedded store's 4 GiB limit",
                    cell.value.len(),
                    table.name
                )));
            }
        }
        for family in table.packed.iter().copied() {
            // Each cell's age and length take at most 20 bytes.
            let bytes: usize = cells
                .iter()
                .filter(|c| c.family == family)
                .map(|c| c.value.len() + 20)
                .sum();
            if u32::try_from(bytes + 16).is_err() {
                return Err(Error::Invalid(format!(
                    "a put of {bytes} bytes to family {family} of table {} exceeds the embedded \
                     store's 4 GiB limit for a put's packed cells",
                    table.name
                )));
            }
        }
    }
    Ok(())
}

impl TableWriter for EmbeddedWriter {
    /// Queues `mutations` in order; a table's buffer is written once it holds 8 MiB of cells
    /// (with `newest_timestamp_wins`: a batch whenever 4096 mutations are queued).
    ///
    /// A `DeleteRow` writes the mutations queued before it, then removes the cells the row
    /// holds at that point.
    ///
    /// # Errors
    /// `Error::Invalid`, with nothing of this call queued, if a mutation names an unknown table
    /// or family, or has an empty, too long or 0x00-holding row key. `Error::Embedded` if a write
    /// fails; the store then refuses writes and the job must stop.
    fn write(&mut self, mutations: Vec<Mutation>) -> Result<()> {
        for mutation in &mutations {
            validate(&self.store, mutation)?;
        }
        let store = self.store.clone();
        for mutation in &mutations {
            let (table_index, table) = store.inner.table(mutation.table())?;
            match mutation {
                Mutation::Put { row, cells, .. } => self.put(table_index, table, row, cells)?,
                Mutation::DeleteRow { row, ts_ms, .. } => {
                    self.delete_row(table_index, table, row, *ts_ms)?;
                }
            }
            if self.queued_ts.is_some() {
                self.queued += 1;
                if self.queued >= BATCH_MUTATIONS {
                    self.commit()?;
                }
            }
        }
        Ok(())
    }

    /// Writes every queued mutation; readers see them when this returns.
    ///
    /// # Errors
    /// `Error::Embedded` if a write fails.
    fn flush(&mut self) -> Result<()> {
        self.write_all()
    }
}

impl Drop for EmbeddedWriter {
    fn drop(&mut self) {
        let pending = self.pending.iter().any(|p| !p.is_empty());
        if pending || !self.batch.is_empty() {
            if let Err(e) = self.write_all() {
                tracing::error!(error = %e, "embedded writer dropped with unflushed mutations");
            }
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
        /// byte order, with its last value. Keys come from a few bytes, with long shared
        /// prefixes, so that many of them are equal in their first 16 bytes and some are
        /// prefixes of others; in arrival order or already in key order, with or without repeats.
        #[test]
        fn a_sorted_buffer_is_a_map_of_the_last_put_of_each_key(
            puts in proptest::collection::vec(
                (proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(b'a'), Just(0xff)], 0..24),
                 any::<u8>()),
                0..200,
            ),
            shared in 0usize..20,
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
            for (suffix, value) in &puts {
                let mut key = vec![b'k'; shared];
                key.extend_from_slice(suffix);
                pending.push(&key, 5, &[*value], 1 << 20);
                let mut stored = 5i64.to_be_bytes().to_vec();
                stored.push(*value);
                model.insert(key, stored);
            }
            let sorted: Vec<(Vec<u8>, Vec<u8>)> =
                pending.sorted().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
            let expected: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
            prop_assert_eq!(sorted, expected);
        }
    }
}
