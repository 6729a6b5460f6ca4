//! HBase as a [`Storage`]: its settings build it; each writer opens its own connection, and
//! what they send is added up in one [`WriterStats`], which the job's `/metrics` reads.

use std::any::Any;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::admin;
use super::{HbaseConfig, HbaseStore, HbaseWriter, ReaderStats, WriterStats};
use crate::admin::{Created, TableDescription};
use crate::schema::TableSpec;
use crate::seam::{
    MetricsSource, OpenOptions, StatValue, Storage, StorageAdmin, StorageConfig, StorageReader,
};
use crate::table::{Row, ScanSpec, TableWriter};
use crate::{Error, Result};

impl StorageConfig for HbaseConfig {
    /// Contacts nothing: each writer and reader connects on its first call. Retries are bounded
    /// by [`OpenOptions::retry_limit`] on top of the configuration's own limit.
    fn build(&self, tables: &[TableSpec], options: &OpenOptions) -> Result<Box<dyn Storage>> {
        let mut cfg = self.clone();
        if let Some(limit) = options.retry_limit {
            cfg.retry.max_elapsed = Some(cfg.retry.max_elapsed.map_or(limit, |m| m.min(limit)));
        }
        Ok(Box::new(HbaseStorage {
            cfg,
            tables: tables.to_vec(),
            stats: Arc::new(WriterStats::default()),
        }))
    }
}

/// HBase opened as a backend.
#[derive(Debug)]
pub struct HbaseStorage {
    cfg: HbaseConfig,
    tables: Vec<TableSpec>,
    /// What every writer sent, added up.
    stats: Arc<WriterStats>,
}

impl HbaseStorage {
    /// The settings in use (the retry limit of [`OpenOptions::retry_limit`] applied).
    pub fn config(&self) -> &HbaseConfig {
        &self.cfg
    }
}

impl Storage for HbaseStorage {
    fn writer(&self) -> Box<dyn TableWriter> {
        Box::new(HbaseWriter::with_stats(&self.cfg, self.stats.clone()).for_tables(&self.tables))
    }

    /// A reader with a connection pool and region boundaries of its own, its multi-gets cut
    /// as the tables' specs say ([`TableSpec::get_rows_per_call`]).
    fn reader(&self) -> Arc<dyn StorageReader> {
        Arc::new(HbaseStore::for_tables(&self.cfg, &self.tables))
    }

    fn admin(&self) -> &dyn StorageAdmin {
        self
    }

    fn location(&self) -> String {
        format!("HBase at {}", self.cfg.thrift1)
    }

    /// HBase writes are durable once flushed.
    fn persist(&self) -> Result<()> {
        Ok(())
    }

    fn ensure_tables(&self) -> Result<()> {
        let missing = admin::missing_tables(&self.cfg, &self.tables)?;
        if missing.is_empty() {
            return Ok(());
        }
        Err(super::Error::TablesMissing {
            tables: missing.join(", "),
            addr: self.cfg.thrift1.clone(),
        }
        .into())
    }

    fn metrics(&self) -> Option<Arc<dyn MetricsSource>> {
        Some(Arc::new(WriterMetrics {
            stats: self.stats.clone(),
            batch_rows: self.cfg.batch_rows,
            batch_cells: self.cfg.batch_cells,
            batch_bytes: self.cfg.batch_bytes,
        }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl StorageAdmin for HbaseStorage {
    /// Pre-split, through the Thrift2 gateway.
    fn create_tables(&self) -> Result<Vec<(String, Created)>> {
        Ok(admin::create_tables(&self.cfg, &self.tables)?)
    }

    fn missing_tables(&self) -> Result<Vec<String>> {
        Ok(admin::missing_tables(&self.cfg, &self.tables)?)
    }

    fn describe_tables(&self) -> Result<Vec<TableDescription>> {
        Ok(admin::describe_tables(&self.cfg, &self.tables)?)
    }

    /// Thrift1 `majorCompact`: asynchronous, HBase compacts after the call returns.
    fn major_compact(&self, table: &str) -> Result<()> {
        Ok(admin::major_compact(&self.cfg, table)?)
    }

    /// The scan goes on to its end after `each` breaks; the rows after are not passed on.
    fn dump_rows(&self, table: &str, each: &mut dyn FnMut(Row) -> ControlFlow<()>) -> Result<()> {
        let mut stopped = false;
        HbaseStore::new(&self.cfg)
            .scan_each(table, &ScanSpec::default(), |row| {
                if !stopped {
                    stopped = each(row).is_break();
                }
            })
            .map_err(Error::from)?;
        Ok(())
    }
}

/// The writers' [`WriterStats`] and the batch limits they send under, by name: `calls`,
/// `rows`, `cells`, `bytes`, `largest_call_rows`, `largest_call_cells`, `deleted_rows`,
/// `retries`, and the settings `max_rows_per_call`, `max_cells_per_call`, `max_bytes_per_call`.
#[derive(Debug)]
struct WriterMetrics {
    stats: Arc<WriterStats>,
    batch_rows: usize,
    batch_cells: usize,
    batch_bytes: usize,
}

impl MetricsSource for WriterMetrics {
    fn stats(&self) -> Vec<(String, StatValue)> {
        let s = &self.stats;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            (
                "max_rows_per_call",
                StatValue::Setting(self.batch_rows as u64),
            ),
            (
                "max_cells_per_call",
                StatValue::Setting(self.batch_cells as u64),
            ),
            (
                "max_bytes_per_call",
                StatValue::Setting(self.batch_bytes as u64),
            ),
            ("calls", StatValue::Counter(get(&s.calls))),
            ("rows", StatValue::Counter(get(&s.rows))),
            ("cells", StatValue::Counter(get(&s.cells))),
            ("bytes", StatValue::Counter(get(&s.bytes))),
            ("largest_call_rows", StatValue::Gauge(get(&s.max_call_rows))),
            (
                "largest_call_cells",
                StatValue::Gauge(get(&s.max_call_cells)),
            ),
            ("deleted_rows", StatValue::Counter(get(&s.deletes))),
            ("retries", StatValue::Counter(get(&s.retries))),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect()
    }
}

/// The reader's [`ReaderStats`] by name: `get_row_calls`, `get_rows_calls`, `scans`,
/// `scan_calls`, `region_lookups`; and its reads per region.
impl MetricsSource for HbaseStore {
    fn stats(&self) -> Vec<(String, StatValue)> {
        let ReaderStats {
            get_row_calls,
            get_rows_calls,
            scans,
            scan_calls,
            region_lookups,
        } = HbaseStore::stats(self);
        [
            ("get_row_calls", get_row_calls),
            ("get_rows_calls", get_rows_calls),
            ("scans", scans),
            ("scan_calls", scan_calls),
            ("region_lookups", region_lookups),
        ]
        .into_iter()
        .map(|(name, c)| {
            (
                name.to_string(),
                StatValue::Counter(c.load(Ordering::Relaxed)),
            )
        })
        .collect()
    }

    fn region_reads(&self) -> Vec<crate::seam::RegionReads> {
        HbaseStore::region_reads(self)
    }
}
