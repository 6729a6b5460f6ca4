//! Table specifications: the HBase schema of every hourglass table, as code.
//!
//! The row keys themselves are `pipeline::codec`'s, except two things the split keys here are
//! cut at, defined once here because this crate cannot depend on `pipeline`: the separator
//! [`KEY_SEPARATOR`] and the bytes of a salt bucket ([`push_salt_bucket`]), which the codec
//! writes its keys with.

use std::fmt::Write as _;

/// Name of the main table of narrow rows.
pub const NARROW_TABLE: &str = "ts_metric";
/// Name of the table of hourly wide rows.
pub const HOURLY_TABLE: &str = "ts_metric_hourly";
/// Name of the room view: every device's latest reading under its room.
pub const ROOM_TABLE: &str = "ts_room_latest";
/// The single column family of every hourglass table.
pub const FAMILY: &str = "t";
/// Retention of readings: 90 days, in seconds.
pub const RETENTION_SECS: u64 = 90 * 24 * 3600;
/// Number of salt buckets of the narrow table (and of its regions).
pub const SALT_BUCKETS: u32 = 16;
/// Regions `ts_metric_hourly` and `ts_room_latest` are pre-split into unless told otherwise:
/// as many as the narrow table's, so that the three tables spread over the same servers.
pub const DEFAULT_ID_REGIONS: u32 = SALT_BUCKETS;
/// The device ids the default split of `ts_metric_hourly` is made for: `hourglass generate`'s
/// `dev` followed by five digits (see [`IdSplits::generator_default`]).
pub const DEFAULT_DEVICE_PATTERN: (&str, u32) = ("dev", 5);
/// The room ids the default split of `ts_room_latest` is made for: `hourglass generate`'s
/// `room` followed by three digits.
pub const DEFAULT_ROOM_PATTERN: (&str, u32) = ("room", 3);
/// The qualifiers of a wide row's summary cells in `ts_metric_hourly`, in the order written;
/// its other cells are points, one per second offset.
pub const HOURLY_SUMMARY_QUALIFIERS: [&str; 6] = ["n", "min", "max", "sum", "first", "last"];

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

/// One table: name, families and the split keys it is created with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    /// Table name.
    pub name: &'static str,
    /// Column families.
    pub families: Vec<FamilySpec>,
    /// Region split keys, strictly increasing (`n` keys make `n + 1` regions). HBase creates
    /// the table with them; the embedded store, one LSM tree per table with no regions, ignores
    /// them.
    pub split_keys: Vec<Vec<u8>>,
}

impl TableSpec {
    /// The family with this name.
    pub fn family(&self, name: &str) -> Option<&FamilySpec> {
        self.families.iter().find(|f| f.name == name)
    }

