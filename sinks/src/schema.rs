//! Table specifications: the HBase schema of every hourglass table, as code.

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
    /// Region split keys (`n` keys make `n + 1` regions).
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
            let keys: Vec<String> = self
                .split_keys
                .iter()
                .map(|k| format!("'{}'", String::from_utf8_lossy(k)))
                .collect();
            let _ = write!(out, ", SPLITS => [{}]", keys.join(", "));
        }
        out
    }
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

/// Split keys that give each decimal salt bucket `00`..`15` its own region: `01`, `02`, … `15`.
///
/// The seed split on `03`, `06`, … `2d` (hex), which leaves 10 of 16 regions empty for the
/// decimal buckets the row key actually uses.
pub fn salt_split_keys(buckets: u32) -> Vec<Vec<u8>> {
    (1..buckets)
        .map(|b| format!("{b:02}").into_bytes())
        .collect()
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

/// `ts_metric_hourly`: one wide row per device and hour. Its keys start with the device id, so
/// HBase splits it by load; it is not pre-split.
pub fn hourly_table() -> TableSpec {
    TableSpec {
        name: HOURLY_TABLE,
        // A replay writes a wide row once, a live hour at every early firing: its new points and
        // the summary, which is kept apart so that each firing's replaces the last one's.
        families: vec![FamilySpec {
            packed: true,
            packed_apart: &HOURLY_SUMMARY_QUALIFIERS,
            ..data_family()
        }],
        split_keys: Vec::new(),
    }
}

/// `ts_room_latest`: row `<room>_<device>`, cell `t:v` = the device's latest value stamped with
/// its event time. Small (one row per device), read by prefix scans of a room; not pre-split.
pub fn room_table() -> TableSpec {
    TableSpec {
        name: ROOM_TABLE,
        families: vec![data_family()],
        split_keys: Vec::new(),
    }
}

/// Every table hourglass writes.
pub fn all_tables() -> Vec<TableSpec> {
    vec![narrow_table(), hourly_table(), room_table()]
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
    fn ddl_names_the_schema() {
        let ddl = narrow_table().hbase_shell_ddl();
        assert!(ddl.starts_with("create 'ts_metric', {NAME => 't', VERSIONS => 1, TTL => 7776000"));
        assert!(ddl.contains("COMPRESSION => 'SNAPPY'"));
        assert!(ddl.contains("BLOOMFILTER => 'ROW'"));
        assert!(ddl.ends_with("SPLITS => ['01', '02', '03', '04', '05', '06', '07', '08', '09', '10', '11', '12', '13', '14', '15']"));
    }
}
