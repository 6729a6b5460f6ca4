//! The table sink's index maintenance: each `user_profile_tag` put brings the index entries
//! of its changed values, and the retraction of the old ones (`crate::audience::maintain`).

use std::sync::Arc;

use operators::BatchWriter;
use pipeline::control::JobControl;
use sinks::table::{Mutation, TableReader};

use crate::audience::maintain::changes;
use crate::key::parse_profile_row;
use crate::merge::FastMap;
use crate::registry::{RegistryUrl, TagRegistry};
use crate::tables::PROFILE_TABLE;
use crate::tag::DataType;

/// Wraps the table writer: before a batch with profile puts is written, reads the stored rows
/// of its users with one multi-get ([`TableReader::get_many`]), and adds to the batch the index
/// entries of the values that change and the deletes of the entries they replace.
///
/// What this writer passed on since the last flush is not yet readable: it remembers the
/// values it wrote, per user and tag, until its inner writer flushes. A user is always on the
/// same worker (the job exchanges events by user), so no other writer changes its row between
/// the read and the write. Tag types come from the registry, read again when a code is new to
/// this writer (a code's type never changes once written, `TagDef::check_change`).
pub(crate) struct IndexingWriter<W> {
    inner: W,
    /// `None`: the index is off (`[index] enabled = false`), batches pass as they are.
    reader: Option<sinks::Reader>,
    url: RegistryUrl,
    registry: Option<Box<dyn TagRegistry>>,
    types: FastMap<String, DataType>,
    /// (user, code) → (stamp, value) written since the last flush.
    pending: FastMap<(String, String), (i64, Vec<u8>)>,
    control: Arc<JobControl>,
}

impl<W> IndexingWriter<W> {
    /// `inner`, reading stored rows through `reader` (`None`: no index) and tag types from
    /// the registry at `url`.
    pub(crate) fn new(
        inner: W,
        reader: Option<sinks::Reader>,
        url: RegistryUrl,
        control: Arc<JobControl>,
    ) -> Self {
        IndexingWriter {
            inner,
            reader,
            url,
            registry: None,
            types: FastMap::default(),
            pending: FastMap::default(),
            control,
        }
    }

    /// The type of `code`, reading the registry again if the code is new.
    fn type_of(&mut self, code: &str) -> Option<DataType> {
        if let Some(t) = self.types.get(code) {
            return Some(*t);
        }
        if self.registry.is_none() {
            match self.url.open() {
                Ok(r) => self.registry = Some(r),
                Err(e) => {
                    self.control
                        .fail(format!("index: opening the tag registry {}: {e}", self.url));
                    return None;
                }
            }
        }
        let listed = self.registry.as_mut().map(|r| r.list());
        match listed {
            Some(Ok(defs)) => {
                for d in defs {
                    self.types.insert(d.tag_code, d.data_type);
                }
            }
            Some(Err(e)) => {
                // Reconnected at the next new code: MySQL drops idle connections.
                self.registry = None;
                self.control
                    .fail(format!("index: reading the tag registry {}: {e}", self.url));
            }
            None => {}
        }
        self.types.get(code).copied()
    }

    /// The index mutations of `batch`'s profile puts.
    fn index_of(&mut self, batch: &[Mutation]) -> sinks::Result<Vec<Mutation>> {
        let puts: Vec<(&str, &[u8], &[sinks::table::Cell])> = batch
            .iter()
            .filter_map(|m| match m {
                Mutation::Put { table, row, cells } if *table == PROFILE_TABLE => {
                    parse_profile_row(row).map(|user| (user, row.as_slice(), cells.as_slice()))
                }
                _ => None,
            })
            .collect();
        let mut out = Vec::new();
        let Some(reader) = self.reader.as_ref().filter(|_| !puts.is_empty()) else {
            return Ok(out);
        };
        let rows: Vec<Vec<u8>> = puts.iter().map(|(_, row, _)| row.to_vec()).collect();
        let stored = reader.get_many(PROFILE_TABLE, &rows, None)?;
        for ((user, _, cells), stored) in puts.into_iter().zip(stored) {
            for cell in cells {
                let Ok(code) = std::str::from_utf8(&cell.qualifier) else {
                    continue;
                };
                let Some(data_type) = self.type_of(code) else {
                    continue;
                };
                let key = (user.to_string(), code.to_string());
                let old = match self.pending.get(&key) {
                    Some((ts, value)) => Some((*ts, value.as_slice())),
                    None => stored
                        .as_ref()
                        .and_then(|r| r.cell(&cell.family, &cell.qualifier))
                        .map(|c| (c.ts_ms, c.value.as_slice())),
                };
                if changes(user, code, data_type, cell, old, &mut out) {
                    self.pending.insert(key, (cell.ts_ms, cell.value.clone()));
                }
            }
        }
        Ok(out)
    }
}

impl<W: BatchWriter<Mutation, Error = sinks::Error>> BatchWriter<Mutation> for IndexingWriter<W> {
    type Error = sinks::Error;

    fn write(&mut self, mut batch: Vec<Mutation>) -> sinks::Result<()> {
        if self.reader.is_none() {
            return self.inner.write(batch);
        }
        let index = self.index_of(&batch)?;
        batch.extend(index);
        self.inner.write(batch)
    }

    fn flush(&mut self) -> sinks::Result<()> {
        self.inner.flush()?;
        self.pending.clear();
        Ok(())
    }
}
