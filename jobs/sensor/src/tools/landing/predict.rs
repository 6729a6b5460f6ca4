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
use sinks::schema::salt_bucket_key;

use super::{region_buckets, report, Bucket, LandingReport, TableArg, Tally};
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
                let region = splits.partition_point(|s| s.as_slice() <= key.as_slice());
                tally.add(device, region, rows);
            }
            let text = |k: &[u8]| k.escape_ascii().to_string();
            let buckets = (0..n as usize)
                .map(|r| Bucket {
                    label: format!("r{r:02}"),
                    start: r.checked_sub(1).map_or(String::new(), |p| text(&splits[p])),
                    end: splits.get(r).map_or(String::new(), |s| text(s)),
                    rows: 0,
                })
                .collect();
            let note = format!(
                "plain: {n} regions split uniformly over the key range of the recording's device ids \
                 (a pre-split from the first and last id); a device's rows land in the region of `<device>_`"
            );
            (buckets, note)
        }
    };
    let mut buckets: Vec<Bucket> = buckets;
    for per in tally.devices.values() {
        for (&b, &rows) in per {
            buckets[b].rows += rows;
        }
    }
    report(
        source,
        (TableArg::Narrow, scheme),
        buckets,
        tally,
        max_skew,
        note,
    )
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
    let mut tally = Tally {
        rejected: fleet.rejected.clone(),
        ..Tally::default()
    };
    let region = |key: &[u8]| keys.partition_point(|s| s.as_slice() <= key);
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
    report(
        format!("file {}", file.display()),
        (table, KeyScheme::Salted),
        buckets,
        tally,
        max_skew,
        note,
    )
}

/// `n − 1` split keys dividing `[lo, hi]` into equal ranges of the 8 bytes after their common
/// prefix, read as a big-endian number (HBase's `UniformSplit`, over the range in use).
fn uniform_splits(lo: &[u8], hi: &[u8], n: u32) -> Vec<Vec<u8>> {
    let common = lo.iter().zip(hi).take_while(|(a, b)| a == b).count();
    let word = |k: &[u8]| {
        let mut w = [0u8; 8];
        for (d, s) in w.iter_mut().zip(k.iter().skip(common)) {
            *d = *s;
        }
        u128::from(u64::from_be_bytes(w))
    };
    let (a, b) = (word(lo), word(hi));
    (1..u128::from(n))
        .map(|i| {
            let v = a + (b - a) * i / u128::from(n);
            let mut key = lo[..common].to_vec();
            let bytes = (v as u64).to_be_bytes();
            let len = bytes.iter().rposition(|&x| x != 0).map_or(0, |p| p + 1);
            key.extend_from_slice(&bytes[..len]);
            key
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_splits_are_ordered_and_inside_the_range() {
        let splits = uniform_splits(b"gw00-0000", b"gw15-0019", 16);
        assert_eq!(splits.len(), 15);
        assert!(splits.windows(2).all(|w| w[0] < w[1]), "{splits:?}");
        assert!(splits.iter().all(|s| s.as_slice() > &b"gw00-0000"[..]));
        assert!(splits.iter().all(|s| s.as_slice() <= &b"gw15-0019"[..]));
    }
}
