//! Storage of hourglass: the table model and table specs (no domain's tables: a domain declares
//! its own and opens storage with them), the [`Storage`] trait with its two
//! backends (the embedded fjall store, HBase over Thrift), dead-letter files, and [`open`],
//! which builds the backend a store configuration names.
#![deny(missing_docs)]

pub mod admin;
pub mod config;
pub mod dead_letter;
pub mod embedded;
pub mod hbase;
pub mod landing;
pub mod schema;
mod seam;
pub mod table;
#[cfg(test)]
mod test_tables;

pub use config::open;
pub use seam::{
    Admin, Clock, MetricsSource, OpenOptions, Reader, RegionReads, StatValue, Storage,
    StorageAdmin, StorageConfig, StorageReader, Store, WriterFactory,
};

/// Errors of the storage crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// HBase failed; see [`hbase::is_retriable`].
    #[error(transparent)]
    Hbase(#[from] hbase::Error),
    /// The embedded store failed; none of these heal by retrying the same call.
    #[error(transparent)]
    Embedded(#[from] embedded::StoreError),
    /// A read-only command was pointed at an embedded store directory that does not exist.
    #[error(
        "no embedded store at {}: run `hourglass replay FILE` first, or pass --store DIR (or \
         --hbase HOST:PORT)",
        dir.display()
    )]
    NoEmbeddedStore {
        /// The directory.
        dir: std::path::PathBuf,
    },
    /// A call was refused before it reached the backend (unknown table, bad row key, …).
    #[error("{0}")]
    Invalid(String),
    /// A store setting is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Writing a dead-letter or late-data file failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file involved.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Whether the same call may succeed if made again later: only some HBase failures
    /// (transport, regions moving, servers busy) may.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Hbase(e) => hbase::is_retriable(e),
            Error::Embedded(_)
            | Error::NoEmbeddedStore { .. }
            | Error::Invalid(_)
            | Error::Config(_)
            | Error::Io { .. } => false,
        }
    }
}

/// Result with the storage [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
