//! Where a table's rows live, as a reader sees it: region boundaries read with Thrift1
//! `getTableRegions` and cached, so that the reads of each region are counted (the hot-region
//! signal of `/metrics`); and how a multi-get is cut into `getMultiple` calls.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use super::admin::region_descriptions;
use super::client::{Connection, Thrift1};
use super::config::HbaseConfig;
use crate::seam::RegionReads;

/// How long region boundaries are used before they are read again: splits and merges show
/// within a minute. A failed `getMultiple` reads them again at its next call.
pub const REGIONS_MAX_AGE: Duration = Duration::from_secs(60);

/// After a failed `getTableRegions`, how long a reader goes on without boundaries (every row in
/// one region, `unknown`) before it asks again.
const REGIONS_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Regions of a table whose reads a reader counts under their own name; the reads of any
/// further region (a table split far beyond its pre-split) count under `other`, so that the
/// series of `/metrics` stay bounded.
pub const MAX_COUNTED_REGIONS: usize = 64;

/// The regions of one table: start keys in order, the first one empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RegionMap {
    starts: Vec<Vec<u8>>,
    /// Encoded names (`unknown` for the one region of a table whose boundaries are not known).
    names: Vec<String>,
}

impl RegionMap {
    /// One region holding every row: boundaries not known.
    pub(crate) fn unknown() -> Self {
        RegionMap {
            starts: vec![Vec::new()],
            names: vec!["unknown".into()],
        }
    }

    /// Regions starting at `starts` (in any order), named `names`; the empty start is added if
    /// missing (named `unknown`), so that every key falls in a region.
    pub(crate) fn new(regions: impl IntoIterator<Item = (Vec<u8>, String)>) -> Self {
        let mut regions: Vec<(Vec<u8>, String)> = regions.into_iter().collect();
        regions.sort();
        regions.dedup_by(|a, b| a.0 == b.0);
        if regions.first().is_none_or(|(start, _)| !start.is_empty()) {
            regions.insert(0, (Vec::new(), "unknown".into()));
        }
        let (starts, names) = regions.into_iter().unzip();
        RegionMap { starts, names }
    }

    /// Regions in the map.
    pub(crate) fn len(&self) -> usize {
        self.starts.len()
    }

    /// The region holding `key`.
    pub(crate) fn region_of(&self, key: &[u8]) -> usize {
        self.starts
            .partition_point(|s| s.as_slice() <= key)
            .saturating_sub(1)
    }

    /// `(encoded name, start key as text)` of region `i`.
    fn label(&self, i: usize) -> (String, String) {
        (self.names[i].clone(), key_text(&self.starts[i]))
    }
}

/// The encoded name of a region from its full name `table,start,id.ENCODED.` (the full name if
/// it has no encoded part).
fn encoded_name(full: &str) -> String {
    full.strip_suffix('.')
        .and_then(|n| n.rsplit_once('.'))
        .map_or(full, |(_, encoded)| encoded)
        .to_string()
}

