//! The read side, on the Thrift2 gateway: `get` for a row, `getMultiple` for many (runs of keys
//! of at most [`TableSpec::get_rows_per_call`] rows, `regions.rs`), and `getScannerResults`
//! (open, fetch, close in one call) for scans, with a scanner for long ones.
//!
//! Thrift1 took three to four round trips per scan (`scannerOpenWithScan`, `scannerGetList`
//! until an empty answer, `scannerClose`) and answered rows as maps keyed by `family:qualifier`
//! that had to be split and re-sorted; Thrift2 answers cells as a list in HBase's own order.

use std::collections::HashMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use super::client::{Connection, Thrift2};
use super::coalesce::Coalescer;
use super::config::HbaseConfig;
use super::regions::{plan_calls, Regions};
use super::retry::retrying;
use super::thrift2::{TColumn, TGet, TResult, TScan, TTHBaseServiceSyncClient, TTimeRange};
use super::Result;
use crate::schema::{TableSpec, DEFAULT_GET_ROWS_PER_CALL};
use crate::seam::RegionReads;
use crate::table::{Cell, Row, ScanSpec, TableReader, TimeRange};

/// `getMultiple` calls one multi-get makes at a time.
pub const PARALLEL_GETS: usize = 4;

/// One `getMultiple` call's rows, with the call's index in the multi-get's plan.
type Answer = (usize, Vec<Option<Row>>);

/// Counters of the gateway calls a reader made, so tests and benchmarks can see that a multi-get
/// went out as one call and not as one get per row (all atomic).
#[derive(Debug, Default)]
pub struct ReaderStats {
    /// Single-row gets that succeeded (`get`).
    pub get_row_calls: AtomicU64,
    /// Multi-row gets that succeeded (`getMultiple` of up to the table's
    /// [`TableSpec::get_rows_per_call`] rows of one region).
    pub get_rows_calls: AtomicU64,
    /// Scans made.
    pub scans: AtomicU64,
    /// Calls that fetched rows of a scan (`getScannerResults`, `getScannerRows`) and succeeded.
    pub scan_calls: AtomicU64,
    /// Reads of a table's region boundaries (Thrift1 `getTableRegions`), made or attempted.
    pub region_lookups: AtomicU64,
}

/// Reads hourglass tables from HBase through the Thrift2 gateway.
///
/// Rows come in key order with their cells ordered by family then qualifier, one version each
/// unless a read asks for more ([`ScanSpec::max_versions`], passed on as Thrift2's
/// `maxVersions`: newest first, at most the family's `VERSIONS`); HBase itself hides cells past
/// their TTL. A scan fetches
/// [`HbaseConfig::scan_caching`] rows per call (default 1000), so a scan of fewer rows is one
/// round trip, and after a retriable failure resumes after the last row received. Concurrent
/// callers (the HTTP server's requests, the room fan-out's 16 scans, a multi-get's parallel
/// calls) each get a connection of their own from a pool of at most
/// [`HbaseConfig::read_connections`], opened on first use and kept for the next caller.
///
/// Gets and multi-gets count the rows they ask for per region of their table
/// ([`crate::MetricsSource::region_reads`]), from region boundaries the reader reads through
/// the Thrift1 gateway and keeps for a minute
/// ([`REGIONS_MAX_AGE`](super::regions::REGIONS_MAX_AGE)); without them (the gateway
/// unreachable) it goes on, counting the rows under `unknown`.
pub struct HbaseStore {
    cfg: HbaseConfig,
    pool: Mutex<Pool>,
    /// Signalled when a connection goes back to the pool.
    returned: Condvar,
    stats: ReaderStats,
    /// Rows per `getMultiple` of each table the reader was made for.
    rows_per_call: HashMap<String, usize>,
    regions: Regions,
    /// One-version Gets of concurrent callers, sent together.
    coalescer: Coalescer,
}

/// The connections not in use, and how many exist in all.
#[derive(Default)]
struct Pool {
    idle: Vec<Connection<Thrift2>>,
    open: usize,
}

