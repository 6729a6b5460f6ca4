//! Tables shaped like a time-series domain's, for this crate's own tests: storage knows no
//! domain, and its unit tests cannot use one (the sensor tables are `sensor::tables`).
//!
//! A salted narrow table of packed readings, a wide table of packed hours with its summary kept
//! apart, and a small view, under the sensor tables' names, so that the tests exercise the
//! layouts the sensor job writes.

use crate::schema::{salt_split_keys, FamilySpec, TableSpec};

/// The narrow table.
pub(crate) const NARROW_TABLE: &str = "ts_metric";
/// The wide table, one row per id and hour.
pub(crate) const HOURLY_TABLE: &str = "ts_metric_hourly";
/// The view, one row per id.
pub(crate) const ROOM_TABLE: &str = "ts_room_latest";
/// The family of every table.
pub(crate) const FAMILY: &str = "t";
/// The family's TTL: 90 days.
pub(crate) const RETENTION_SECS: u64 = 90 * 24 * 3600;
/// The narrow table's salt buckets.
pub(crate) const SALT_BUCKETS: u32 = 16;

fn family() -> FamilySpec {
    FamilySpec::new(FAMILY, Some(RETENTION_SECS))
}

/// The narrow table: packed, split per salt bucket.
pub(crate) fn narrow_table() -> TableSpec {
    TableSpec {
        key: crate::schema::KeyCodec::raw(),
        name: NARROW_TABLE,
        families: vec![FamilySpec {
            packed: true,
            ..family()
        }],
        split_keys: salt_split_keys(SALT_BUCKETS),
        get_rows_per_call: crate::schema::DEFAULT_GET_ROWS_PER_CALL,
    }
}

/// The three tables.
pub(crate) fn all_tables() -> Vec<TableSpec> {
    vec![
        narrow_table(),
        TableSpec {
            key: crate::schema::KeyCodec::raw(),
            name: HOURLY_TABLE,
            families: vec![FamilySpec {
                packed: true,
                packed_apart: &["n", "min", "max", "sum", "first", "last"],
                ..family()
            }],
            split_keys: Vec::new(),
            get_rows_per_call: crate::schema::DEFAULT_GET_ROWS_PER_CALL,
        },
        TableSpec {
            key: crate::schema::KeyCodec::raw(),
            name: ROOM_TABLE,
            families: vec![family()],
            split_keys: Vec::new(),
            get_rows_per_call: crate::schema::DEFAULT_GET_ROWS_PER_CALL,
        },
    ]
}