    /// The HBase shell command that creates this table.
    pub fn hbase_shell_ddl(&self) -> String {
        let mut out = format!("create '{}'", self.name);
        for f in &self.families {
            let ttl = f.ttl_secs.map_or("FOREVER".to_string(), |t| t.to_string());
            let _ = write!(
                out,
                ", {{NAME => '{}', VERSIONS => {}, TTL => {}, COMPRESSION => '{}', BLOOMFILTER => '{}'}}",
                f.name,
                f.max_versions,
                ttl,
                f.compression.hbase_name(),
                f.bloom.hbase_name()
            );
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

/// The split keys of the tables whose row keys start with an id: `ts_metric_hourly`
/// (`<device>_<hour>`) and `ts_room_latest` (`<room>_<device>`).
///
/// A split key is an id followed by the key separator `_` (the row-key prefix of the id's rows),
/// so that a device's wide rows, and a room's rows, never straddle two regions: ids contain no
/// `_`. The bare id would not do: the rows of `r15` (`r15_…`) sort after `r1` and before
/// `r1_`. HBase leaves a table it
/// was not told how to split in one region until that region grows to its split size: every
/// dashboard read and every write of the table meanwhile go to one region server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdSplits {
    /// Split keys of `ts_metric_hourly`: device ids.
    pub devices: Vec<Vec<u8>>,
    /// Split keys of `ts_room_latest`: room ids.
    pub rooms: Vec<Vec<u8>>,
}

impl IdSplits {
    /// No pre-split: one region each.
    pub fn none() -> Self {
        IdSplits {
            devices: Vec::new(),
            rooms: Vec::new(),
        }
    }

    /// The split when nothing is known of the fleet: `regions` equal ranges of the ids
    /// `hourglass generate` writes at the widths it starts from, `dev00000`..`dev99999` and
    /// `room000`..`room999` ([`DEFAULT_DEVICE_PATTERN`], [`DEFAULT_ROOM_PATTERN`]): for 16,
    /// `dev06250_`, `dev12500_`, … and `room062_`, `room125_`, ….
    ///
    /// Why the widest fleet of that pattern and not the generator's default 1,000 devices: one
    /// hot region hurts at scale, and a fleet of 100,000 devices split for 1,000 would write
    /// 99 % of its rows into the last region, where a fleet of 1,000 split for 100,000 lands in
    /// the first region, which holds its load. Ids of another pattern all land in one region,
    /// as without a pre-split: give the fleet's ids instead ([`IdSplits::from_weights`]).
    pub fn generator_default(regions: u32) -> Self {
        IdSplits {
            devices: pattern_split_keys(DEFAULT_DEVICE_PATTERN, regions),
            rooms: pattern_split_keys(DEFAULT_ROOM_PATTERN, regions),
        }
    }

    /// The split at the quantiles of the fleet's ids: `devices` and `rooms` are ids with their
    /// weight (rows each adds to its table, in any order, repeats added up), and each table is
    /// cut into at most `regions` ranges of about equal weight, in the order of their rows'
    /// keys. Fewer distinct ids than regions give fewer regions; no ids, one region.
    pub fn from_weights<'a>(
        devices: impl IntoIterator<Item = (&'a str, u64)>,
        rooms: impl IntoIterator<Item = (&'a str, u64)>,
        regions: u32,
    ) -> Self {
        IdSplits {
            devices: quantile_split_keys(devices, regions),
            rooms: quantile_split_keys(rooms, regions),
        }
    }
}

impl Default for IdSplits {
    /// [`IdSplits::generator_default`] over [`DEFAULT_ID_REGIONS`].
    fn default() -> Self {
        IdSplits::generator_default(DEFAULT_ID_REGIONS)
    }
}

/// `regions − 1` split keys cutting the ids `prefix` + `digits` decimal digits into equal ranges.
fn pattern_split_keys((prefix, digits): (&str, u32), regions: u32) -> Vec<Vec<u8>> {
    let span = 10u64.pow(digits);
    let regions = u64::from(regions.max(1)).min(span);
    let width = digits as usize;
    (1..regions)
        .map(|k| {
            let mut key = format!("{prefix}{:0width$}", k * span / regions).into_bytes();
            key.push(KEY_SEPARATOR);
            key
        })
        .collect()
}

/// The byte between an id and the rest of a row key; `pipeline::codec::key::SEPARATOR` is this
/// one.
pub const KEY_SEPARATOR: u8 = b'_';

/// Split keys at the weighted quantiles of `ids`, as HBase's sampling splitters choose them:
/// line up the rows (each id repeated as often as its weight) in key order, and split at the
/// key prefix `<id>_` of the row at each `k/regions`-th position. An id holding several of
/// those positions is one split key; the first id is none (its region would be empty of the
/// ids given).
pub fn quantile_split_keys<'a>(
    ids: impl IntoIterator<Item = (&'a str, u64)>,
    regions: u32,
) -> Vec<Vec<u8>> {
    let mut weights: std::collections::BTreeMap<Vec<u8>, u64> = std::collections::BTreeMap::new();
    for (id, w) in ids {
        let mut prefix = id.as_bytes().to_vec();
        prefix.push(KEY_SEPARATOR);
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

fn data_family() -> FamilySpec {
    FamilySpec {
        name: FAMILY,
        ttl_secs: Some(RETENTION_SECS),
        compression: Compression::Snappy,
        bloom: Bloom::Row,
        max_versions: 1,
        packed: false,
        packed_apart: &[],
    }
}

/// Appends the bytes of salt bucket `bucket` to `key`: its number as at least two decimal
/// digits (`00`..`15`; Java's `String.format("%02d", bucket)`). Every salted narrow row key
/// starts with them (`pipeline::codec::narrow::narrow_prefix`) and the narrow table's split keys
/// are them ([`salt_split_keys`]); this is their one definition.
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

/// Split keys that give each decimal salt bucket `00`..`15` its own region: `01`, `02`, … `15`.
///
/// The seed split on `03`, `06`, … `2d` (hex), which leaves 10 of 16 regions empty for the
/// decimal buckets the row key actually uses.
pub fn salt_split_keys(buckets: u32) -> Vec<Vec<u8>> {
    (1..buckets).map(salt_bucket_key).collect()
}

/// `ts_metric`: one narrow row per reading, salted and time-reversed, pre-split per salt bucket.
pub fn narrow_table() -> TableSpec {
    TableSpec {
        name: NARROW_TABLE,
        // One put per row: a reading's `t:v` and `t:x` go in one key-value.
        families: vec![FamilySpec {
            packed: true,
            ..data_family()
        }],
        split_keys: salt_split_keys(SALT_BUCKETS),
    }
}

/// `ts_metric_hourly` pre-split by the default [`IdSplits`].
pub fn hourly_table() -> TableSpec {
    hourly_table_split(&IdSplits::default())
}

/// `ts_metric_hourly`: one wide row per device and hour, `<device>_<hour start>`; pre-split at
/// `splits.devices`, since its keys start with the device id.
pub fn hourly_table_split(splits: &IdSplits) -> TableSpec {
    TableSpec {
        name: HOURLY_TABLE,
        // A replay writes a wide row once, a live hour at every early firing: its new points and
        // the summary, which is kept apart so that each firing's replaces the last one's.
        families: vec![FamilySpec {
            packed: true,
            packed_apart: &HOURLY_SUMMARY_QUALIFIERS,
            ..data_family()
        }],
        split_keys: splits.devices.clone(),
    }
}

/// `ts_room_latest` pre-split by the default [`IdSplits`].
pub fn room_table() -> TableSpec {
    room_table_split(&IdSplits::default())
}

/// `ts_room_latest`: row `<room>_<device>`, cell `t:v` = the device's latest value stamped with
/// its event time. Small (one row per device) but read by every dashboard's room scans, so it
/// is pre-split at `splits.rooms`: a room's rows stay in one region, and rooms spread.
pub fn room_table_split(splits: &IdSplits) -> TableSpec {
    TableSpec {
        name: ROOM_TABLE,
        families: vec![data_family()],
        split_keys: splits.rooms.clone(),
    }
}

/// Every table hourglass writes, the id-keyed ones pre-split by the default [`IdSplits`].
pub fn all_tables() -> Vec<TableSpec> {
    all_tables_split(&IdSplits::default())
}

/// Every table hourglass writes, `ts_metric_hourly` and `ts_room_latest` pre-split at `splits`.
pub fn all_tables_split(splits: &IdSplits) -> Vec<TableSpec> {
    vec![
        narrow_table(),
        hourly_table_split(splits),
        room_table_split(splits),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_table_has_one_region_per_bucket() {
        let spec = narrow_table();
        assert_eq!(spec.split_keys.len() + 1, SALT_BUCKETS as usize);
        assert_eq!(spec.split_keys.first(), Some(&b"01".to_vec()));
        assert_eq!(spec.split_keys.last(), Some(&b"15".to_vec()));
        // Every bucket prefix falls in a region of its own.
        for b in 0..SALT_BUCKETS {
            let key = format!("{b:02}_dev");
            let region = spec
                .split_keys
                .iter()
                .filter(|k| k.as_slice() <= key.as_bytes())
                .count();
            assert_eq!(region, b as usize);
        }
    }

    #[test]
    fn a_salt_bucket_is_its_number_in_at_least_two_digits() {
        for b in [0, 7, 15, 99, 100, 999] {
            assert_eq!(salt_bucket_key(b), format!("{b:02}").into_bytes());
        }
    }

    #[test]
    fn the_default_split_cuts_the_generators_ids_evenly() {
        let s = IdSplits::default();
        assert_eq!(s.devices.len(), 15);
        assert_eq!(s.devices[0], b"dev06250_");
        assert_eq!(s.devices[14], b"dev93750_");
        assert_eq!(s.rooms[0], b"room062_");
        assert_eq!(s.rooms[14], b"room937_");
        for keys in [&s.devices, &s.rooms] {
            assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        }
        // 100,000 generated devices: 6,250 in each region.
        let keys = &s.devices;
        let mut per_region = vec![0u32; keys.len() + 1];
        for i in 0..100_000 {
            let key = format!("dev{i:05}_1724101200");
            per_region[keys.partition_point(|k| k.as_slice() <= key.as_bytes())] += 1;
        }
        assert!(per_region.iter().all(|&n| n == 6250), "{per_region:?}");
        assert_eq!(IdSplits::generator_default(1), IdSplits::none());
    }

    #[test]
    fn quantiles_follow_the_weight_of_the_ids() {
        // 1,000 devices of gateway `gw03-` and 20 of each other gateway: most regions go to gw03.
        let mut ids = Vec::new();
        for gw in 0..16 {
            let n = if gw == 3 { 1000 } else { 20 };
            ids.extend((0..n).map(|d| format!("gw{gw:02}-{d:04}")));
        }
        let keys = quantile_split_keys(ids.iter().map(|d| (d.as_str(), 1)), 16);
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
        let keys = quantile_split_keys([("a", 1), ("b", 100), ("c", 100), ("d", 1)], 4);
        assert_eq!(keys, vec![b"b_".to_vec(), b"c_".to_vec()]);
        // Key order, not id order: `r1_…` sorts after `r15_…`.
        let rooms = [("r1", 1), ("r10", 1), ("r15", 1), ("r2", 1)];
        let keys = quantile_split_keys(rooms, 4);
        assert_eq!(
            keys,
            vec![b"r15_".to_vec(), b"r1_".to_vec(), b"r2_".to_vec()]
        );
        // Fewer ids than regions: a region each, never an empty first one.
        let keys = quantile_split_keys([("r1", 5), ("r2", 5)], 16);
        assert_eq!(keys, vec![b"r2_".to_vec()]);
        assert!(quantile_split_keys(std::iter::empty(), 16).is_empty());
    }

    #[test]
    fn shell_strings_escape_what_ruby_would_read_otherwise() {
        assert_eq!(shell_string(b"dev06250"), "'dev06250'");
        assert_eq!(shell_string(b"a'b\\c\x01"), "\"a\\x27b\\x5cc\\x01\"");
    }

    #[test]
    fn ddl_names_the_schema() {
        let ddl = narrow_table().hbase_shell_ddl();
        assert!(ddl.starts_with("create 'ts_metric', {NAME => 't', VERSIONS => 1, TTL => 7776000"));
        assert!(ddl.contains("COMPRESSION => 'SNAPPY'"));
        assert!(ddl.contains("BLOOMFILTER => 'ROW'"));
        assert!(ddl.ends_with("SPLITS => ['01', '02', '03', '04', '05', '06', '07', '08', '09', '10', '11', '12', '13', '14', '15']"));
        let ddl = hourly_table().hbase_shell_ddl();
        assert!(
            ddl.starts_with("create 'ts_metric_hourly', {NAME => 't'")
                && ddl.ends_with("SPLITS => ['dev06250_', 'dev12500_', 'dev18750_', 'dev25000_', 'dev31250_', 'dev37500_', 'dev43750_', 'dev50000_', 'dev56250_', 'dev62500_', 'dev68750_', 'dev75000_', 'dev81250_', 'dev87500_', 'dev93750_']"),
            "{ddl}"
        );
        let ddl = room_table_split(&IdSplits::none()).hbase_shell_ddl();
        assert!(!ddl.contains("SPLITS"), "{ddl}");
    }
}
