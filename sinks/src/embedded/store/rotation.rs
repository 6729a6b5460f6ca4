//! A table's generations over time: the newest one's span widened before writes, a new one
//! started when it is full, the oldest dropped once all their cells have expired.

use super::Inner;
use crate::embedded::codec;
use crate::embedded::generations::{self, table_options, Generation, Lease, Span};
use crate::Result;
use fjall::PersistMode;
use std::sync::atomic::Ordering;

impl Inner {
    /// The generation of table `index` that writes go to, its span widened first, if need be,
    /// to hold cells stamped within `[lo, hi]`. Write them into the generation returned even if
    /// another writer has started a newer one since, and hold the lease until they are
    /// committed.
    pub(crate) fn covering(&self, index: usize, lo: i64, hi: i64) -> Result<Lease> {
        let table = &self.tables[index];
        {
            let generations = table.read();
            let newest = &generations[generations.len() - 1];
            if newest.span.covers(lo, hi) {
                return Ok(newest.lease());
            }
        }
        let mut generations = table.write();
        let newest = generations
            .last_mut()
            .expect("a table has at least one generation");
        if !newest.span.covers(lo, hi) {
            let span = newest.span.widened(lo, hi);
            self.record_span(newest.keyspace.name(), span)?;
            newest.span = span;
        }
        Ok(newest.lease())
    }

    /// Drops table `index`'s oldest generations once every cell in them has expired, as HBase's
    /// FIFO compaction drops a TTL table's store files whole, and returns how many it dropped.
    ///
    /// Only in a table whose every family has a TTL, from the oldest generation up, never the
    /// newest, and not one a writer holds a [`Lease`] of. The cells dropped were invisible
    /// already, and no older write of their keys is left to show in their place, so no read
    /// answers differently.
    pub(crate) fn drop_expired(&self, index: usize) -> Result<usize> {
        let table = &self.tables[index];
        let Some(ttl) = table.longest_ttl() else {
            return Ok(0);
        };
        let now = (self.now_ms)();
        let mut dropped = 0;
        loop {
            let mut generations = table.write();
            let oldest = &generations[0];
            let droppable = generations.len() > 1
                && !oldest.is_leased()
                && codec::is_expired(oldest.span.hi, Some(ttl), now);
            if !droppable {
                return Ok(dropped);
            }
            let oldest = generations.remove(0);
            drop(generations);
            let name = oldest.keyspace.name().to_string();
            // A reader still iterating the keyspace finishes; fjall removes its files after.
            self.db
                .delete_keyspace(oldest.keyspace)
                .map_err(|e| self.fjall_error("drop an expired generation", e))?;
            self.spans
                .remove(name.as_str())
                .map_err(|e| self.fjall_error("drop an expired generation", e))?;
            tracing::info!(
                table = table.name,
                generation = name,
                newest_cell_ms = oldest.span.hi,
                "embedded store dropped a generation whose cells have all expired"
            );
            dropped += 1;
        }
    }

    /// Records the span of the generation whose keyspace is `name`, synced to disk before any
    /// cell it lets in is written.
    fn record_span(&self, name: &str, span: Span) -> Result<()> {
        self.spans
            .insert(name, span.encode())
            .map_err(|e| self.fjall_error("record a generation's time span", e))?;
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| self.fjall_error("record a generation's time span", e))
    }

    /// Starts a new generation of table `index` if its newest holds more than the generation
    /// size on disk. Writers call it after they write; one of them starts the generation.
    pub(crate) fn close_full_generation(&self, index: usize) -> Result<()> {
        let table = &self.tables[index];
        let limit = self.generation_bytes.load(Ordering::Relaxed);
        if !table.read().last().is_some_and(|g| g.is_full(limit)) {
            return Ok(());
        }
        let mut generations = table.write();
        let closed = &generations[generations.len() - 1];
        // Another writer may have started one since the check above.
        if !closed.is_full(limit) {
            return Ok(());
        }
        let bytes = closed.keyspace.disk_space();
        // Numbered after the newest, not by count: the oldest may have been dropped.
        let n = generations::parse_keyspace_name(closed.keyspace.name()).map_or(0, |(_, n)| n) + 1;
        let name = generations::keyspace_name(table.name, n);
        let keyspace = self
            .db
            .keyspace(&name, table_options)
            .map_err(|e| self.fjall_error("start a generation", e))?;
        self.record_span(&name, Span::EMPTY)?;
        generations.push(Generation::new(keyspace, Span::EMPTY));
        drop(generations);
        tracing::info!(
            table = table.name,
            generation = n,
            closed_bytes = bytes,
            "embedded store started a new generation"
        );
        self.drop_expired(index)?;
        Ok(())
    }
}
