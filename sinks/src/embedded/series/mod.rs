//! The series chunk: one sealed time partition of readings, sorted by (series, time) and stored
//! column by column, each column in an encoding made for its data (issue 38, step 1).
//!
//! The embedded store writes and reads chunks for a table whose key codec declares a series
//! layout, in a store created with it (`store/series.rs`, `writer/series.rs`).
//! docs/ARCHITECTURE.md §7b gives the byte layout and the store's use of it, and
//! docs/BENCHMARKS.md ("Series chunk bytes") what it reaches on generator data.
//!
//! One file per column kind, as Prometheus' `tsdb/chunkenc`: [`chunk`] frames a chunk (header,
//! block directory, blocks of column sections, checksums) and holds [`Point`]; `ids` the series
//! ids (sorted dictionary and run lengths); `times` the timestamps (deltas within a series);
//! `floats` the primary value (decimal-aware: scaled integers, with exact exceptions); `extras`
//! the other fields (a JSON object per reading, split into typed columns by key, raw where it
//! would not round-trip); `strings` dictionary columns; `numbers` the integer column codec;
//! `bytes` varints and the bounds-checked reader.
//!
//! Why pcodec for the integer columns and not hand-written Gorilla XOR or delta-of-delta, nor
//! varints of deltas under zstd: measured on 6 M generator readings (`examples/series_bytes.rs`,
//! figures in docs/BENCHMARKS.md), pcodec's columns are the smallest of the three on five of
//! the six numeric fields (on the sixth, a nearly constant battery voltage, zstd saves 0.008
//! bytes a reading), because it picks, per column, the delta order, a common multiple (a
//! decimal column scaled by 1000 costs what it did by 10) and near-optimal bin widths by
//! itself. Gorilla is 2–25 times larger: the values are decimals, whose doubles differ in a
//! dozen noisy mantissa bits where their scaled integers differ by a few units. pcodec
//! compresses at under half zstd's speed (1.08 against 0.46 CPU s for six 6 M-value columns),
//! some 15–20 % of a chunk's encoding: not what encoding costs. zstd stays for bytes that are
//! not numbers (raw extras).

mod bytes;
pub mod chunk;
mod extras;
mod floats;
mod ids;
mod numbers;
mod strings;
mod times;

pub use chunk::{
    block_count, column_sizes, decode, decode_series, encode, encode_blocks, Point, BLOCK_POINTS,
    FORMAT_VERSION, MAGIC, MAX_POINTS,
};

/// Why a series chunk could not be encoded or decoded; each message says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bytes are not a whole, intact series chunk.
    #[error(
        "series chunk is damaged: {0}; the partition must be rebuilt from its source (the \
         journal or a replay of the input)"
    )]
    Corrupt(String),
    /// The chunk was written by a format version this build does not read.
    #[error(
        "series chunk has format version {0}, this build reads versions 1 to {FORMAT_VERSION}; \
         open the store with the hourglass version that wrote it"
    )]
    Version(u8),
    /// A column could not be compressed (pcodec refused it).
    #[error(
        "series chunk column {column} could not be compressed: {detail}; report this as a bug"
    )]
    Compress {
        /// The column.
        column: &'static str,
        /// pcodec's description.
        detail: String,
    },
}

impl Error {
    /// A [`Error::Corrupt`] saying what is wrong.
    pub(crate) fn corrupt(what: impl Into<String>) -> Self {
        Error::Corrupt(what.into())
    }
}

/// The result of series chunk operations.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests;
