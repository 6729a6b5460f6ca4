//! Domain types, row-key codec, table schemas, job configuration and the dataflow graph of hourglass.
#![deny(missing_docs)]

pub mod codec;
pub mod config;
pub mod control;
pub mod decode;
pub mod graph;
pub mod query;
pub mod reading;
pub mod registry;
pub mod room;
pub mod rowkey;
pub mod rows;
pub mod schema;
pub mod source;
pub mod stats;
pub mod summary;
pub mod table;
pub mod time;

/// Errors of the pipeline crate and of the storage backends that implement its traits.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The storage backend failed. `retriable` tells whether the same call may succeed later.
    #[error("store error: {message}")]
    Store {
        /// What failed and what to do about it.
        message: String,
        /// Whether retrying the same call may succeed.
        retriable: bool,
    },
    /// A configuration value is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// An argument is invalid.
    #[error("{0}")]
    Invalid(String),
    /// Reading input failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file or stream involved.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// Result with the pipeline [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
