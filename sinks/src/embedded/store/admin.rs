//! Upkeep of an open store: purging expired cells, generation settings and counts, dumps and
//! syncs to disk.

use super::EmbeddedStore;
use crate::embedded::codec;
use crate::embedded::generations;
use crate::table::{Row, ScanSpec, TableReader};
use crate::Result;
use fjall::PersistMode;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

/// Removals committed per fjall batch by [`EmbeddedStore::purge_expired`].
const PURGE_BATCH: usize = 4096;

impl EmbeddedStore {
    /// Deletes every expired cell of every table now, and every version of a cell past its family's
    /// [`crate::schema::FamilySpec::max_versions`], like an HBase major compaction does, and
    /// returns how many cells (versions) it deleted. Compactions drop expired cells on their own,
    /// and a put of a cell its versions past the family's count; call this to reclaim space without
    /// waiting for them.
    ///
    /// A writer that re-puts an expired cell while this runs may see its put deleted; for
    /// hourglass that put carries the same, expired, timestamp, so nothing visible is lost.
    ///
    /// # Errors
    /// `Error::Embedded` if fjall fails to read or write.
    pub fn purge_expired(&self) -> Result<u64> {
        let inner = &self.inner;
        let now = (inner.now_ms)();
        let mut purged = 0u64;
        let purged_tables = inner
            .tables
            .iter()
            .filter(|t| t.has_ttl() || !t.versioned.is_empty());
        for table in purged_tables {
            let mut batch = inner.db.batch();
            // Leased until the last batch is committed.
            let generations = table.leases();
            // Of the row being read: the live versions seen of each versioned cell, which come
            // newest first (`codec::encode_version_key`).
            let mut row_key: Vec<u8> = Vec::new();
            let mut versions: HashMap<(Vec<u8>, Vec<u8>), u32> = HashMap::new();
            // Series points are not cells on their own: their partitions go whole, below.
            for item in table.generic_range() {
                let (key, value) = item.map_err(|e| inner.fjall_error("purge expired cells", e))?;
                let Some((row, family, column)) = codec::decode_key(&key) else {
                    continue;
                };
                let Some((_, ttl)) = table.family(family) else {
                    continue;
                };
                let expired =
                    codec::decode_ts(&value).is_some_and(|ts| codec::is_expired(ts, ttl, now));
                let mut past_count = false;
                if let (false, codec::Column::Version(qualifier, _)) = (expired, column) {
                    if row != row_key.as_slice() {
                        row_key = row.to_vec();
                        versions.clear();
                    }
                    let seen = versions
                        .entry((family.to_vec(), qualifier.to_vec()))
                        .or_default();
                    *seen += 1;
                    past_count = *seen > table.max_versions(family);
                }
                if expired || past_count {
                    generations::remove_everywhere(&mut batch, &generations, &key);
                    purged += 1;
                    if batch.len() >= PURGE_BATCH {
                        let full = std::mem::replace(&mut batch, inner.db.batch());
                        full.commit()
                            .map_err(|e| inner.fjall_error("purge expired cells", e))?;
                    }
                }
            }
            if let Some(runs) = &table.series {
                if let Some((_, Some(ttl))) = table.family(runs.layout.family.as_bytes()) {
                    runs.drop_expired(ttl, now, &mut batch)
                        .map_err(|e| inner.fjall_error("purge expired cells", e))?;
                }
            }
            batch
                .commit()
                .map_err(|e| inner.fjall_error("purge expired cells", e))?;
        }
        if purged > 0 {
            tracing::info!(cells = purged, dir = %inner.dir.display(), "purged expired cells and versions");
        }
        Ok(purged)
    }

    /// Compacts every generation of `table` into its last level, as HBase's major compaction
    /// does a region's files: each keyspace's memtable is flushed, then its tables merged
    /// (fjall's `major_compact`, blocking). Removed cells are gone from reads at once (deletes
    /// remove keys, they leave no marker for reads to honour); this drops their fjall
    /// tombstones and the values under them from disk, and the expired cells the TTL filter
    /// meets on the way.
    ///
    /// # Errors
    /// `Error::Invalid` for an unknown table; `Error::Embedded` if fjall fails to write.
    pub fn major_compact(&self, table: &str) -> Result<()> {
        let inner = &self.inner;
        let (_, t) = inner.table(table)?;
        for keyspace in t.generations() {
            keyspace
                .rotate_memtable_and_wait()
                .map_err(|e| inner.fjall_error("major compaction", e))?;
            keyspace
                .major_compact()
                .map_err(|e| inner.fjall_error("major compaction", e))?;
        }
        if let Some(runs) = &t.series {
            // Runs a merge replaced, and points deletes rewrote, stay on disk until then.
            runs.keyspace
                .rotate_memtable_and_wait()
                .map_err(|e| inner.fjall_error("major compaction", e))?;
            runs.keyspace
                .major_compact()
                .map_err(|e| inner.fjall_error("major compaction", e))?;
        }
        Ok(())
    }

    /// Sets the disk bytes at which a table's newest generation is closed and writes move on to a
    /// new one (default [`GENERATION_BYTES`](crate::embedded::GENERATION_BYTES); see the
    /// `generations` module). Small values are for tests; a value smaller than one write makes
    /// every write start a generation.
    pub fn set_generation_bytes(&self, bytes: u64) {
        self.inner.generation_bytes.store(bytes, Ordering::Relaxed);
    }

    /// How many generations `table` has.
    ///
    /// # Errors
    /// `Error::Invalid` for an unknown table.
    pub fn generation_count(&self, table: &str) -> Result<usize> {
        Ok(self.inner.table(table)?.1.generations().len())
    }

    /// Every visible row of `table`, in key order.
    ///
    /// # Errors
    /// `Error::Invalid` for an unknown table; `Error::Embedded` if fjall fails to read.
    pub fn dump(&self, table: &str) -> Result<Vec<Row>> {
        self.scan(table, &ScanSpec::default())
    }

    /// Syncs every committed write to disk (fjall journal, `fsync`). Writes are committed by
    /// [`crate::table::TableWriter::flush`]; call this once at the end of a job.
    ///
    /// # Errors
    /// `Error::Embedded` if the sync fails; the store then refuses further writes.
    pub fn persist(&self) -> Result<()> {
        self.inner
            .db
            .persist(PersistMode::SyncAll)
            .map_err(|e| self.inner.fjall_error("persist", e))
    }
}
