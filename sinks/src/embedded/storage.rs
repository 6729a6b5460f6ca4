//! The embedded store as a [`Storage`]: its settings build it, opened once and shared by every
//! writer and reader.

use std::any::Any;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use super::prepare::OpenMode;
use super::store::EmbeddedStore;
use crate::admin::{Created, TableDescription};
use crate::config::StoreConfig;
use crate::schema::TableSpec;
use crate::seam::{
    MetricsSource, OpenOptions, StatValue, Storage, StorageAdmin, StorageConfig, StorageReader,
};
use crate::table::{Row, TableWriter};
use crate::{Error, Result};

/// Settings of the embedded store: `store.dir`, `store.generation_mb` and `store.series_layout`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedConfig {
    /// The store's directory.
    pub dir: PathBuf,
    /// Disk size in MiB at which a table starts a new generation.
    pub generation_mb: u64,
    /// Whether tables this open creates take the series layout their specs declare
    /// (experimental; see [`EmbeddedStore::open_with_layouts`]).
    pub series_layout: bool,
}

impl EmbeddedConfig {
    /// The settings of the `[store]` section.
    pub fn from_store(store: &StoreConfig) -> Self {
        EmbeddedConfig {
            dir: store.dir.clone(),
            generation_mb: store.generation_mb,
            series_layout: store.series_layout,
        }
    }
}

impl StorageConfig for EmbeddedConfig {
    fn build(&self, tables: &[TableSpec], options: &OpenOptions) -> Result<Box<dyn Storage>> {
        let dir = &self.dir;
        if options.mode == OpenMode::ReadOnly && !dir.exists() {
            return Err(Error::NoEmbeddedStore { dir: dir.clone() });
        }
        let store = EmbeddedStore::open_with_layouts(
            dir,
            tables,
            options.clock.clone(),
            options.mode,
            self.series_layout,
        )?;
        store.set_generation_bytes(self.generation_mb.saturating_mul(1 << 20));
        Ok(Box::new(EmbeddedStorage {
            store,
            dir: dir.clone(),
            tables: tables.iter().map(|t| t.name).collect(),
            newest_timestamp_wins: options.newest_timestamp_wins,
        }))
    }
}

/// The embedded store opened as a backend.
#[derive(Debug)]
pub struct EmbeddedStorage {
    store: EmbeddedStore,
    dir: PathBuf,
    tables: Vec<&'static str>,
    newest_timestamp_wins: bool,
}

impl Storage for EmbeddedStorage {
    fn writer(&self) -> Box<dyn TableWriter> {
        Box::new(
            self.store
                .writer()
                .newest_timestamp_wins(self.newest_timestamp_wins),
        )
    }

    fn reader(&self) -> Arc<dyn StorageReader> {
        Arc::new(self.store.clone())
    }

    fn admin(&self) -> &dyn StorageAdmin {
        self
    }

    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    /// Syncs the journal.
    fn persist(&self) -> Result<()> {
        self.store.persist()
    }

    /// The store created its tables when it opened.
    fn ensure_tables(&self) -> Result<()> {
        Ok(())
    }

    /// What opening dropped from the journals (see [`EmbeddedStore::dropped_on_open`]).
    fn open_warnings(&self) -> Vec<String> {
        self.store
            .dropped_on_open()
            .iter()
            .map(|dropped| format!("embedded store at {}: {dropped}; dropped", self.location()))
            .collect()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl StorageAdmin for EmbeddedStorage {
    fn create_tables(&self) -> Result<Vec<(String, Created)>> {
        Ok(self
            .tables
            .iter()
            .map(|t| (t.to_string(), Created::AlreadyExists))
            .collect())
    }

    /// None once opened to write (the open creates them); opened read-only, those it did not
    /// find.
    fn missing_tables(&self) -> Result<Vec<String>> {
        Ok(self
            .store
            .absent_tables()
            .iter()
            .map(|t| t.to_string())
            .collect())
    }

    fn describe_tables(&self) -> Result<Vec<TableDescription>> {
        Err(Error::Invalid(format!(
            "describing tables shows HBase's regions; the embedded store at {} has none: \
             pass --hbase HOST:PORT",
            self.dir.display()
        )))
    }

    /// See [`EmbeddedStore::major_compact`].
    fn major_compact(&self, table: &str) -> Result<()> {
        self.store.major_compact(table)
    }

    fn dump_rows(&self, table: &str, each: &mut dyn FnMut(Row) -> ControlFlow<()>) -> Result<()> {
        for row in self.store.dump(table)? {
            if each(row).is_break() {
                break;
            }
        }
        Ok(())
    }
}

/// The embedded store makes no calls to count.
impl MetricsSource for EmbeddedStore {
    fn stats(&self) -> Vec<(String, StatValue)> {
        Vec::new()
    }
}