/// `key` as label text: printable ASCII as it is, other bytes (and `\`) as `\xNN`.
pub(crate) fn key_text(key: &[u8]) -> String {
    let mut out = String::with_capacity(key.len());
    for &b in key {
        if (b.is_ascii_graphic() || b == b' ') && b != b'\\' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// Rows a `getMultiple` call holds at least before a multi-get is cut into more calls than its
/// table's rows per call require: below it a call's fixed cost (a gateway request, a region
/// server request) outweighs the parallel work it saves.
pub(crate) const MIN_ROWS_PER_PARALLEL_CALL: usize = 32;

/// The calls of a multi-get of `keys`: each the indexes (into `keys`) of a run of keys in key
/// order, as few calls as `per_call` rows allow, but up to `parallel` calls of at least
/// [`MIN_ROWS_PER_PARALLEL_CALL`] rows so that the calls run side by side, runs of equal
/// length. Every index is in exactly one call.
///
/// Calls are not cut at region boundaries: the gateway's HBase client sends a call's gets
/// grouped by region server, one request each, in parallel. A call per region made a batch of
/// 200 rows over 16 regions 16 round trips of 12 rows, each paying a gateway and a region
/// server request: twice the time of 4 calls of 50 (docs/BENCHMARKS.md, batchGet).
pub(crate) fn plan_calls(keys: &[Vec<u8>], per_call: usize, parallel: usize) -> Vec<Vec<usize>> {
    if keys.is_empty() {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
    let needed = keys.len().div_ceil(per_call.max(1));
    let side_by_side = parallel
        .max(1)
        .min(keys.len().div_ceil(MIN_ROWS_PER_PARALLEL_CALL));
    let calls = needed.max(side_by_side);
    // `calls` runs whose lengths differ by at most one.
    let (base, longer) = (keys.len() / calls, keys.len() % calls);
    let mut out = Vec::with_capacity(calls);
    let mut start = 0;
    for i in 0..calls {
        let len = base + usize::from(i < longer);
        out.push(order[start..start + len].to_vec());
        start += len;
    }
    out
}

/// A table's boundaries as last read, and when.
#[derive(Debug)]
struct Cached {
    map: Arc<RegionMap>,
    read_at: Instant,
    /// Whether the read worked (else `map` is the last good one, or [`RegionMap::unknown`]).
    ok: bool,
    /// Set by a failed call: read again before the next call.
    stale: bool,
}

impl Cached {
    fn fresh(&self) -> bool {
        let max_age = if self.ok {
            REGIONS_MAX_AGE
        } else {
            REGIONS_RETRY_AFTER
        };
        !self.stale && self.read_at.elapsed() < max_age
    }
}

/// Rows read per region of one table, keyed by `(encoded name, start)`.
type Counts = BTreeMap<(String, String), u64>;

/// A reader's region boundaries per table (read through one Thrift1 connection, once per
/// [`REGIONS_MAX_AGE`]) and its reads per region.
pub(crate) struct Regions {
    cfg: HbaseConfig,
    /// Held while reading boundaries: one read at a time, the others use what is cached.
    t1: Mutex<Connection<Thrift1>>,
    cached: Mutex<HashMap<String, Cached>>,
    reads: Mutex<HashMap<String, Counts>>,
}

impl std::fmt::Debug for Regions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Regions")
            .field("thrift1", &self.cfg.thrift1)
            .finish_non_exhaustive()
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update is one statement: a panic cannot leave the maps torn.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Regions {
    pub(crate) fn new(cfg: &HbaseConfig) -> Self {
        Regions {
            t1: Mutex::new(Connection::new(&cfg.thrift1, cfg)),
            cfg: cfg.clone(),
            cached: Mutex::new(HashMap::new()),
            reads: Mutex::new(HashMap::new()),
        }
    }

    /// `table`'s regions: cached ones if fresh; else read now (one attempt, no retry: a read
    /// that fails leaves the rows in one `unknown` region for [`REGIONS_RETRY_AFTER`]). While
    /// another caller reads them, the cached ones, even stale, are used. Returns whether it
    /// read them (for the reader's counters).
    pub(crate) fn map(&self, table: &str) -> (Arc<RegionMap>, bool) {
        let cached = |this: &Self| {
            locked(&this.cached)
                .get(table)
                .map(|c| (c.map.clone(), c.fresh()))
        };
        let known = match cached(self) {
            Some((map, true)) => return (map, false),
            other => other.map(|(map, _)| map),
        };
        let mut t1 = match (self.t1.try_lock(), &known) {
            (Ok(t1), _) => t1,
            (Err(TryLockError::Poisoned(p)), _) => p.into_inner(),
            (Err(TryLockError::WouldBlock), Some(map)) => return (map.clone(), false),
            (Err(TryLockError::WouldBlock), None) => locked(&self.t1),
        };
        // Another caller may have read them while this one waited.
        if let Some((map, true)) = cached(self) {
            return (map, false);
        }
        let answer = t1.call("getTableRegions", table, |c| {
            use hbase_thrift::hbase::THbaseSyncClient;
            c.get_table_regions(table.as_bytes().to_vec())
        });
        drop(t1);
        let (map, ok) = match answer {
            Ok(regions) if !regions.is_empty() => {
                let regions = region_descriptions(regions);
                let map = RegionMap::new(
                    regions
                        .into_iter()
                        .map(|r| (r.start, encoded_name(&r.name))),
                );
                (Arc::new(map), true)
            }
            Ok(_) => (Arc::new(RegionMap::unknown()), false),
            Err(e) => {
                tracing::warn!(%table, error = %e, "reading HBase region boundaries failed; multi-gets go on without grouping rows by region");
                (
                    known.unwrap_or_else(|| Arc::new(RegionMap::unknown())),
                    false,
                )
            }
        };
        locked(&self.cached).insert(
            table.to_string(),
            Cached {
                map: map.clone(),
                read_at: Instant::now(),
                ok,
                stale: false,
            },
        );
        (map, true)
    }

    /// Makes the next call on `table` read its boundaries again (after a failed call: a region
    /// may have moved or split).
    pub(crate) fn invalidate(&self, table: &str) {
        if let Some(c) = locked(&self.cached).get_mut(table) {
            c.stale = true;
        }
    }

    /// Counts `rows[r]` rows read from region `r` of `map`, for each `r`.
    pub(crate) fn count(&self, table: &str, map: &RegionMap, rows: &[u64]) {
        let mut reads = locked(&self.reads);
        let counts = match reads.get_mut(table) {
            Some(counts) => counts,
            None => reads.entry(table.to_string()).or_default(),
        };
        for (i, &n) in rows.iter().enumerate().filter(|(_, &n)| n > 0) {
            let label = map.label(i);
            let key = if counts.contains_key(&label) || counts.len() < MAX_COUNTED_REGIONS {
                label
            } else {
                ("other".to_string(), String::new())
            };
            *counts.entry(key).or_default() += n;
        }
    }

    /// Counts one row, of `key`, read from `table`.
    pub(crate) fn count_key(&self, table: &str, map: &RegionMap, key: &[u8]) {
        let mut rows = vec![0; map.len()];
        rows[map.region_of(key)] = 1;
        self.count(table, map, &rows);
    }

    /// Rows read so far, by table and region.
    pub(crate) fn reads(&self) -> Vec<RegionReads> {
        let reads = locked(&self.reads);
        let mut out = Vec::new();
        for (table, counts) in reads.iter() {
            for ((region, start), &rows) in counts {
                out.push(RegionReads {
                    table: table.clone(),
                    region: region.clone(),
                    start: start.clone(),
                    rows,
                });
            }
        }
        out.sort_by(|a, b| (&a.table, &a.start, &a.region).cmp(&(&b.table, &b.start, &b.region)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(starts: &[&str]) -> RegionMap {
        RegionMap::new(
            starts
                .iter()
                .enumerate()
                .map(|(i, s)| (s.as_bytes().to_vec(), format!("r{i}"))),
        )
    }

    #[test]
    fn a_key_falls_in_the_last_region_starting_at_or_below_it() {
        let m = map(&["", "b", "d"]);
        assert_eq!(m.len(), 3);
        for (key, region) in [
            ("", 0),
            ("a", 0),
            ("b", 1),
            ("c\u{ff}", 1),
            ("d", 2),
            ("z", 2),
        ] {
            assert_eq!(m.region_of(key.as_bytes()), region, "{key}");
        }
        // Boundaries without the empty start still hold every key.
        let m = map(&["m"]);
        assert_eq!((m.len(), m.region_of(b"a"), m.region_of(b"m")), (2, 0, 1));
        assert_eq!(m.label(0).0, "unknown");
    }

    /// The calls' keys, as text.
    fn named(keys: &[Vec<u8>], calls: &[Vec<usize>]) -> Vec<Vec<String>> {
        calls
            .iter()
            .map(|c| {
                c.iter()
                    .map(|&i| String::from_utf8(keys[i].clone()).unwrap())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn calls_are_runs_of_keys_in_order_cut_evenly() {
        let keys: Vec<Vec<u8>> = ["d1", "a1", "b1", "a2", "a3", "z", "b2"]
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect();
        // Few rows: one call whatever the parallelism.
        assert_eq!(
            named(&keys, &plan_calls(&keys, 128, 4)),
            vec![vec!["a1", "a2", "a3", "b1", "b2", "d1", "z"]]
        );
        // At most `per_call` rows a call, runs of equal length (± 1), regions ignored.
        let calls = plan_calls(&keys, 2, 4);
        assert_eq!(
            named(&keys, &calls),
            vec![
                vec!["a1", "a2"],
                vec!["a3", "b1"],
                vec!["b2", "d1"],
                vec!["z"]
            ]
        );
        let mut all: Vec<usize> = calls.concat();
        all.sort_unstable();
        assert_eq!(all, (0..keys.len()).collect::<Vec<_>>());
        assert!(plan_calls(&[], 4, 4).is_empty());
    }

    #[test]
    fn many_rows_are_cut_into_parallel_calls_of_at_least_the_minimum() {
        let keys =
            |n: usize| -> Vec<Vec<u8>> { (0..n).map(|i| format!("{i:05}").into_bytes()).collect() };
        let sizes = |n: usize, per_call: usize| -> Vec<usize> {
            plan_calls(&keys(n), per_call, 4)
                .iter()
                .map(Vec::len)
                .collect()
        };
        // 200 rows: 4 calls of 50, though one call could hold them.
        assert_eq!(sizes(200, 256), vec![50; 4]);
        // 70 rows: 3 calls (not 4 calls below the minimum).
        assert_eq!(sizes(70, 256), vec![24, 23, 23]);
        // 1,000 rows at 128 a call: 8 calls, more than the parallelism.
        assert_eq!(sizes(1000, 128), vec![125; 8]);
        // Every call is in key order and the calls follow each other.
        let ks = keys(1000);
        let flat: Vec<usize> = plan_calls(&ks, 128, 4).concat();
        assert_eq!(flat, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn names_and_keys_read_as_labels() {
        assert_eq!(
            encoded_name("user_profile_tag,3000,1733540000000.5f1e2d3c4b5a69788796a5b4c3d2e1f0."),
            "5f1e2d3c4b5a69788796a5b4c3d2e1f0"
        );
        assert_eq!(encoded_name("odd"), "odd");
        assert_eq!(key_text(b"30\x00a\\"), "30\\x00a\\x5c");
    }

    #[test]
    fn reads_past_the_cap_count_as_other() {
        let regions = Regions::new(&HbaseConfig::new("127.0.0.1:1"));
        let starts: Vec<String> = (0..MAX_COUNTED_REGIONS + 2)
            .map(|i| format!("{i:03}"))
            .collect();
        let m = map(&starts.iter().map(String::as_str).collect::<Vec<_>>());
        let mut rows = vec![1; m.len()];
        rows[1] = 0;
        regions.count("t", &m, &rows);
        regions.count("t", &m, &rows);
        let reads = regions.reads();
        assert_eq!(reads.len(), MAX_COUNTED_REGIONS + 1, "{reads:?}");
        let other = reads.iter().find(|r| r.region == "other").unwrap();
        // m.len() - 1 regions read (one had none), the first MAX_COUNTED_REGIONS named.
        assert_eq!(other.rows, 2 * (m.len() - 1 - MAX_COUNTED_REGIONS) as u64);
        assert!(reads
            .iter()
            .filter(|r| r.region != "other")
            .all(|r| r.rows == 2));
    }

    #[test]
    fn an_unreachable_gateway_leaves_one_unknown_region_for_a_while() {
        let mut cfg = HbaseConfig::new("127.0.0.1:1");
        cfg.connect_timeout = Duration::from_millis(200);
        let regions = Regions::new(&cfg);
        let (m, read) = regions.map("t");
        assert_eq!((m.len(), read), (1, true));
        let (_, again) = regions.map("t");
        assert!(!again, "not asked again within REGIONS_RETRY_AFTER");
        regions.invalidate("t");
        assert!(regions.map("t").1, "asked again after a failed call");
    }
}