/// A connection taken from the pool; it goes back when dropped.
struct Lease<'a> {
    store: &'a HbaseStore,
    conn: Option<Connection<Thrift2>>,
}

impl Deref for Lease<'_> {
    type Target = Connection<Thrift2>;
    fn deref(&self) -> &Self::Target {
        self.conn
            .as_ref()
            .expect("a lease holds its connection until dropped")
    }
}

impl DerefMut for Lease<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.conn
            .as_mut()
            .expect("a lease holds its connection until dropped")
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // A connection broken by a failed call reconnects on its next call.
            self.store.pool().idle.push(conn);
            self.store.returned.notify_one();
        }
    }
}

impl fmt::Debug for HbaseStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HbaseStore")
            .field("thrift2", &self.cfg.thrift2)
            .finish_non_exhaustive()
    }
}

/// Converts a Thrift2 result; `None` if it has no cell (how the gateway answers a row that is
/// not there).
fn row_from_thrift(result: TResult) -> Option<Row> {
    let key = result.row?;
    if result.column_values.is_empty() {
        return None;
    }
    // Every cell of an hourglass row is in one family: convert its name once.
    let mut family = String::new();
    let mut family_bytes: Vec<u8> = Vec::new();
    let mut cells: Vec<Cell> = Vec::with_capacity(result.column_values.len());
    for cv in result.column_values {
        if cv.family != family_bytes {
            family = String::from_utf8_lossy(&cv.family).into_owned();
            family_bytes = cv.family;
        }
        cells.push(Cell {
            family: family.clone(),
            qualifier: cv.qualifier,
            ts_ms: cv.timestamp.unwrap_or_default(),
            value: cv.value,
        });
    }
    // HBase sends a row's cells sorted by family then qualifier bytes; sort anyway if a gateway
    // does not (a no-op pass over a sorted row).
    let order = |a: &Cell, b: &Cell| (&a.family, &a.qualifier).cmp(&(&b.family, &b.qualifier));
    if !cells.is_sorted_by(|a, b| order(a, b).is_le()) {
        cells.sort_by(order);
    }
    Some(Row { key, cells })
}

/// A get of the whole row `key`, up to `versions` versions of each column (HBase's default
/// when unset is one), of the cells stamped within `time` if given.
fn tget(key: &[u8], time: Option<TimeRange>, versions: u32) -> TGet {
    TGet {
        row: key.to_vec(),
        columns: None,
        timestamp: None,
        time_range: time.map(ttime_range),
        max_versions: thrift_versions(versions),
        cache_blocks: None,
    }
}

/// Thrift2's `maxVersions` for a read of `versions` versions: unset for one, HBase's default,
/// so that one-version reads send what they always sent.
fn thrift_versions(versions: u32) -> Option<i32> {
    (versions > 1).then(|| i32::try_from(versions).unwrap_or(i32::MAX))
}

/// HBase's `TimeRange` of `time`. It refuses negative stamps, so the minimum is clamped to 0;
/// callers answer the ranges that end at or below 0 themselves ([`empty_in_hbase`]).
fn ttime_range(time: TimeRange) -> TTimeRange {
    TTimeRange {
        min_stamp: time.min_ms.max(0),
        max_stamp: time.max_ms,
    }
}

/// Whether no cell HBase can store lies in `time`: HBase stores no negative timestamp.
fn empty_in_hbase(time: Option<TimeRange>) -> bool {
    time.is_some_and(|t| t.max_ms <= t.min_ms.max(0))
}

impl HbaseStore {
    /// A reader for the gateway of `cfg`; it connects on its first call. Multi-gets ask for
    /// [`DEFAULT_GET_ROWS_PER_CALL`] rows per call (see [`HbaseStore::for_tables`]).
    pub fn new(cfg: &HbaseConfig) -> Self {
        Self::for_tables(cfg, &[])
    }

