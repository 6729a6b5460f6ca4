//! The sensor domain's tables, as data: names, the family with its TTL, versions, compression,
//! bloom filter and data block encoding, split keys, the hourly table's summary qualifiers and
//! packing.
//!
//! Storage (`sinks`) knows no domain: it is opened with these [`TableSpec`]s
//! (`sinks::open(&cfg, &all_tables(), &options)`). Adding a sensor table touches this file, and
//! its codec, and nothing in storage. The generic table model is `sinks::schema`'s.

use crate::codec::key::{id_prefix, salted_prefix, SALT_BUCKETS, SEPARATOR};
use crate::codec::{hourly, narrow};
use sinks::schema::{
    pattern_split_keys, quantile_split_keys, salt_split_keys, DataBlockEncoding, FamilySpec,
    KeyCodec, SeriesLayout, SeriesPoints, TableSpec, DEFAULT_GET_ROWS_PER_CALL,
};

/// Name of the main table of narrow rows.
pub const NARROW_TABLE: &str = "ts_metric";
/// Name of the table of hourly wide rows.
pub const HOURLY_TABLE: &str = "ts_metric_hourly";
/// Name of the room view: every device's latest reading under its room.
pub const ROOM_TABLE: &str = "ts_room_latest";
/// The single column family of every sensor table.
pub const FAMILY: &str = "t";
/// `ts_metric`'s keys (`codec::narrow`, salted scheme): a device's rows start with its bucket.
/// Its rows are series points ([`NARROW_SERIES`]) in an embedded store created with
/// `[store] series_layout = true`.
pub const NARROW_KEY: KeyCodec =
    KeyCodec::new("<bucket:2>_<device>_<Long.MAX - ts:19>", salted_prefix)
        .with_series(NARROW_SERIES);
/// `ts_metric`'s rows as series points (issue 38): series = device, time = the key's epoch
/// second, value = `t:v` (as `format_value` writes it), extra = `t:x`, stamped `ts * 1000`.
pub const NARROW_SERIES: SeriesLayout = SeriesLayout {
    name: "narrow-salted-v1",
    split: narrow::split_salted,
    join: narrow::join_salted,
    series_in: narrow::salted_device_in,
    stamp: |ts| ts.checked_mul(1000),
    family: FAMILY,
    points: SeriesPoints::Row {
        value: narrow::VALUE_QUALIFIER,
        extra: narrow::EXTRA_QUALIFIER,
    },
    parse: parse_series_value,
    render: render_series_value,
};

/// `ts_metric_hourly`'s point cells as series points (issue 38): series = device, time = the
/// row's hour start + the cell's offset (`t:<offset>`, epoch seconds), value = the cell (as
/// `format_value` writes it), no extra, every cell stamped with the hour's last millisecond.
/// The summary cells and `t:dirty` stay generic cells of the row.
pub const HOURLY_SERIES: SeriesLayout = SeriesLayout {
    name: "hourly-wide-v1",
    split: hourly::split_wide,
    join: hourly::join_wide,
    series_in: hourly::wide_device_in,
    stamp: hourly::wide_stamp,
    family: FAMILY,
    points: SeriesPoints::Cells {
        time: hourly::point_time,
        row_time: hourly::point_hour,
        qualifier: hourly::point_qualifier,
    },
    parse: parse_series_value,
    render: render_series_value,
};

/// A `t:v` cell's double, if its bytes parse as one.
fn parse_series_value(bytes: &[u8]) -> Option<f64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// A `t:v` cell's bytes, as `codec::narrow` writes them.
fn render_series_value(value: f64, out: &mut Vec<u8>) {
    out.extend_from_slice(crate::reading::format_value(value).as_bytes());
}
/// `ts_metric_hourly`'s keys (`codec::hourly`): a device's rows start with its id. Its point
/// cells are series points ([`HOURLY_SERIES`]) in an embedded store created with
/// `[store] series_layout = true`.
pub const HOURLY_KEY: KeyCodec =
    KeyCodec::new("<device>_<hour start>", id_prefix).with_series(HOURLY_SERIES);
/// `ts_room_latest`'s keys (`codec::room`): a room's rows start with its id.
pub const ROOM_KEY: KeyCodec = KeyCodec::new("<room>_<device>", id_prefix);
/// Retention of readings: 90 days, in seconds.
pub const RETENTION_SECS: u64 = 90 * 24 * 3600;
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

/// The split keys of the tables whose row keys start with an id: `ts_metric_hourly`
/// (`<device>_<hour>`) and `ts_room_latest` (`<room>_<device>`).
///
/// A split key is an id followed by the key separator `_` (the row-key prefix of the id's rows),
/// so that a device's wide rows, and a room's rows, never straddle two regions: ids contain no
/// `_` (see [`quantile_split_keys`]). HBase leaves a table it was not told how to split in one
/// region until that region grows to its split size: every dashboard read and every write of
/// the table meanwhile go to one region server.
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
            devices: pattern_split_keys(DEFAULT_DEVICE_PATTERN, regions, SEPARATOR),
            rooms: pattern_split_keys(DEFAULT_ROOM_PATTERN, regions, SEPARATOR),
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
            devices: quantile_split_keys(devices, regions, SEPARATOR),
            rooms: quantile_split_keys(rooms, regions, SEPARATOR),
        }
    }
}

