//! The spread of a live HBase table: its regions from `getTableRegions`, the rows of each
//! counted by a scan of the region's key range.

use std::time::Duration;

use crate::codec::hourly::parse_wide_key;
use crate::codec::narrow::{parse_narrow_key, KeyScheme};
use crate::codec::room::parse_room_key;
use crate::config::JobConfig;
use crate::Result;
use pipeline::Context;
use sinks::hbase::{admin, HbaseConfig, HbaseStore};
use sinks::table::ScanSpec;

use super::{report, Bucket, LandingReport, TableArg, Tally};

/// The device of a row key of `table`, for the hottest prefixes.
fn device_of(table: TableArg, scheme: KeyScheme, key: &[u8]) -> Option<String> {
    match table {
        TableArg::Narrow => parse_narrow_key(scheme, key).ok().map(|k| k.device),
        TableArg::Hourly => parse_wide_key(key).map(|(device, _)| device.to_string()),
        TableArg::Room => {
            let text = std::str::from_utf8(key).ok()?;
            parse_room_key(text).map(|(_, device)| device.to_string())
        }
    }
}

/// How long the check retries an unreachable HBase, as the other interactive commands.
const RETRY: Duration = Duration::from_secs(60);

/// Counts `table`'s rows per region at `addr`; `scheme` tells how to read the device from a
/// narrow key, for the hottest prefixes.
///
/// Every row of a region is scanned: the Thrift reader of `sinks` has no key-only filter, so
/// cells come too (a narrow row is two small cells, a wide row an hour's); one row at a time
/// is held.
pub(super) fn from_hbase(
    cfg: &JobConfig,
    addr: &str,
    table: TableArg,
    scheme: KeyScheme,
    max_skew: f64,
) -> Result<LandingReport> {
    let name = table.name();
    let mut store = cfg.store.clone();
    store.hbase = Some(addr.to_string());
    let mut hb = HbaseConfig::from_store(&store)?;
    hb.retry.max_elapsed = Some(RETRY);
    let regions = admin::table_regions(&hb, name)
        .with_context(|| format!("listing the regions of {name} at {addr}"))?;
    let reader = HbaseStore::new(&hb);
    let mut tally = Tally::default();
    let mut buckets = Vec::with_capacity(regions.len());
    for (i, region) in regions.iter().enumerate() {
        let spec = ScanSpec {
            start: region.start.clone(),
            stop: region.end.clone(),
            limit: None,
            columns: Vec::new(),
            time_range: None,
            ..ScanSpec::default()
        };
        let rows = reader
            .scan_each(name, &spec, |row| {
                match device_of(table, scheme, &row.key) {
                    Some(device) => tally.add(&device, i, 1),
                    None => tally.reject("key"),
                }
            })
            .with_context(|| format!("counting the rows of region {}", region.name))?;
        let text = |k: &[u8]| k.escape_ascii().to_string();
        buckets.push(Bucket {
            label: text(&region.start),
            start: text(&region.start),
            end: text(&region.end),
            rows: rows as u64,
        });
    }
    if let Some(first) = buckets.first_mut() {
        if first.label.is_empty() {
            first.label = "(start)".into();
        }
    }
    let unparsed = tally.rejected.get("key").copied().unwrap_or(0);
    let shape = super::layout(table, scheme);
    let note = format!(
        "hbase: {} regions of {name} from getTableRegions, every row counted by a scan of each \
         region's range; {unparsed} keys not of the {shape} shape are counted in their region but \
         in no prefix",
        regions.len()
    );
    report(
        format!("hbase {addr} table {name}"),
        (table, scheme),
        buckets,
        tally,
        max_skew,
        note,
    )
}
