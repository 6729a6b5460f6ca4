//! The read side: Thrift1 `getRow` and scanners with caching.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use crate::table::{Cell, Row, ScanSpec, TableReader};
use hbase_thrift::hbase::{THbaseSyncClient, TRowResult, TScan};

use super::client::{Connection, Thrift1};
use super::config::HbaseConfig;
use super::retry::retrying;
use super::Result;

/// Rows per `getRows` call: a day of wide rows (up to 3,600 cells each, ~100 KiB).
pub const GET_ROWS_CHUNK: usize = 24;

/// Counters of the gateway calls a reader made, so tests and benchmarks can see that a multi-get
/// went out as `getRows` and not as one `getRow` per row (all atomic).
#[derive(Debug, Default)]
pub struct ReaderStats {
    /// `getRow` calls that succeeded.
    pub get_row_calls: AtomicU64,
    /// `getRows` calls that succeeded.
    pub get_rows_calls: AtomicU64,
    /// Scans opened (`scannerOpenWithScan` calls that succeeded).
    pub scans: AtomicU64,
}

/// Reads hourglass tables from HBase through the Thrift1 gateway.
///
/// Rows come in key order with their cells ordered by family then qualifier, one version each
/// (the tables keep `VERSIONS => 1`); HBase itself hides cells past their TTL. Scans fetch
/// [`HbaseConfig::scan_caching`] rows per call (default 1000) and, after a retriable failure,
/// resume after the last row received. Concurrent callers (the HTTP server's requests, the
/// room fan-out's 16 scans) each get a connection of their own from a pool of at most
/// [`HbaseConfig::read_connections`], opened on first use and kept for the next caller.
pub struct HbaseStore {
    cfg: HbaseConfig,
    pool: Mutex<Pool>,
    /// Signalled when a connection goes back to the pool.
    returned: Condvar,
    stats: ReaderStats,
}

/// The connections not in use, and how many exist in all.
#[derive(Default)]
struct Pool {
    idle: Vec<Connection<Thrift1>>,
    open: usize,
}

/// A connection taken from the pool; it goes back when dropped.
struct Lease<'a> {
    store: &'a HbaseStore,
    conn: Option<Connection<Thrift1>>,
}

impl Deref for Lease<'_> {
    type Target = Connection<Thrift1>;
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
            .field("thrift1", &self.cfg.thrift1)
            .finish_non_exhaustive()
    }
}

/// Converts a Thrift1 row; `None` if it has no cell.
fn row_from_thrift(result: TRowResult) -> Option<Row> {
    let key = result.row?;
    let mut cells: Vec<Cell> = result
        .columns
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(column, cell)| {
            let split = column.iter().position(|&b| b == b':')?;
            let family = String::from_utf8_lossy(&column[..split]).into_owned();
            Some(Cell {
                family,
                qualifier: column[split + 1..].to_vec(),
                ts_ms: cell.timestamp.unwrap_or_default(),
                value: cell.value.unwrap_or_default(),
            })
        })
        .collect();
    // The map is ordered by `family:qualifier` bytes, which differs from (family, qualifier)
    // order when one family name is a prefix of another.
    cells.sort_by(|a, b| (&a.family, &a.qualifier).cmp(&(&b.family, &b.qualifier)));
    (!cells.is_empty()).then_some(Row { key, cells })
}

