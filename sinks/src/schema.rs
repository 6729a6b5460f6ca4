//! What a table is, as data: [`TableSpec`] (name, families with TTL, versions, compression,
//! bloom filter, block size and encoding, split keys) and the split policies that compute split keys. A domain declares
//! its tables with them (the sensor tables: `sensor::tables`); storage knows no domain.

use std::fmt;
use std::fmt::Write as _;

/// Block compression of a column family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// No compression.
    None,
    /// Snappy (HBase needs a codec for it; see `scripts/services.sh`).
    Snappy,
}

impl Compression {
    /// The name HBase uses.
    pub fn hbase_name(self) -> &'static str {
        match self {
            Compression::None => "NONE",
            Compression::Snappy => "SNAPPY",
        }
    }
}

/// Bloom filter type of a column family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bloom {
    /// No bloom filter.
    None,
    /// Bloom filter on row keys.
    Row,
}

impl Bloom {
    /// The name HBase uses.
    pub fn hbase_name(self) -> &'static str {
        match self {
            Bloom::None => "NONE",
            Bloom::Row => "ROW",
        }
    }
}

/// How HBase encodes the keys inside a family's data blocks, before block compression
/// (HBase's `DATA_BLOCK_ENCODING`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataBlockEncoding {
    /// Keys stored whole (HBase's default).
    None,
    /// Each key as the length it shares with the previous key and the rest, with timestamps
    /// and types as deltas: the smallest files for keys that share long prefixes, such as a
    /// device's readings, at some CPU to decode a block.
    FastDiff,
    /// Keys stored whole plus an index of the block's rows, so that a Get seeks within a block
    /// instead of walking it: for point reads of small rows.
    RowIndexV1,
}

impl DataBlockEncoding {
    /// The name HBase uses.
    pub fn hbase_name(self) -> &'static str {
        match self {
            DataBlockEncoding::None => "NONE",
            DataBlockEncoding::FastDiff => "FAST_DIFF",
            DataBlockEncoding::RowIndexV1 => "ROW_INDEX_V1",
        }
    }
}

/// HBase's default block size of a family, 64 KiB (`BLOCKSIZE`).
pub const DEFAULT_BLOCK_SIZE: u32 = 64 * 1024;

/// One column family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilySpec {
    /// Family name.
    pub name: &'static str,
    /// Time to live of a cell, in seconds, counted from the cell timestamp (`None`: forever).
    pub ttl_secs: Option<u64>,
    /// Block compression.
    pub compression: Compression,
    /// Bloom filter.
    pub bloom: Bloom,
    /// Maximum number of versions kept per cell.
    pub max_versions: u32,
    /// HBase only: the size in bytes a data block is cut at before it is encoded and
    /// compressed, the unit a Get reads from disk or the block cache (default
    /// [`DEFAULT_BLOCK_SIZE`], HBase's). Smaller blocks make point reads read less; larger ones
    /// compress better and make scans read fewer. The embedded store ignores it.
    pub block_size: u32,
    /// HBase only: how keys are encoded inside a data block (default
    /// [`DataBlockEncoding::None`], HBase's). The embedded store, which has its own block
    /// format, ignores it.
    pub data_block_encoding: DataBlockEncoding,
    /// Embedded store only: each put's cells of this family are stored as one key-value instead
    /// of one per cell (HBase stores them as it always does), or as a few when they list more
    /// than a key's worth of qualifiers (docs/ARCHITECTURE.md §7). Reads answer the same either
    /// way. A narrow row's reading is one key-value instead of two; a replay's wide row, one
    /// put of an hour's points and summary, about ten instead of 366.
    pub packed: bool,
    /// Packed families only: qualifiers whose cells a put stores in a key-value of their own,
    /// apart from its other cells. For cells that puts rewrite (a wide row's summary, rewritten
    /// by every firing of its hour): a put of the same of them replaces their key-value, where
    /// packed with each firing's new points they would stay, hidden, in every firing's.
    pub packed_apart: &'static [&'static str],
}