    /// A reader whose multi-gets of a table of `tables` ask for its
    /// [`TableSpec::get_rows_per_call`] rows per call ([`DEFAULT_GET_ROWS_PER_CALL`] for other
    /// tables).
    pub fn for_tables(cfg: &HbaseConfig, tables: &[TableSpec]) -> Self {
        HbaseStore {
            pool: Mutex::new(Pool::default()),
            returned: Condvar::new(),
            cfg: cfg.clone(),
            stats: ReaderStats::default(),
            rows_per_call: tables
                .iter()
                .map(|t| (t.name.to_string(), t.get_rows_per_call.max(1)))
                .collect(),
            regions: Regions::new(cfg),
            coalescer: Coalescer::default(),
        }
    }

    /// Rows read so far per table and region.
    pub fn region_reads(&self) -> Vec<RegionReads> {
        self.regions.reads()
    }

    /// `table`'s regions, counting a read of them.
    fn region_map(&self, table: &str) -> std::sync::Arc<super::regions::RegionMap> {
        let (map, read) = self.regions.map(table);
        if read {
            self.stats.region_lookups.fetch_add(1, Ordering::Relaxed);
        }
        map
    }

    /// The calls this reader made so far.
    pub fn stats(&self) -> &ReaderStats {
        &self.stats
    }