impl HbaseStore {
    /// A reader for the gateway of `cfg`; it connects on its first call.
    pub fn new(cfg: &HbaseConfig) -> Self {
        HbaseStore {
            pool: Mutex::new(Pool::default()),
            returned: Condvar::new(),
            cfg: cfg.clone(),
            stats: ReaderStats::default(),
        }
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
                let conn = Connection::new(&self.cfg.thrift1, &self.cfg);
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

    /// The row with this key, or `None` if it has no visible cell.
    ///
    /// # Errors
    /// [`Error::TableNotFound`], or a failure retrying did not cure.
    pub fn get_row(&self, table: &str, row: &[u8]) -> Result<Option<Row>> {
        let mut conn = self.conn();
        let rows = retrying(&self.cfg.retry, &format!("getRow on {table}"), || {
            conn.call("getRow", table, |c| {
                c.get_row(table.as_bytes().to_vec(), row.to_vec(), BTreeMap::new())
            })
        })?;
        self.stats.get_row_calls.fetch_add(1, Ordering::Relaxed);
        Ok(rows.into_iter().find_map(row_from_thrift))
    }

    /// The rows with these keys in the order asked (`None` where a row has no visible cell),
    /// fetched with `getRows`, [`GET_ROWS_CHUNK`] rows per call.
    ///
    /// # Errors
    /// [`Error::TableNotFound`], or a failure retrying did not cure.
    pub fn get_rows(&self, table: &str, keys: &[Vec<u8>]) -> Result<Vec<Option<Row>>> {
        let mut found: BTreeMap<Vec<u8>, Row> = BTreeMap::new();
        let mut conn = self.conn();
        for chunk in keys.chunks(GET_ROWS_CHUNK) {
            let results = retrying(&self.cfg.retry, &format!("getRows on {table}"), || {
                conn.call("getRows", table, |c| {
                    c.get_rows(table.as_bytes().to_vec(), chunk.to_vec(), BTreeMap::new())
                })
            })?;
            self.stats.get_rows_calls.fetch_add(1, Ordering::Relaxed);
            // The gateway leaves out the rows it did not find.
            found.extend(
                results
                    .into_iter()
                    .filter_map(row_from_thrift)
                    .map(|row| (row.key.clone(), row)),
            );
        }
        Ok(keys.iter().map(|key| found.get(key).cloned()).collect())
    }

    /// Calls `each` on every row of `[spec.start, spec.stop)` in key order, at most `spec.limit`
    /// rows. Returns the number of rows passed to `each`.
    ///
    /// # Errors
    /// [`Error::TableNotFound`], or a failure retrying did not cure.
    pub fn scan_each(
        &self,
        table: &str,
        spec: &ScanSpec,
        mut each: impl FnMut(Row),
    ) -> Result<usize> {
        let mut seen = 0usize;
        let mut start = spec.start.clone();
        let mut conn = self.conn();
        let what = format!("scan of {table}");
        retrying(&self.cfg.retry, &what, || {
            self.scan_from(&mut conn, table, spec, &mut start, &mut seen, &mut each)
        })?;
        Ok(seen)
    }

    /// One attempt of a scan from `start`; on success or failure, `start` and `seen` tell where
    /// the next attempt resumes.
    fn scan_from(
        &self,
        conn: &mut Connection<Thrift1>,
        table: &str,
        spec: &ScanSpec,
        start: &mut Vec<u8>,
        seen: &mut usize,
        each: &mut impl FnMut(Row),
    ) -> Result<()> {
        let remaining = |seen: usize| spec.limit.map_or(usize::MAX, |l| l.saturating_sub(seen));
        if remaining(*seen) == 0 {
            return Ok(());
        }
        let caching = self.cfg.scan_caching.clamp(1, i32::MAX as usize);
        let first = caching.min(remaining(*seen));
        // Every field explicitly: `TScan::default()` fills in an empty filter string (which
        // HBase rejects) and a timestamp of 0 (which would hide every cell).
        let scan = TScan {
            start_row: Some(start.clone()),
            stop_row: (!spec.stop.is_empty()).then(|| spec.stop.clone()),
            timestamp: None,
            columns: None,
            caching: Some(i32::try_from(first).unwrap_or(i32::MAX)),
            filter_string: None,
            batch_size: None,
            sort_columns: None,
            reversed: None,
            cache_blocks: None,
        };
        let id = conn.call("scannerOpenWithScan", table, |c| {
            c.scanner_open_with_scan(table.as_bytes().to_vec(), scan, BTreeMap::new())
        })?;
        self.stats.scans.fetch_add(1, Ordering::Relaxed);
        let result = (|| -> Result<()> {
            loop {
                let want = caching.min(remaining(*seen));
                if want == 0 {
                    return Ok(());
                }
                let rows = conn.call("scannerGetList", table, |c| {
                    c.scanner_get_list(id, i32::try_from(want).unwrap_or(i32::MAX))
                })?;
                if rows.is_empty() {
                    return Ok(());
                }
                for result in rows {
                    let Some(row) = row_from_thrift(result) else {
                        continue;
                    };
                    // Resume strictly after this row if the next call fails.
                    start.clear();
                    start.extend_from_slice(&row.key);
                    start.push(0);
                    each(row);
                    *seen += 1;
                    if remaining(*seen) == 0 {
                        return Ok(());
                    }
                }
            }
        })();
        // The gateway keeps a scanner until closed; a failed close only leaks it until the
        // gateway's scanner lease expires.
        if let Err(e) = conn.call("scannerClose", table, |c| c.scanner_close(id)) {
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
    fn get(&self, table: &str, row: &[u8]) -> crate::Result<Option<Row>> {
        Ok(self.get_row(table, row)?)
    }

    fn get_many(&self, table: &str, rows: &[Vec<u8>]) -> crate::Result<Vec<Option<Row>>> {
        Ok(self.get_rows(table, rows)?)
    }

    fn scan(&self, table: &str, spec: &ScanSpec) -> crate::Result<Vec<Row>> {
        Ok(self.scan_rows(table, spec)?)
    }
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
