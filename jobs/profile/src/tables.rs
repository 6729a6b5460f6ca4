//! The profile domain's tables, as data: `user_profile_tag` (one wide row per user) and
//! `user_tag_history` (one row per change), with their families, versions, TTL, compression,
//! bloom filters and split keys.
//!
//! Storage (`sinks`) knows no domain: it is opened with these [`TableSpec`]s, as with the
//! sensor domain's (`jobs/sensor/src/tables.rs`). Row keys are built in [`crate::key`] only.
//!
//! The choices follow HBase practice for a profile store:
//! - **Few families, split by how the cells live**, not by topic: every family is a store of
//!   its own per region (its memstore, flushes, files), so one per lifecycle. Identity tags
//!   (`dimension`) change rarely and need one version; behaviour tags (`behavior`) are
//!   recomputed daily and keep their last [`BEHAVIOR_VERSIONS`] values for "what changed". A
//!   family per category or producer would multiply stores and flush small files.
//! - **Short-term tags are in no HBase family**: they live hours to days, each with its own
//!   `ttl_secs`, where a family has one TTL; they go to Redis (the hash `short-tags:{user}`),
//!   so that HBase does not write, compact and expire churn that nobody reads a day later.
//! - **Versions only where needed**: `VERSIONS => 1` on `dimension` and on the history, whose
//!   rows are one change each; 3 on `behavior` only.
//! - **Salted keys, pre-split over the salt** ([`crate::key`]): sequential and phone-number ids
//!   would all write to one region; an MD5 salt spreads them, and the tables start with
//!   [`REGIONS`] regions instead of one region server taking every write until the first split.
//! - **SNAPPY and a ROW bloom**, as the sensor tables: a profile read is a Get of one row, which
//!   a row bloom lets skip the store files that do not hold it; Snappy is cheap on the CPU and
//!   tag values are short, repetitive text.
//! - **Not packed** (`FamilySpec::packed`, the embedded store's layout of a put as one
//!   key-value): puts of a user carry different subsets of tags from flush to flush, each of
//!   which would stay a key-value of its own; `behavior` keeps versions, which packing refuses.
//!
//! The family names are the ones issue 36 gives (`dimension`, `behavior`), which the Java
//! peer writes too: longer than the one-letter names HBase advises (a family name is stored in
//! every cell), a cost that block compression mostly takes back.

use sinks::schema::{FamilySpec, TableSpec, DEFAULT_GET_ROWS_PER_CALL};

use crate::key::salt_split_keys;
use crate::tag::ValueType;

/// Name of the table of one wide row per user.
pub const PROFILE_TABLE: &str = "user_profile_tag";
/// Name of the table of one row per change of a tag's value.
pub const HISTORY_TABLE: &str = "user_tag_history";
/// `user_profile_tag`'s family of dimension (identity) tags, one version.
pub const DIMENSION_FAMILY: &str = "dimension";
/// `user_profile_tag`'s family of statistic (behaviour) tags, [`BEHAVIOR_VERSIONS`] versions.
pub const BEHAVIOR_FAMILY: &str = "behavior";
/// Versions kept of a behaviour tag: its last three values, stamped with their event times.
pub const BEHAVIOR_VERSIONS: u32 = 3;
/// `user_tag_history`'s one family.
pub const HISTORY_FAMILY: &str = "h";
/// The qualifier of a history row's one cell, the value the tag took.
pub const HISTORY_QUALIFIER: &[u8] = b"v";
/// How long a history row is kept by default: 180 days, counted from the change's event time.
pub const HISTORY_TTL_SECS: u64 = 180 * 24 * 3600;
/// Regions both tables are pre-split into: 16, on hex boundaries of the salt.
pub const REGIONS: u32 = 16;
/// Rows of `user_profile_tag` per multi-get call (`TableSpec::get_rows_per_call`): a
/// `profiles:batchGet` whose 200 users miss the cache is 4 calls of 50, side by side, and one
/// of 1,000 is 16 calls of 63, four at a time. Calls of 250 rows were slower for 1,000 misses
/// (a call's rows are one request each at the gateway and the region server, which overlap
/// less), and a call per region slower for 200 (16 round trips). A profile row is a few dozen
/// short cells, where the sensors' wide rows, 12 per call, hold up to 3,600; measured in
/// docs/BENCHMARKS.md (batchGet).
pub const PROFILE_GET_ROWS_PER_CALL: usize = 64;

/// The family a tag of this value type is stored in, in `user_profile_tag`; `None` for
/// short-term tags, which are not stored in HBase.
pub fn family_of(value_type: ValueType) -> Option<&'static str> {
    match value_type {
        ValueType::Dimension => Some(DIMENSION_FAMILY),
        ValueType::Statistic => Some(BEHAVIOR_FAMILY),
        ValueType::ShortTerm => None,
    }
}

/// A family keeping `max_versions` per cell for `ttl_secs`, Snappy blocks, a row bloom filter.
fn family(name: &'static str, max_versions: u32, ttl_secs: Option<u64>) -> FamilySpec {
    FamilySpec {
        max_versions,
        ..FamilySpec::new(name, ttl_secs)
    }
}

/// `user_profile_tag`: row `<salt><user>`, qualifier = tag code, value = the tag's value as text
/// (`crate::event::CellValue`), cell timestamp = the event time in ms, so that a late event
/// does not hide a newer value and `behavior` keeps the last changes in event-time order. No
/// TTL: a tag lives until overwritten or purged.
pub fn profile_table() -> TableSpec {
    TableSpec {
        name: PROFILE_TABLE,
        key: crate::key::PROFILE_KEY_CODEC,
        families: vec![
            family(DIMENSION_FAMILY, 1, None),
            family(BEHAVIOR_FAMILY, BEHAVIOR_VERSIONS, None),
        ],
        split_keys: salt_split_keys(REGIONS),
        get_rows_per_call: PROFILE_GET_ROWS_PER_CALL,
    }
}

