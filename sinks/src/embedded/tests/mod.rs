//! Tests of the embedded store against HBase's semantics.

mod bench;
mod delete_column;
mod delete_version;
mod generations;
mod lifecycle;
mod merge;
mod model;
mod semantics;
mod series;
mod versions;
mod wide;

use super::EmbeddedStore;
use crate::schema::{Bloom, Compression, FamilySpec, TableSpec};
use crate::table::{Cell, Mutation, Row, ScanSpec, TableReader, TableWriter};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use tempfile::TempDir;

const T: &str = "readings";
const TTL_SECS: u64 = 10;
const NOW: i64 = 1_700_000_000_000;

fn family(name: &'static str, ttl_secs: Option<u64>) -> FamilySpec {
    FamilySpec {
        name,
        ttl_secs,
        compression: Compression::None,
        bloom: Bloom::None,
        max_versions: 1,
        block_size: crate::schema::DEFAULT_BLOCK_SIZE,
        data_block_encoding: crate::schema::DataBlockEncoding::None,
        packed: false,
        packed_apart: &[],
    }
}

/// A table whose family `t` keeps cells for `TTL_SECS`, plus two families without TTL.
fn table() -> TableSpec {
    TableSpec {
        key: crate::schema::KeyCodec::raw(),
        name: T,
        families: vec![
            family("t", Some(TTL_SECS)),
            family("tt", None),
            family("a", None),
        ],
        split_keys: Vec::new(),
        get_rows_per_call: crate::schema::DEFAULT_GET_ROWS_PER_CALL,
    }
}

/// The test table, its family `t` packed or not.
fn table_with(packed: bool) -> TableSpec {
    let mut spec = table();
    spec.families[0].packed = packed;
    spec
}

/// A clock stuck at `NOW` until the test moves it.
fn clock() -> (Arc<AtomicI64>, Arc<dyn Fn() -> i64 + Send + Sync>) {
    let now = Arc::new(AtomicI64::new(NOW));
    let read = now.clone();
    (now, Arc::new(move || read.load(Ordering::SeqCst)))
}

fn open(dir: &TempDir) -> (EmbeddedStore, Arc<AtomicI64>) {
    let (now, clock) = clock();
    let store = EmbeddedStore::open_with_clock(dir.path(), &[table()], clock).unwrap();
    (store, now)
}

fn cell(family: &str, qualifier: &[u8], ts_ms: i64, value: &[u8]) -> Cell {
    Cell {
        family: family.into(),
        qualifier: qualifier.to_vec(),
        ts_ms,
        value: value.to_vec(),
    }
}

fn put(row: &[u8], cells: Vec<Cell>) -> Mutation {
    Mutation::Put {
        table: T,
        row: row.to_vec(),
        cells,
    }
}

/// A put of one live `t:v` cell.
fn put_v(row: &[u8], value: &[u8]) -> Mutation {
    put(row, vec![cell("t", b"v", NOW, value)])
}

fn write(store: &EmbeddedStore, mutations: Vec<Mutation>) {
    let mut w = store.writer();
    w.write(mutations).unwrap();
    w.flush().unwrap();
}

fn keys(rows: &[Row]) -> Vec<&[u8]> {
    rows.iter().map(|r| r.key.as_slice()).collect()
}

fn scan(store: &EmbeddedStore, start: &[u8], stop: &[u8], limit: Option<usize>) -> Vec<Row> {
    let spec = ScanSpec {
        start: start.to_vec(),
        stop: stop.to_vec(),
        limit,
        columns: Vec::new(),
        time_range: None,
        ..ScanSpec::default()
    };
    store.scan(T, &spec).unwrap()
}