/// How a table's cells are series points (issue 38): a row key splits into a series id and a
/// *row time*, and the layout's point cells of the row ([`SeriesPoints`]) are points of that
/// series, all stamped as the row time says ([`SeriesLayout::stamp`]). The domain supplies the
/// functions (as [`KeyCodec`] does); the store checks every put against them and keeps the
/// cells that do not round-trip exactly in its generic layout.
#[derive(Clone, Copy)]
pub struct SeriesLayout {
    /// A name for the mapping, recorded in the store (two layouts are equal when their names
    /// are).
    pub name: &'static str,
    /// The series id and the row time a row key holds; `None` for a key that is not a series
    /// row. Must be the inverse of `join` (the store checks that a row joins back to itself).
    pub split: fn(&[u8]) -> Option<(&str, i64)>,
    /// The row key of `(series, row time)`, appended to the buffer.
    pub join: fn(&str, i64, &mut Vec<u8>),
    /// The one series whose rows alone can lie in the row range `[start, stop)` (`stop` empty:
    /// no end), if the range lies within one series' rows; `None` when it may hold several.
    pub series_in: fn(&[u8], &[u8]) -> Option<String>,
    /// The stamp (ms) of every point cell of the row at a row time; `None` if it has none (out
    /// of range): the row's cells are then generic. Narrow rows: the time in ms; wide rows:
    /// the row's hour's last millisecond. A point's partition, and so its expiry, follow it.
    pub stamp: fn(i64) -> Option<i64>,
    /// The packed family ([`FamilySpec::packed`], one version) whose cells are the points'.
    pub family: &'static str,
    /// Which cells of a row are points, and at what time.
    pub points: SeriesPoints,
    /// A point cell's double, `None` if its bytes are not one that `render` gives back.
    pub parse: fn(&[u8]) -> Option<f64>,
    /// A point cell's bytes of a double, appended to the buffer.
    pub render: fn(f64, &mut Vec<u8>),
}

/// Which cells of a series row are points ([`SeriesLayout::points`]).
#[derive(Debug, Clone, Copy)]
pub enum SeriesPoints {
    /// The row is one point, at the row time (a narrow row): its value cell, and its extra
    /// cell (any UTF-8 text but empty; absent in a point whose extra is empty).
    Row {
        /// The qualifier of the value cell, stored as a double.
        value: &'static [u8],
        /// The qualifier of the extra cell.
        extra: &'static [u8],
    },
    /// Each cell whose qualifier names a time is a point at that time, its value the cell's,
    /// with no extra (a wide row: one cell per offset in the row's hour). The row's other
    /// cells (a wide row's summary) are generic.
    Cells {
        /// The time of the point a qualifier holds in the row at a row time; `None` for a
        /// qualifier that holds none.
        time: fn(i64, &[u8]) -> Option<i64>,
        /// The row time of the row holding the point at a time.
        row_time: fn(i64) -> i64,
        /// The qualifier of the point at a time (second) in the row at a row time (first),
        /// appended to the buffer: with `row_time`, the inverse of `time` (the store checks
        /// that a cell's qualifier comes back).
        qualifier: fn(i64, i64, &mut Vec<u8>),
    },
}

impl SeriesLayout {
    /// The row time of the row holding the point at `time`.
    pub(crate) fn row_time(&self, time: i64) -> i64 {
        match self.points {
            SeriesPoints::Row { .. } => time,
            SeriesPoints::Cells { row_time, .. } => row_time(time),
        }
    }

    /// The stamp of the point at `time` (`i64::MAX` if it has none: no point the store holds).
    pub(crate) fn point_stamp(&self, time: i64) -> i64 {
        (self.stamp)(self.row_time(time)).unwrap_or(i64::MAX)
    }

    /// The series and row time of `row` if it is a series row: it splits, and joins back to
    /// itself (`scratch` is the buffer it is joined into).
    pub(crate) fn split_exact<'r>(
        &self,
        row: &'r [u8],
        scratch: &mut Vec<u8>,
    ) -> Option<(&'r str, i64)> {
        let (series, time) = (self.split)(row)?;
        scratch.clear();
        (self.join)(series, time, scratch);
        (scratch.as_slice() == row).then_some((series, time))
    }
}

impl fmt::Debug for SeriesLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeriesLayout")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Two layouts are the same when their names are (function addresses are not comparable).
impl PartialEq for SeriesLayout {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for SeriesLayout {}

impl FamilySpec {
    /// The family's attributes as the HBase shell writes them (`{NAME => 'd', VERSIONS => 1,
    /// …}`), for `create` and `alter`. The block size and data block encoding are named only
    /// when they are not HBase's defaults.
    pub fn hbase_shell_family(&self) -> String {
        let ttl = self
            .ttl_secs
            .map_or("FOREVER".to_string(), |t| t.to_string());
        let mut out = format!(
            "{{NAME => '{}', VERSIONS => {}, TTL => {}, COMPRESSION => '{}', BLOOMFILTER => '{}'",
            self.name,
            self.max_versions,
            ttl,
            self.compression.hbase_name(),
            self.bloom.hbase_name()
        );
        if self.block_size != DEFAULT_BLOCK_SIZE {
            let _ = write!(out, ", BLOCKSIZE => {}", self.block_size);
        }
        if self.data_block_encoding != DataBlockEncoding::None {
            let _ = write!(
                out,
                ", DATA_BLOCK_ENCODING => '{}'",
                self.data_block_encoding.hbase_name()
            );
        }
        out.push('}');
        out
    }