    fn pool(&self) -> MutexGuard<'_, Pool> {
        // The pool's state is consistent between statements: a panic cannot leave it torn.
        self.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A free connection, a new one if fewer than `read_connections` exist, or else the next
    /// one returned.
    fn conn(&self) -> Lease<'_> {
        let mut pool = self.pool();
        loop {
            if let Some(conn) = pool.idle.pop() {
                return Lease {
                    store: self,
                    conn: Some(conn),
                };
            }
            if pool.open < self.cfg.read_connections.max(1) {
                pool.open += 1;
                let conn = Connection::new(&self.cfg.thrift2, &self.cfg);
                return Lease {
                    store: self,
                    conn: Some(conn),
                };
            }
            pool = self
                .returned
                .wait(pool)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The row with this key, or `None` if it has no visible cell; up to `versions` versions of
    /// each column, newest first. A one-version Get made while other threads' Gets are in
    /// flight goes out with theirs as one multi-get (`coalesce.rs`).
    ///
    /// # Errors
    /// [`super::Error::TableNotFound`], or a failure retrying did not cure.
    pub fn get_row(
        &self,
        table: &str,
        row: &[u8],
        time: Option<TimeRange>,
        versions: u32,
    ) -> Result<Option<Row>> {
        if versions == 1 && !empty_in_hbase(time) {
            return self.coalescer.get(self, table, row, time);
        }
        self.get_row_now(table, row, time, versions)
    }

    /// [`HbaseStore::get_row`] as one `get` call of its own.
    pub(crate) fn get_row_now(
        &self,
        table: &str,
        row: &[u8],
        time: Option<TimeRange>,
        versions: u32,
    ) -> Result<Option<Row>> {
        if empty_in_hbase(time) {
            return Ok(None);
        }
        self.regions.count_key(table, &self.region_map(table), row);
        let mut conn = self.conn();
        // `get`, not a `getMultiple` of one: the gateway sends one Get RPC instead of a batch.
        let result = retrying(&self.cfg.retry, &format!("get on {table}"), || {
            conn.call("get", table, |c| {
                c.get(table.as_bytes().to_vec(), tget(row, time, versions))
            })
        })
        .inspect_err(|_| self.regions.invalidate(table))?;
        self.stats.get_row_calls.fetch_add(1, Ordering::Relaxed);
        Ok(row_from_thrift(result).filter(|r| r.key == row))
    }

    /// The rows with these keys in the order asked (`None` where a row has no visible cell),
    /// fetched with `getMultiple`: the keys in key order are cut into runs of equal length, as
    /// few as the table's [`TableSpec::get_rows_per_call`] allows but up to [`PARALLEL_GETS`]
    /// when there are enough rows (`regions::plan_calls`), and up to [`PARALLEL_GETS`] calls
    /// run at a time, each on a connection of its own, a call starting as soon as one ends.
    /// The gateway sends each call's gets to their region servers, one request a server.
    /// Each key's region is counted (the hot-region signal).
    ///
    /// # Errors
    /// [`super::Error::TableNotFound`], or a failure retrying did not cure (the calls not yet
    /// started are not made).
    pub fn get_rows(
        &self,
        table: &str,
        keys: &[Vec<u8>],
        time: Option<TimeRange>,
    ) -> Result<Vec<Option<Row>>> {
        if empty_in_hbase(time) || keys.is_empty() {
            return Ok(vec![None; keys.len()]);
        }
        let per_call = self
            .rows_per_call
            .get(table)
            .copied()
            .unwrap_or(DEFAULT_GET_ROWS_PER_CALL);
        let map = self.region_map(table);
        let mut per_region = vec![0u64; map.len()];
        for key in keys {
            per_region[map.region_of(key)] += 1;
        }
        self.regions.count(table, &map, &per_region);
        let calls = plan_calls(keys, per_call, PARALLEL_GETS);

        let next = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        // Each worker takes the next call until none is left (or one failed).
        let work = || -> Result<Vec<Answer>> {
            let mut done = Vec::new();
            while !failed.load(Ordering::Relaxed) {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(call) = calls.get(i) else { break };
                let chunk: Vec<&[u8]> = call.iter().map(|&k| keys[k].as_slice()).collect();
                match self.get_chunk(table, &chunk, time) {
                    Ok(rows) => done.push((i, rows)),
                    Err(e) => {
                        failed.store(true, Ordering::Relaxed);
                        self.regions.invalidate(table);
                        return Err(e);
                    }
                }
            }
            Ok(done)
        };
        let workers = PARALLEL_GETS.min(calls.len()).max(1);
        let answers: Vec<Result<Vec<Answer>>> = if workers == 1 {
            vec![work()]
        } else {
            std::thread::scope(|s| {
                let others: Vec<_> = (1..workers).map(|_| s.spawn(work)).collect();
                let mut answers = vec![work()];
                answers.extend(others.into_iter().map(|h| match h.join() {
                    Ok(answer) => answer,
                    Err(panic) => std::panic::resume_unwind(panic),
                }));
                answers
            })
        };
        let mut rows: Vec<Option<Row>> = vec![None; keys.len()];
        for answer in answers {
            for (i, got) in answer? {
                for (&k, row) in calls[i].iter().zip(got) {
                    rows[k] = row;
                }
            }
        }
        Ok(rows)
    }

    /// One `getMultiple` call (retried) for the keys of `chunk`, their rows in that order.
    fn get_chunk(
        &self,
        table: &str,
        chunk: &[&[u8]],
        time: Option<TimeRange>,
    ) -> Result<Vec<Option<Row>>> {
        let mut conn = self.conn();
        let results = retrying(&self.cfg.retry, &format!("getMultiple on {table}"), || {
            conn.call("getMultiple", table, |c| {
                c.get_multiple(
                    table.as_bytes().to_vec(),
                    chunk.iter().map(|k| tget(k, time, 1)).collect(),
                )
            })
        })?;
        self.stats.get_rows_calls.fetch_add(1, Ordering::Relaxed);
        // One result per get, in the order asked; an empty one where the row is missing.
        if results.len() != chunk.len() {
            return Err(super::Error::Protocol {
                addr: self.cfg.thrift2.clone(),
                call: "getMultiple",
                message: format!(
                    "{} results for {} gets on {table}",
                    results.len(),
                    chunk.len()
                ),
            });
        }
        Ok(chunk
            .iter()
            .zip(results)
            .map(|(key, result)| row_from_thrift(result).filter(|row| row.key == *key))
            .collect())
    }

    /// Calls `each` on every row of `[spec.start, spec.stop)` in key order, at most `spec.limit`
    /// rows. Returns the number of rows passed to `each`.
    ///
    /// # Errors
    /// [`super::Error::TableNotFound`], or a failure retrying did not cure.
    pub fn scan_each(&self, table: &str, spec: &ScanSpec, each: impl FnMut(Row)) -> Result<usize> {
        self.scan_filtered(table, spec, None, each)
    }

    /// As [`HbaseStore::scan_each`], the scan filtered on the region servers by `filter`, a
    /// filter in HBase's filter language (`TScan.filterString`).
    fn scan_filtered(
        &self,
        table: &str,
        spec: &ScanSpec,
        filter: Option<&[u8]>,
        mut each: impl FnMut(Row),
    ) -> Result<usize> {
        if empty_in_hbase(spec.time_range) {
            return Ok(0);
        }
        let mut seen = 0usize;
        let mut start = spec.start.clone();
        let mut conn = self.conn();
        let what = format!("scan of {table}");
        self.stats.scans.fetch_add(1, Ordering::Relaxed);
        retrying(&self.cfg.retry, &what, || {
            let at = Resume {
                start: &mut start,
                seen: &mut seen,
            };
            self.scan_from(&mut conn, table, spec, filter, at, &mut each)
        })?;
        Ok(seen)
    }

    /// One attempt of a scan from `start`; on success or failure, `start` and `seen` tell where
    /// the next attempt resumes.
    ///
    /// The first [`HbaseConfig::scan_caching`] rows come in one `getScannerResults` call, which
    /// is the whole of most dashboard scans (a partial hour, a room). A scan with more rows
    /// goes on with a scanner (`openScanner`, `getScannerRows` until a short answer,
    /// `closeScanner`): one region scanner for the rest rather than one per call.
    fn scan_from(
        &self,
        conn: &mut Connection<Thrift2>,
        table: &str,
        spec: &ScanSpec,
        filter: Option<&[u8]>,
        at: Resume<'_>,
        each: &mut impl FnMut(Row),
    ) -> Result<()> {
        let Resume { start, seen } = at;
        let remaining = |seen: usize| spec.limit.map_or(usize::MAX, |l| l.saturating_sub(seen));
        let caching = self.cfg.scan_caching.clamp(1, i32::MAX as usize);
        let as_i32 = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
        // Every field explicitly: the gateway reads an unset field as "not asked".
        let tscan = |start: &[u8], rows: usize, limit: Option<usize>| TScan {
            start_row: Some(start.to_vec()),
            stop_row: (!spec.stop.is_empty()).then(|| spec.stop.clone()),
            columns: (!spec.columns.is_empty()).then(|| {
                spec.columns
                    .iter()
                    .map(|c| TColumn {
                        family: c.family.as_bytes().to_vec(),
                        qualifier: Some(c.qualifier.clone()),
                        timestamp: None,
                    })
                    .collect()
            }),
            caching: Some(as_i32(rows)),
            max_versions: thrift_versions(spec.max_versions),
            // `scan_each` has answered the ranges that end at or below 0.
            time_range: spec.time_range.map(ttime_range),
            filter_string: filter.map(<[u8]>::to_vec),
            reversed: None,
            cache_blocks: None,
            limit: limit.map(as_i32),
        };
        // Passes the rows on; whether the answer was full (`want` rows: there may be more).
        let mut take = |rows: Vec<TResult>, want: usize, start: &mut Vec<u8>, seen: &mut usize| {
            let full = rows.len() >= want;
            for row in rows.into_iter().filter_map(row_from_thrift) {
                // A later call or attempt starts strictly after this row.
                start.clear();
                start.extend_from_slice(&row.key);
                start.push(0);
                each(row);
                *seen += 1;
            }
            full
        };

        let want = caching.min(remaining(*seen));
        if want == 0 {
            return Ok(());
        }
        let scan = tscan(start, want, Some(want));
        let rows = conn.call("getScannerResults", table, |c| {
            c.get_scanner_results(table.as_bytes().to_vec(), scan, as_i32(want))
        })?;
        self.stats.scan_calls.fetch_add(1, Ordering::Relaxed);
        if !take(rows, want, start, seen) || remaining(*seen) == 0 {
            return Ok(());
        }

        let limit = spec.limit.map(|_| remaining(*seen));
        let scan = tscan(start, caching.min(remaining(*seen)), limit);
        let id = conn.call("openScanner", table, |c| {
            c.open_scanner(table.as_bytes().to_vec(), scan)
        })?;
        let result = (|| -> Result<()> {
            loop {
                let want = caching.min(remaining(*seen));
                if want == 0 {
                    return Ok(());
                }
                let rows = conn.call("getScannerRows", table, |c| {
                    c.get_scanner_rows(id, as_i32(want))
                })?;
                self.stats.scan_calls.fetch_add(1, Ordering::Relaxed);
                if !take(rows, want, start, seen) {
                    return Ok(());
                }
            }
        })();
        // The gateway keeps a scanner until closed; a failed close only leaks it until the
        // gateway's scanner lease expires.
        if let Err(e) = conn.call("closeScanner", table, |c| c.close_scanner(id)) {
            tracing::debug!("closing HBase scanner {id} on {table}: {e}");
        }
        result
    }

    /// The rows of `[spec.start, spec.stop)` in key order, at most `spec.limit`.
    ///
    /// # Errors
    /// As [`HbaseStore::scan_each`].
    pub fn scan_rows(&self, table: &str, spec: &ScanSpec) -> Result<Vec<Row>> {
        let mut rows = Vec::new();
        self.scan_each(table, spec, |row| rows.push(row))?;
        Ok(rows)
    }
}

impl TableReader for HbaseStore {
    fn get(&self, table: &str, row: &[u8], time: Option<TimeRange>) -> crate::Result<Option<Row>> {
        Ok(self.get_row(table, row, time, 1)?)
    }

