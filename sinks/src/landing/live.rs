//! The spread of a live HBase table: its regions from `getTableRegions`, the rows of each
//! counted by a scan of the region's key range.

use crate::hbase::{admin, HbaseConfig, HbaseStore};
use crate::table::ScanSpec;

use super::{text, Bucket, Tally};

/// Counts the rows of `table` per region through `hb`, each row's id read from its key by
/// `id_of` (for the hottest prefixes; a key it cannot read is counted in its region and, under
/// `key`, in the tally's rejected). Returns a bucket per region, labelled by its start key
/// (`(start)` for the first), and the tally.
///
/// Every row of a region is scanned: the Thrift reader has no key-only filter, so cells come
/// too; one row at a time is held.
///
/// # Errors
/// An unreachable gateway, a table that does not exist, or HBase's refusal.
pub fn count_regions(
    hb: &HbaseConfig,
    table: &str,
    mut id_of: impl FnMut(&[u8]) -> Option<String>,
) -> crate::Result<(Vec<Bucket>, Tally)> {
    let regions = admin::table_regions(hb, table)?;
    let reader = HbaseStore::new(hb);
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
        let rows = reader.scan_each(table, &spec, |row| match id_of(&row.key) {
            Some(id) => tally.add(&id, i, 1),
            None => tally.reject("key"),
        })?;
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
    Ok((buckets, tally))
}