    /// The family `name` as the domains' tables declare theirs unless they say otherwise: cells
    /// kept `ttl_secs` (`None`: forever), one version, Snappy blocks of HBase's default size
    /// and encoding (64 KiB, none), a row bloom filter, not packed. Other settings by struct
    /// update:
    /// `FamilySpec { packed: true, ..FamilySpec::new("t", None) }`.
    pub const fn new(name: &'static str, ttl_secs: Option<u64>) -> Self {
        FamilySpec {
            name,
            ttl_secs,
            compression: Compression::Snappy,
            bloom: Bloom::Row,
            max_versions: 1,
            block_size: DEFAULT_BLOCK_SIZE,
            data_block_encoding: DataBlockEncoding::None,
            packed: false,
            packed_apart: &[],
        }
    }
}

/// How a table's row keys are made, as its domain's codec makes them: the layout in words, and
/// the row-key prefix of one entity's rows (a device's, a room's, a user's), which decides the
/// region they land in. Storage only carries it: the codec functions stay in the domain's codec
/// module, and `tables describe` and the landing check ask the spec instead of knowing them.
#[derive(Clone, Copy)]
pub struct KeyCodec {
    /// The key's layout, e.g. `<bucket:2>_<device>_<Long.MAX - ts:19>`.
    pub layout: &'static str,
    /// The row-key prefix every row of one entity starts with (its salt included).
    pub entity_prefix: fn(&str) -> Vec<u8>,
    /// Embedded store only: the table's rows as series points ([`SeriesLayout`]), used by a
    /// store created with `[store] series_layout = true` (experimental; docs/ARCHITECTURE.md
    /// §7b). `None` (the default): the generic layout. HBase ignores it. It rides on the key
    /// codec because the mapping starts from the row key.
    pub series: Option<SeriesLayout>,
}

impl KeyCodec {
    /// A codec of `layout` whose entity rows start with `entity_prefix(entity)`.
    pub const fn new(layout: &'static str, entity_prefix: fn(&str) -> Vec<u8>) -> Self {
        KeyCodec {
            layout,
            entity_prefix,
            series: None,
        }
    }

    /// This codec, its rows mapped to series points by `layout`.
    pub const fn with_series(self, layout: SeriesLayout) -> Self {
        KeyCodec {
            series: Some(layout),
            ..self
        }
    }

    /// Row key = the entity itself, unsalted (tables of tests, and plain keys to compare a
    /// salted layout with).
    pub const fn raw() -> Self {
        KeyCodec::new("<entity>", raw_prefix)
    }
}

fn raw_prefix(entity: &str) -> Vec<u8> {
    entity.as_bytes().to_vec()
}

impl fmt::Debug for KeyCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyCodec")
            .field("layout", &self.layout)
            .field("series", &self.series)
            .finish_non_exhaustive()
    }
}

/// Two codecs are the same when their layouts are (function addresses are not comparable).
impl PartialEq for KeyCodec {
    fn eq(&self, other: &Self) -> bool {
        self.layout == other.layout && self.series == other.series
    }
}

impl Eq for KeyCodec {}

/// One table: name, row-key codec, families and the split keys it is created with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    /// Table name.
    pub name: &'static str,
    /// How its row keys are made.
    pub key: KeyCodec,
    /// Column families.
    pub families: Vec<FamilySpec>,
    /// Region split keys, strictly increasing (`n` keys make `n + 1` regions). HBase creates
    /// the table with them; the embedded store, one LSM tree per table with no regions, ignores
    /// them.
    pub split_keys: Vec<Vec<u8>>,
    /// Rows one call of a multi-get asks for at most (HBase: rows per `getMultiple`, each call
    /// holding rows of one region). Wide rows want few per call, so that one answer is not a
    /// huge message; narrow rows want many, so that a batch is few calls
    /// ([`DEFAULT_GET_ROWS_PER_CALL`] unless the table says otherwise). The embedded store,
    /// which reads in-process, ignores it.
    pub get_rows_per_call: usize,
}

/// Rows per multi-get call of a table that does not choose: 12, half a day of the sensors'
/// wide hourly rows (up to 3,600 cells each).
pub const DEFAULT_GET_ROWS_PER_CALL: usize = 12;