    fn get_versions(
        &self,
        table: &str,
        row: &[u8],
        time: Option<TimeRange>,
        max_versions: u32,
    ) -> crate::Result<Option<Row>> {
        Ok(self.get_row(table, row, time, max_versions)?)
    }

    fn get_many(
        &self,
        table: &str,
        rows: &[Vec<u8>],
        time: Option<TimeRange>,
    ) -> crate::Result<Vec<Option<Row>>> {
        Ok(self.get_rows(table, rows, time)?)
    }

    fn scan(&self, table: &str, spec: &ScanSpec) -> crate::Result<Vec<Row>> {
        Ok(self.scan_rows(table, spec)?)
    }

    // Streamed: each row is dropped once its key is passed on, rather than all held at once.
    // The cells still cross the wire (our Thrift2 `TScan` has no filter field for HBase's
    // `KeyOnlyFilter`).
    fn scan_keys(
        &self,
        table: &str,
        spec: &ScanSpec,
        visit: &mut dyn FnMut(&[u8]),
    ) -> crate::Result<usize> {
        // The region servers send each row's first visible cell, without its value: the rows
        // are those of the scan (a row is returned when a cell of it is visible), their cells
        // do not cross the wire.
        Ok(self.scan_filtered(table, spec, Some(KEYS_ONLY), |row| visit(&row.key))?)
    }
}

/// The filter of a scan of keys: a row's first visible cell, stripped of its value (what HBase's
/// `RowCounter` asks for).
const KEYS_ONLY: &[u8] = b"FirstKeyOnlyFilter() AND KeyOnlyFilter()";

/// Where a scan's next attempt starts (strictly after the last row passed on) and how many rows
/// it has passed on.
struct Resume<'a> {
    start: &'a mut Vec<u8>,
    seen: &'a mut usize,
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_pool_opens_at_most_read_connections_and_reuses_them() {
        let mut cfg = HbaseConfig::new("127.0.0.1:1");
        cfg.read_connections = 2;
        let store = HbaseStore::new(&cfg);
        let (a, b) = (store.conn(), store.conn());
        assert_eq!(store.pool().open, 2);
        std::thread::scope(|s| {
            let (tx, rx) = mpsc::channel();
            let store = &store;
            s.spawn(move || {
                let third = store.conn();
                tx.send(()).expect("main thread listens");
                drop(third);
            });
            // The third caller waits while both connections are leased …
            assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
            drop(a);
            // … and gets the one returned.
            rx.recv_timeout(Duration::from_secs(10))
                .expect("a returned connection");
        });
        drop(b);
        let pool = store.pool();
        assert_eq!((pool.open, pool.idle.len()), (2, 2));
    }
}
