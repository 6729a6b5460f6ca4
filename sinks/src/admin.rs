//! What table administration answers, the same for every backend: a creation's outcome and a
//! table's description.

/// What creating one table did (`StorageAdmin::create_tables`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// The table did not exist and was created with its split keys.
    Created,
    /// The table existed with the same schema and a region boundary at every split key of its
    /// spec (HBase may have split it further); nothing was changed.
    AlreadyExists,
    /// The table existed with the same schema but lacks some of its spec's split keys as
    /// region boundaries (created before it was pre-split, or split at other keys); nothing
    /// was changed. `hbase::admin::split_commands` says how to add them.
    ExistsWithOtherSplits {
        /// Regions it has.
        regions: usize,
        /// The spec's split keys that are no region boundary, in key order.
        missing: Vec<Vec<u8>>,
    },
    /// The table existed with the same schema (TTL, versions, compression, bloom filter) but
    /// another block size or data block encoding in some family: what it stores and answers is
    /// the same, only its files' size and read cost differ, so it is used as it is and
    /// nothing was changed. `alter` holds the HBase shell commands that give it the spec's
    /// (an `alter` per family, then a `major_compact` that rewrites the files written before).
    ExistsWithOtherStorage {
        /// What differs, `have X, want Y` per attribute.
        differences: Vec<String>,
        /// The HBase shell commands that make the families the spec's.
        alter: Vec<String>,
        /// Regions it has.
        regions: usize,
        /// The spec's split keys that are no region boundary, in key order (as
        /// [`Created::ExistsWithOtherSplits`]; empty when every one is).
        missing: Vec<Vec<u8>>,
    },
}

/// A column family as HBase describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyDescription {
    /// Family name.
    pub name: String,
    /// Time to live in seconds (`None`: forever).
    pub ttl_secs: Option<u64>,
    /// Compression algorithm, as HBase names it (`SNAPPY`, `NONE`, …).
    pub compression: String,
    /// Bloom filter type, as HBase names it (`ROW`, `NONE`, …).
    pub bloom: String,
    /// Maximum versions kept.
    pub max_versions: u32,
    /// Data block size in bytes (`BLOCKSIZE`).
    pub block_size: u32,
    /// Data block encoding, as HBase names it (`NONE`, `FAST_DIFF`, `ROW_INDEX_V1`, …).
    pub data_block_encoding: String,
}

/// One region of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionDescription {
    /// First row key of the region (empty for the first region).
    pub start: Vec<u8>,
    /// First row key after the region (empty for the last region).
    pub end: Vec<u8>,
    /// Region name.
    pub name: String,
    /// `host:port` of the region server holding it.
    pub server: String,
}

/// A table as its backend describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDescription {
    /// Table name.
    pub name: String,
    /// Column families, ordered by name.
    pub families: Vec<FamilyDescription>,
    /// Regions, ordered by start key.
    pub regions: Vec<RegionDescription>,
}