impl TableSpec {
    /// The region (0-based, in split-key order) where the rows of `entity` start: the number of
    /// split keys at or below its row-key prefix.
    pub fn region_of(&self, entity: &str) -> usize {
        let prefix = (self.key.entity_prefix)(entity);
        self.split_keys
            .partition_point(|k| k.as_slice() <= prefix.as_slice())
    }

    /// The family with this name.
    pub fn family(&self, name: &str) -> Option<&FamilySpec> {
        self.families.iter().find(|f| f.name == name)
    }

    /// The HBase shell command that creates this table. A family's block size and data block
    /// encoding are named only when they are not HBase's defaults.
    pub fn hbase_shell_ddl(&self) -> String {
        let mut out = format!("create '{}'", self.name);
        for f in &self.families {
            let _ = write!(out, ", {}", f.hbase_shell_family());
        }
        if !self.split_keys.is_empty() {
            let keys: Vec<String> = self.split_keys.iter().map(|k| shell_string(k)).collect();
            let _ = write!(out, ", SPLITS => [{}]", keys.join(", "));
        }
        out
    }
}

/// `key` as an HBase shell (Ruby) string literal: single-quoted when it is printable ASCII
/// without quotes or backslashes (every id hourglass accepts is), double-quoted with `\xNN`
/// escapes otherwise, which the shell's `to_java_bytes` turns back into the same bytes.
pub fn shell_string(key: &[u8]) -> String {
    if key
        .iter()
        .all(|&b| (b.is_ascii_graphic() && b != b'\'' && b != b'\\') || b == b' ')
    {
        return format!("'{}'", String::from_utf8_lossy(key));
    }
    let mut out = String::from("\"");
    for &b in key {
        if b.is_ascii_alphanumeric() {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out.push('"');
    out
}

/// `regions − 1` split keys cutting the ids `prefix` + `digits` decimal digits into equal ranges,
/// each followed by `separator` (see [`quantile_split_keys`] for why): for `("dev", 5)`, 16
/// regions and `_`, `dev06250_`, `dev12500_`, …. At most one region per id.
pub fn pattern_split_keys(
    (prefix, digits): (&str, u32),
    regions: u32,
    separator: u8,
) -> Vec<Vec<u8>> {
    let span = 10u64.pow(digits);
    let regions = u64::from(regions.max(1)).min(span);
    let width = digits as usize;
    (1..regions)
        .map(|k| {
            let mut key = format!("{prefix}{:0width$}", k * span / regions).into_bytes();
            key.push(separator);
            key
        })
        .collect()
}

/// Split keys at the weighted quantiles of `ids`, for a table whose row keys start with an id
/// then `separator`, as HBase's sampling splitters choose them: line up the rows (each id
/// repeated as often as its weight) in key order, and split at the key prefix
/// `<id><separator>` of the row at each `k/regions`-th position. An id holding several of
/// those positions is one split key; the first id is none (its region would be empty of the
/// ids given).
///
/// A split key is an id followed by the separator (the row-key prefix of the id's rows), so
/// that an id's rows never straddle two regions when ids contain no separator. The bare id
/// would not do: with `_`, the rows of `r15` (`r15_…`) sort after `r1` and before `r1_`.
pub fn quantile_split_keys<'a>(
    ids: impl IntoIterator<Item = (&'a str, u64)>,
    regions: u32,
    separator: u8,
) -> Vec<Vec<u8>> {
    let mut weights: std::collections::BTreeMap<Vec<u8>, u64> = std::collections::BTreeMap::new();
    for (id, w) in ids {
        let mut prefix = id.as_bytes().to_vec();
        prefix.push(separator);
        *weights.entry(prefix).or_default() += w;
    }
    let total: u128 = weights.values().map(|&w| u128::from(w)).sum();
    let n = u128::from(regions.max(1));
    let mut keys = Vec::new();
    let (mut k, mut before) = (1u128, 0u128);
    for (i, (id, &w)) in weights.iter().enumerate() {
        let after = before + u128::from(w);
        let mut holds = false;
        while k < n && k * total / n < after {
            holds = true;
            k += 1;
        }
        if holds && i > 0 {
            keys.push(id.clone());
        }
        before = after;
    }
    keys
}

/// Appends the bytes of salt bucket `bucket` to `key`: its number as at least two decimal
/// digits (`00`..`15`; Java's `String.format("%02d", bucket)`). A salted table's row keys
/// start with them (the sensors' narrow keys: `sensor::codec::narrow::narrow_prefix`) and its
/// split keys are them ([`salt_split_keys`]); this is their one definition.
pub fn push_salt_bucket(key: &mut Vec<u8>, bucket: u32) {
    if bucket < 100 {
        // Without formatting: every reading's key starts with it.
        key.extend_from_slice(&[b'0' + (bucket / 10) as u8, b'0' + (bucket % 10) as u8]);
    } else {
        key.extend_from_slice(bucket.to_string().as_bytes());
    }
}

/// The bytes of salt bucket `bucket` ([`push_salt_bucket`]): the split key its region starts
/// at, and the start of each of its rows' keys.
pub fn salt_bucket_key(bucket: u32) -> Vec<u8> {
    let mut key = Vec::with_capacity(2);
    push_salt_bucket(&mut key, bucket);
    key
}

/// Split keys that give each decimal salt bucket its own region: for 16 buckets (`00`..`15`),
/// `01`, `02`, … `15`.
///
/// The seed split on `03`, `06`, … `2d` (hex), which leaves 10 of 16 regions empty for the
/// decimal buckets the row key actually uses.
pub fn salt_split_keys(buckets: u32) -> Vec<Vec<u8>> {
    (1..buckets).map(salt_bucket_key).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_salt_bucket_is_its_number_in_at_least_two_digits() {
        for b in [0, 7, 15, 99, 100, 999] {
            assert_eq!(salt_bucket_key(b), format!("{b:02}").into_bytes());
        }
    }

    #[test]
    fn quantiles_follow_the_weight_of_the_ids() {
        // 1,000 devices of gateway `gw03-` and 20 of each other gateway: most regions go to gw03.
        let mut ids = Vec::new();
        for gw in 0..16 {
            let n = if gw == 3 { 1000 } else { 20 };
            ids.extend((0..n).map(|d| format!("gw{gw:02}-{d:04}")));
        }
        let keys = quantile_split_keys(ids.iter().map(|d| (d.as_str(), 1)), 16, b'_');
        assert_eq!(keys.len(), 15);
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        let mut per_region = vec![0u32; 16];
        for d in &ids {
            let key = format!("{d}_1724101200");
            per_region[keys.partition_point(|k| k.as_slice() <= key.as_bytes())] += 1;
        }
        let mean = ids.len() as f64 / 16.0;
        let max = f64::from(*per_region.iter().max().unwrap());
        assert!(max / mean < 1.1, "{per_region:?}");
        // Weights, not counts: two heavy ids get a region each.
        let keys = quantile_split_keys([("a", 1), ("b", 100), ("c", 100), ("d", 1)], 4, b'_');
        assert_eq!(keys, vec![b"b_".to_vec(), b"c_".to_vec()]);
        // Key order, not id order: `r1_…` sorts after `r15_…`.
        let rooms = [("r1", 1), ("r10", 1), ("r15", 1), ("r2", 1)];
        let keys = quantile_split_keys(rooms, 4, b'_');
        assert_eq!(
            keys,
            vec![b"r15_".to_vec(), b"r1_".to_vec(), b"r2_".to_vec()]
        );
        // Fewer ids than regions: a region each, never an empty first one.
        let keys = quantile_split_keys([("r1", 5), ("r2", 5)], 16, b'_');
        assert_eq!(keys, vec![b"r2_".to_vec()]);
        assert!(quantile_split_keys(std::iter::empty(), 16, b'_').is_empty());
    }

    #[test]
    fn the_shell_ddl_names_a_block_layout_only_when_it_is_not_hbases_default() {
        let family = FamilySpec::new("t", Some(60));
        assert_eq!(
            family.hbase_shell_family(),
            "{NAME => 't', VERSIONS => 1, TTL => 60, COMPRESSION => 'SNAPPY', BLOOMFILTER => 'ROW'}"
        );
        let tuned = FamilySpec {
            block_size: 16 * 1024,
            data_block_encoding: DataBlockEncoding::RowIndexV1,
            ..family
        };
        assert_eq!(
            tuned.hbase_shell_family(),
            "{NAME => 't', VERSIONS => 1, TTL => 60, COMPRESSION => 'SNAPPY', BLOOMFILTER => 'ROW', \
             BLOCKSIZE => 16384, DATA_BLOCK_ENCODING => 'ROW_INDEX_V1'}"
        );
    }

    #[test]
    fn shell_strings_escape_what_ruby_would_read_otherwise() {
        assert_eq!(shell_string(b"dev06250"), "'dev06250'");
        assert_eq!(shell_string(b"a'b\\c\x01"), "\"a\\x27b\\x5cc\\x01\"");
    }
}