/// `user_tag_history` with the default TTL, [`HISTORY_TTL_SECS`].
pub fn history_table() -> TableSpec {
    history_table_ttl(HISTORY_TTL_SECS)
}

/// `user_tag_history` keeping rows `ttl_secs`: row `<salt>_<user>_<code>_<i64::MAX - ts_ms>`
/// ([`crate::key::history_row`]), cell `h:v` = the value, stamped with the event time.
///
/// A row per change, not versions of a cell: `behavior` keeps three versions, while "what was
/// this tag at time T" needs every change for months, which as versions would make one cell's
/// versions grow without bound inside one row (rows never split). The timestamp is reversed so
/// that the newest change is the first row of a tag's prefix: the latest value, or the value
/// at T, is one short scan from `history_row(user, code, T)` with a limit of 1. The salt and
/// the user come first, so a user's history sits in one region, next to nobody else's.
pub fn history_table_ttl(ttl_secs: u64) -> TableSpec {
    TableSpec {
        name: HISTORY_TABLE,
        key: crate::key::HISTORY_KEY_CODEC,
        families: vec![family(HISTORY_FAMILY, 1, Some(ttl_secs))],
        split_keys: salt_split_keys(REGIONS),
        get_rows_per_call: DEFAULT_GET_ROWS_PER_CALL,
    }
}

/// Every table the profile job writes, with the default history TTL: the profile, its history
/// and the audience index (`crate::audience::index`, whose codec declares it).
pub fn tables() -> Vec<TableSpec> {
    vec![
        profile_table(),
        history_table(),
        crate::audience::index::index_table(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audience::INDEX_TABLE;
    use crate::key::{history_row, profile_row, salt, user_history_prefix};

    #[test]
    fn each_tables_key_codec_is_its_row_codec() {
        let (profile, history) = (profile_table(), history_table());
        for user in ["10086", "13800138000", "13800138001", "u-a", "anon:x"] {
            assert_eq!((profile.key.entity_prefix)(user), profile_row(user));
            assert_eq!((history.key.entity_prefix)(user), user_history_prefix(user));
            assert!(history_row(user, "dim_city", 1).starts_with(&user_history_prefix(user)));
            // 16 regions on the first hex digit of the salt.
            let first = salt(user)[0];
            let region = usize::from(first - if first <= b'9' { b'0' } else { b'a' - 10 });
            assert_eq!(profile.region_of(user), region, "{user}");
            assert_eq!(history.region_of(user), region, "{user}");
        }
    }

    #[test]
    fn ddl_names_the_schema() {
        let splits = "SPLITS => ['1000', '2000', '3000', '4000', '5000', '6000', '7000', \
                      '8000', '9000', 'a000', 'b000', 'c000', 'd000', 'e000', 'f000']";
        assert_eq!(
            profile_table().hbase_shell_ddl(),
            format!(
                "create 'user_profile_tag', \
                 {{NAME => 'dimension', VERSIONS => 1, TTL => FOREVER, COMPRESSION => 'SNAPPY', BLOOMFILTER => 'ROW'}}, \
                 {{NAME => 'behavior', VERSIONS => 3, TTL => FOREVER, COMPRESSION => 'SNAPPY', BLOOMFILTER => 'ROW'}}, \
                 {splits}"
            )
        );
        assert_eq!(
            history_table().hbase_shell_ddl(),
            format!(
                "create 'user_tag_history', \
                 {{NAME => 'h', VERSIONS => 1, TTL => 15552000, COMPRESSION => 'SNAPPY', BLOOMFILTER => 'ROW'}}, \
                 {splits}"
            )
        );
        assert_eq!(
            history_table_ttl(60)
                .family(HISTORY_FAMILY)
                .unwrap()
                .ttl_secs,
            Some(60)
        );
        let names: Vec<_> = tables().iter().map(|t| t.name).collect();
        assert_eq!(names, [PROFILE_TABLE, HISTORY_TABLE, INDEX_TABLE]);
        assert_eq!(
            crate::audience::index::index_table().hbase_shell_ddl(),
            format!(
                "create 'user_tag_index', \
                 {{NAME => 'i', VERSIONS => 1, TTL => FOREVER, COMPRESSION => 'SNAPPY', BLOOMFILTER => 'ROW'}}, \
                 SPLITS => [{}]",
                ('b'..='z').map(|c| format!("'{c}'")).collect::<Vec<_>>().join(", ")
            )
        );
    }

    #[test]
    fn every_value_type_but_short_term_has_a_family_of_the_table() {
        let spec = profile_table();
        for v in ValueType::ALL {
            match family_of(*v) {
                Some(f) => assert!(spec.family(f).is_some(), "{f}"),
                None => assert_eq!(*v, ValueType::ShortTerm),
            }
        }
        assert_eq!(
            spec.family(family_of(ValueType::Statistic).unwrap())
                .unwrap()
                .max_versions,
            BEHAVIOR_VERSIONS
        );
    }

    #[test]
    fn a_users_rows_fall_in_the_region_of_its_salt() {
        let keys = profile_table().split_keys;
        for user in ["10086", "13800138000", "u-1"] {
            let region = |row: &[u8]| keys.partition_point(|k| k.as_slice() <= row);
            let salt_region =
                usize::from_str_radix(std::str::from_utf8(&profile_row(user)[..1]).unwrap(), 16)
                    .unwrap();
            assert_eq!(region(&profile_row(user)), salt_region, "{user}");
            assert_eq!(region(&history_row(user, "dim_city", 0)), salt_region);
        }
    }
}
