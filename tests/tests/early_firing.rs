//! While data is still arriving, the open hour's wide row follows the narrow table up to the
//! watermark within one early-fire period, and its summary matches its cells — also after late
//! data. Runs the dataflow in-process over the embedded store, feeding it by hand; `hbase_live.rs`
//! runs the same scenario (`early_firing_common`) against HBase.

mod early_firing_common;

use std::sync::Arc;

use sensor::tables::all_tables;
use sinks::embedded::EmbeddedStore;

const H: i64 = 1_724_101_200;

#[test]
fn open_hour_follows_the_narrow_table_after_each_early_firing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        EmbeddedStore::open_with_clock(dir.path(), &all_tables(), Arc::new(|| 1_724_200_000_000))
            .expect("open");
    let job_store = store.clone();
    early_firing_common::open_hour_follows_the_narrow_table(
        H,
        &store,
        Arc::new(move || Box::new(job_store.writer())),
        dir.path(),
    );
}
