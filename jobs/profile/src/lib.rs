//! The user-profile tag store's domain: its tag registry (definitions, CSV import, SQLite and
//! MySQL backends), its tables and row keys, tag events, the per-user merge, the short-term
//! tags' store (Redis or SQLite), tag purges and a generator of realistic tag traffic.
#![deny(missing_docs)]

pub mod audience;
pub mod bench;
pub mod cache;
pub mod config;
pub mod event;
pub mod generate;
pub mod import;
pub mod job;
pub mod key;
pub mod landing;
pub mod merge;
pub mod purge;
pub mod query;
pub mod registry;
pub mod serve;
pub mod short_term;
mod sqlite;
pub mod tables;
pub mod tag;

pub use cache::CacheConfig;
pub use config::{GrayConfig, ProfileConfig, RedisConfig, RegistryConfig, ShortTermConfig};
pub use event::{
    check_tag, check_value, check_writable, decode_event, CellValue, EventLimits,
    Reason as RejectReason, RejectedEvent, TagEvent,
};
pub use import::{import_csv, CsvImport, RefusedRow, CSV_HEADER};
pub use key::{profile_row, salt, validate_user_id, BadUserId};
pub use merge::{Flushed, MergeConfig, ShortTermValue, TagUpdate, UserMerge};
pub use purge::{purge, Outcome as PurgeOutcome, PurgeCounts, PurgeOptions};
pub use query::{ProfileReader, Selection};
pub use registry::{open, RegistryUrl, TagRegistry, TagStatuses, Upserted};
pub use short_term::{ShortTermStore, Written};
pub use tables::{family_of, tables, HISTORY_TABLE, PROFILE_TABLE};
pub use tag::{DataType, TagDef, TagStatus, ValueType};

/// Errors of the profile crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tag definition, a field of one or an argument breaks a rule; the text says which.
    #[error("{0}")]
    Invalid(String),
    /// The registry refuses a change of a stored tag.
    #[error("tag {code}: {reason}")]
    Refused {
        /// The tag's code.
        code: String,
        /// Why, and what to do instead.
        reason: String,
    },
    /// No tag has this code.
    #[error("unknown tag code '{0}' (see `hourglass tags list`)")]
    UnknownTag(String),
    /// A registry URL that names no backend or cannot be parsed.
    #[error("registry URL '{url}': {reason}")]
    Url {
        /// The URL, its password hidden.
        url: String,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// A CSV file that cannot be read as a tag registry at all (not a bad row: those are
    /// [`RefusedRow`]s).
    #[error("{path}: {reason}")]
    Csv {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The configuration file is invalid.
    #[error("config {path}: {reason}")]
    Config {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// Reading or creating a file or directory failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An audience query that is not valid or asks too much; the message says where and why.
    #[error(transparent)]
    Query(#[from] audience::QueryError),
    /// The tag store (the profile tables) failed; the message says what to do.
    #[error(transparent)]
    Store(#[from] sinks::Error),
    /// Opening the store failed (`hourglass bench profile`); the message says what to do.
    #[error(transparent)]
    Engine(#[from] pipeline::Error),
    /// A SQLite file failed: the registry's, or the embedded short-term tags'.
    #[error("SQLite database {path}: {source}")]
    Sqlite {
        /// The database file.
        path: String,
        /// The cause.
        #[source]
        source: rusqlite::Error,
    },
    /// The MySQL registry failed.
    #[error("MySQL registry {url}: {source}")]
    Mysql {
        /// The URL, its password hidden.
        url: String,
        /// The cause.
        #[source]
        source: mysql::Error,
    },
    /// The short-term tags' Redis failed ([`short_term::is_retriable`] tells whether to try
    /// again).
    #[error("Redis {url}: {source}")]
    Redis {
        /// The URL, its password hidden.
        url: String,
        /// The cause.
        #[source]
        source: redis::RedisError,
    },
}

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
