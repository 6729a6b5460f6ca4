//! The spread of a live HBase table (`sinks::landing::count_regions`), its keys read as the
//! sensor tables' for the hottest device prefixes.

use std::time::Duration;

use crate::codec::hourly::parse_wide_key;
use crate::codec::narrow::{parse_narrow_key, KeyScheme};
use crate::codec::room::parse_room_key;
use crate::config::JobConfig;
use crate::Result;
use pipeline::Context;
use sinks::hbase::HbaseConfig;
use sinks::landing::{count_regions, report, LandingReport};

use super::{layout, TableArg};

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
    let (buckets, tally) = count_regions(&hb, name, |key| device_of(table, scheme, key))
        .with_context(|| format!("counting the rows of {name} per region at {addr}"))?;
    let unparsed = tally.rejected.get("key").copied().unwrap_or(0);
    let layout = layout(table, scheme);
    let note = format!(
        "hbase: {} regions of {name} from getTableRegions, every row counted by a scan of each \
         region's range; {unparsed} keys not of the {} shape are counted in their region but \
         in no prefix",
        buckets.len(),
        layout.scheme
    );
    Ok(report(
        format!("hbase {addr} table {name}"),
        &layout,
        buckets,
        tally,
        max_skew,
        note,
    )?)
}
