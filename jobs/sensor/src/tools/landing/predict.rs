//! The spread predicted from a recording: each reading is one narrow row, placed by its key.

use std::path::Path;

use crate::codec::hourly::wide_key;
use crate::codec::key::salt_bucket_of;
use crate::codec::narrow::{narrow_prefix, KeyScheme};
use crate::codec::room::room_key;
use crate::decode::decode_line;
use crate::Result;
use pipeline::source::replay::input::{self, LineReader};
use pipeline::Context;
use sinks::landing::{
    numbered_region_buckets, region_buckets, region_of, report, uniform_splits, Bucket,
    LandingReport, Tally,
};
use sinks::schema::salt_bucket_key;

use super::{layout, TableArg};
use crate::tools::splits::{Fleet, Splits};

/// Reads `file` and predicts where its rows land under `scheme` over `n` buckets or regions.
///
/// A reading is counted once per line: a duplicate (same device and second) writes the same row
/// again, so a live table holds fewer rows than this by the recording's duplicates.
pub(super) fn from_file(
    file: &Path,
    metric: &str,
    scheme: KeyScheme,
    n: u32,
    max_skew: f64,
) -> Result<LandingReport> {
    let reader = input::open(file, None)?;
    let mut lines = LineReader::new(reader);
    let mut buf = Vec::new();
    let mut tally = Tally::default();
    let mut per_device: std::collections::HashMap<String, u64> = Default::default();
    while let Some(line) = lines.next_line(&mut buf).with_context(|| {
        format!(
            "reading {} at line {}",
            file.display(),
            lines.lines_read() + 1
        )
    })? {
        match decode_line(line.number, &line.bytes, metric) {
            Ok(r) => match per_device.get_mut(&r.device) {
                Some(rows) => *rows += 1,
                None => {
                    per_device.insert(r.device, 1);
                }
            },
            Err(rejected) => tally.reject(rejected.reason.kind()),
        }
    }
    let source = format!("file {}", file.display());
    let (buckets, note) = match scheme {
        KeyScheme::Salted => {
            for (device, &rows) in &per_device {
                tally.add(device, salt_bucket_of(device, n) as usize, rows);
            }
            let label = |b: u32| String::from_utf8_lossy(&salt_bucket_key(b)).into_owned();
            let buckets = (0..n)
                .map(|b| Bucket {
                    label: label(b),
                    start: if b == 0 { String::new() } else { label(b) },
                    end: if b + 1 == n {
                        String::new()
                    } else {
                        label(b + 1)
                    },
                    rows: 0,
                })
                .collect();
            let note = format!(
                "salted: bucket = |Java hashCode(device) % {n}|, one region per bucket as `tables create` splits"
            );
            (buckets, note)
        }
        KeyScheme::Plain => {
            let mut devices: Vec<&String> = per_device.keys().collect();
            devices.sort();
            let (lo, hi) = match (devices.first(), devices.last()) {
                (Some(lo), Some(hi)) => (lo.as_bytes(), hi.as_bytes()),
                _ => (&b""[..], &b""[..]),
            };
            let splits = uniform_splits(lo, hi, n);
            for (device, &rows) in &per_device {
                let key = narrow_prefix(KeyScheme::Plain, device);
                tally.add(device, region_of(&splits, &key), rows);
            }
            let buckets = numbered_region_buckets(&splits);
            let note = format!(
                "plain: {n} regions split uniformly over the key range of the recording's device ids \
                 (a pre-split from the first and last id); a device's rows land in the region of `<device>_`"
            );
            (buckets, note)
        }
    };
    let mut buckets: Vec<Bucket> = buckets;
    tally.fill(&mut buckets);
    Ok(report(
        source,
        &layout(TableArg::Narrow, scheme),
        buckets,
        tally,
        max_skew,
        note,
    )?)
}

/// Reads `file` and predicts the rows of `table` (`ts_metric_hourly`: one a device and hour;
/// `ts_room_latest`: one a device, under the room of its newest reading) per region of the
/// split `tables create` makes with the same split flags.
pub(super) fn id_table_from_file(
    file: &Path,
    metric: &str,
    table: TableArg,
    splits: &Splits,
    max_skew: f64,
) -> Result<LandingReport> {
    let fleet = Fleet::read(file, metric)?;
    ensure!(
        fleet.kind == "recording",
        "{} is a registry: a prediction needs a recording's readings (a registry may give \
         --split-from)",
        file.display()
    );
    let keys = match table {
        TableArg::Hourly => &splits.ids.devices,
        _ => &splits.ids.rooms,
    };
    let mut buckets = region_buckets(keys);
    let mut tally = Tally::default();
    tally.rejected = fleet.rejected.clone();
    let region = |key: &[u8]| region_of(keys, key);
    for (device, rows) in &fleet.devices {
        match table {
            TableArg::Hourly => {
                for &hour in &rows.hours {
                    let r = region(&wide_key(device, hour));
                    buckets[r].rows += 1;
                    tally.add(device, r, 1);
                }
            }
            _ => match &rows.room {
                Some((_, room)) => {
                    let r = region(&room_key(room, device));
                    buckets[r].rows += 1;
                    tally.add(device, r, 1);
                }
                None => tally.reject("no_room"),
            },
        }
    }
    let note = match table {
        TableArg::Hourly => format!(
            "wide: one row per device and hour, `<device>_<hour start>`, over {} regions; \
             split points: {}",
            buckets.len(),
            splits.origin
        ),
        _ => format!(
            "room: one row per device, `<room>_<device>` under the room of its newest reading \
             (a registry given to the job overrides it), over {} regions; split points: {}",
            buckets.len(),
            splits.origin
        ),
    };
    Ok(report(
        format!("file {}", file.display()),
        &layout(table, KeyScheme::Salted),
        buckets,
        tally,
        max_skew,
        note,
    )?)
}