impl Default for IdSplits {
    /// [`IdSplits::generator_default`] over [`DEFAULT_ID_REGIONS`].
    fn default() -> Self {
        IdSplits::generator_default(DEFAULT_ID_REGIONS)
    }
}

/// `t`: cells kept [`RETENTION_SECS`], one version, a row bloom filter, Snappy blocks of
/// HBase's default 64 KiB whose keys are `FAST_DIFF`-encoded. A device's rows share all but the
/// last bytes of their keys (bucket, device, most of the reversed time), which FAST_DIFF stores
/// once per block: after a flush and a major compaction HBase kept 30.5 bytes a reading in
/// `ts_metric` instead of 42.8 (all three tables 35.5 instead of 50.3), with no write or read
/// cost that the interleaved runs could tell from noise (docs/BENCHMARKS.md, "HBase block
/// layout"). The embedded store ignores the encoding.
fn data_family() -> FamilySpec {
    FamilySpec {
        data_block_encoding: DataBlockEncoding::FastDiff,
        ..FamilySpec::new(FAMILY, Some(RETENTION_SECS))
    }
}

/// `ts_metric`: one narrow row per reading, salted and time-reversed, pre-split per salt bucket.
pub fn narrow_table() -> TableSpec {
    TableSpec {
        name: NARROW_TABLE,
        key: NARROW_KEY,
        // One put per row: a reading's `t:v` and `t:x` go in one key-value.
        families: vec![FamilySpec {
            packed: true,
            ..data_family()
        }],
        split_keys: salt_split_keys(SALT_BUCKETS),
        get_rows_per_call: DEFAULT_GET_ROWS_PER_CALL,
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
        key: HOURLY_KEY,
        // A replay writes a wide row once, a live hour at every early firing: its new points and
        // the summary, which is kept apart so that each firing's replaces the last one's.
        families: vec![FamilySpec {
            packed: true,
            packed_apart: &HOURLY_SUMMARY_QUALIFIERS,
            ..data_family()
        }],
        split_keys: splits.devices.clone(),
        // Wide rows of up to 3,600 cells: half a day per call.
        get_rows_per_call: DEFAULT_GET_ROWS_PER_CALL,
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
        key: ROOM_KEY,
        families: vec![data_family()],
        split_keys: splits.rooms.clone(),
        get_rows_per_call: DEFAULT_GET_ROWS_PER_CALL,
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
    use crate::codec::hourly::{wide_key, wide_prefix};
    use crate::codec::key::salt_bucket;
    use crate::codec::narrow::{narrow_key, narrow_prefix, KeyScheme};
    use crate::codec::room::{room_key, room_prefix};

    #[test]
    fn each_tables_key_codec_is_its_row_codecs() {
        let splits = IdSplits::generator_default(16);
        let [narrow, hourly, room] =
            <[TableSpec; 3]>::try_from(all_tables_split(&splits)).expect("three sensor tables");
        for device in [
            "dev00000", "dev06249", "dev06250", "dev99999", "sensor-7", "a",
        ] {
            let prefix = (narrow.key.entity_prefix)(device);
            assert_eq!(prefix, narrow_prefix(KeyScheme::Salted, device));
            assert!(narrow_key(KeyScheme::Salted, device, 1_796_400_000).starts_with(&prefix));
            // A device's narrow rows are in its salt bucket's region.
            assert_eq!(narrow.region_of(device), salt_bucket(device) as usize);

            assert_eq!((hourly.key.entity_prefix)(device), wide_prefix(device));
            assert!(wide_key(device, 1_796_400_000).starts_with(&wide_prefix(device)));
        }
        assert_eq!(hourly.region_of("dev00000"), 0);
        assert_eq!(hourly.region_of("dev06249"), 0);
        assert_eq!(hourly.region_of("dev06250"), 1);
        assert_eq!(hourly.region_of("dev99999"), 15);
        assert_eq!((room.key.entity_prefix)("room125"), room_prefix("room125"));
        assert!(room_key("room125", "dev1").starts_with(&room_prefix("room125")));
        assert_eq!(room.region_of("room124"), 1);
        assert_eq!(room.region_of("room125"), 2);
    }

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
    fn ddl_names_the_schema() {
        let ddl = narrow_table().hbase_shell_ddl();
        assert!(ddl.starts_with("create 'ts_metric', {NAME => 't', VERSIONS => 1, TTL => 7776000"));
        assert!(ddl.contains("COMPRESSION => 'SNAPPY'"));
        assert!(ddl.contains("BLOOMFILTER => 'ROW', DATA_BLOCK_ENCODING => 'FAST_DIFF'}"));
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
