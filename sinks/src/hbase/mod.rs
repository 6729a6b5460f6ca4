//! The HBase backend: a batched Thrift2 writer, a Thrift2 reader, and table admin over both
//! gateways (Thrift1 for table names and regions, which the reader also reads to send each
//! multi-get call one region's rows).

pub mod admin;
mod client;
mod coalesce;
mod config;
mod regions;
mod retry;
mod sink;
mod storage;
mod store;
mod thrift2;
mod wire;

#[cfg(test)]
mod tests;

pub use config::{HbaseConfig, RetryPolicy};
pub use regions::{MAX_COUNTED_REGIONS, REGIONS_MAX_AGE};
pub use retry::is_retriable;
pub use sink::{HbaseWriter, WriterStats};
pub use storage::HbaseStorage;
pub use store::{HbaseStore, ReaderStats, PARALLEL_GETS};

/// Why a call to HBase failed; each message says what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The Thrift gateway could not be reached, or the connection broke during a call.
    #[error(
        "{call} to the HBase Thrift gateway at {addr} failed: {message}; check that HBase and \
         its Thrift gateway are running (scripts/services.sh up hbase)"
    )]
    Transport {
        /// Gateway address.
        addr: String,
        /// The Thrift call.
        call: &'static str,
        /// The transport's description.
        message: String,
    },
    /// HBase answered the call with an IOError (region moving, server busy, missing table, …).
    #[error("{call} on table {table} failed in HBase: {message}")]
    Server {
        /// The Thrift call.
        call: &'static str,
        /// The table, or `-` for calls that name none.
        table: String,
        /// HBase's exception message.
        message: String,
        /// HBase's own verdict (`false` for a `DoNotRetryIOException`), if it gave one.
        can_retry: Option<bool>,
    },
    /// The table does not exist.
    #[error(
        "table {table} not found in HBase at {addr}: run `hourglass tables create --hbase {addr}`"
    )]
    TableNotFound {
        /// The table.
        table: String,
        /// Thrift1 gateway address.
        addr: String,
    },
    /// Tables hourglass writes do not exist.
    #[error(
        "table(s) {tables} not found in HBase at {addr}: run `hourglass tables create --hbase {addr}`"
    )]
    TablesMissing {
        /// The missing tables, comma-separated.
        tables: String,
        /// Thrift1 gateway address.
        addr: String,
    },
    /// HBase rejected an argument (bad column family, malformed row, …).
    #[error("HBase rejected {call} on table {table} as an illegal argument: {message}")]
    IllegalArgument {
        /// The Thrift call.
        call: &'static str,
        /// The table.
        table: String,
        /// HBase's message.
        message: String,
    },
    /// The gateway sent something this client cannot decode, or a mutation is too large.
    #[error(
        "{call} to the HBase Thrift gateway at {addr}: {message}; the gateway must speak Thrift \
         TBinaryProtocol over an unframed socket (HBase's default)"
    )]
    Protocol {
        /// Gateway address.
        addr: String,
        /// The Thrift call.
        call: &'static str,
        /// What went wrong.
        message: String,
    },
    /// An existing table's schema differs from the one hourglass needs.
    #[error(
        "table {table} exists in HBase with a different schema: {differences}; drop it in the \
         HBase shell (disable '{table}'; drop '{table}') and run `hourglass tables create` again, \
         or alter it to: {ddl}"
    )]
    SchemaMismatch {
        /// The table.
        table: String,
        /// What differs, `have X, want Y` per attribute.
        differences: String,
        /// The HBase shell DDL of the wanted schema.
        ddl: String,
    },
    /// Retrying a retriable error took longer than the policy allows.
    #[error("gave up after {attempts} attempts in {elapsed_s:.0}s: {last}")]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// Seconds spent.
        elapsed_s: f64,
        /// The last error.
        #[source]
        last: Box<Error>,
    },
}

/// Result with the HBase [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
