//! The index built whole from `user_profile_tag` in one read of it: what a replay into an empty
//! store does once it has written the profiles, instead of the job's upkeep per write.
//!
//! A replay writes each changed value's entries and retracts the old ones as it goes
//! (`job/index.rs`); of a first load, many of those writes are undone before it ends (a user's
//! value changed again), and the upkeep per written tag (the user's known values, the changes
//! netted per batch) cost as much as the entries' ingestion. Built at the end, the index gets
//! one entry per stored value, stamped as the value, with no retraction and no upkeep: exactly
//! what `profile reconcile` expects (it holds the same rule: each tag's newest value, typed by
//! the registry, short-term tags left out).
//!
//! Only into an empty index ([`ReplayIndex::Build`]): the build puts, it never deletes. While
//! the replay runs, the index holds one row, [`BUILD_PENDING`], deleted once the build is
//! written. A replay killed before that leaves it, with profiles whose entries are missing:
//! the next replay into the store then repairs the index at its end
//! ([`ReplayIndex::Repair`], `profile reconcile --repair`, which deletes the row as it
//! deletes any row that is not an entry), `profile run` warns, and `profile reconcile` reports
//! the entries missing and the row stale.

use sinks::table::{Cell, KeyBatch, Mutation, ScanSpec, TableReader, TableWriter};

use super::index::{for_each_row_of_cell, INDEX_CELL, INDEX_FAMILY, INDEX_QUALIFIER};
use super::maintain::new_batch;
use super::reconcile::{each_row, reconcile, Reconciled};
use super::INDEX_TABLE;
use crate::key::parse_profile_row;
use crate::merge::FastMap;
use crate::tables::PROFILE_TABLE;
use crate::tag::{DataType, TagDef, ValueType};
use crate::Result;

/// The row of `user_tag_index` that says a replay's build of the index is not written yet. Not
/// an entry (entries start with a tag code, `[a-z]`); past every code's range, so no query
/// reads it.
pub const BUILD_PENDING: &[u8] = b"~build-pending";

/// How a replay keeps the index, as the store it writes into decides ([`replay_index`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayIndex {
    /// The store holds profiles and an index: each write keeps the index up (`job/index.rs`).
    PerWrite,
    /// The store holds no profile and no index: [`build`] at the end.
    Build,
    /// An earlier replay's build was not written ([`BUILD_PENDING`]): the index is repaired at
    /// the end (`profile reconcile --repair`).
    Repair,
}

/// How a replay into the store `reader` reads keeps the index.
///
/// # Errors
/// A store error.
pub fn replay_index(reader: &dyn TableReader) -> Result<ReplayIndex> {
    if is_pending(reader)? {
        return Ok(ReplayIndex::Repair);
    }
    let one = ScanSpec {
        limit: Some(1),
        ..ScanSpec::default()
    };
    for table in [PROFILE_TABLE, INDEX_TABLE] {
        if reader.scan_keys(table, &one, &mut |_| {})? > 0 {
            return Ok(ReplayIndex::PerWrite);
        }
    }
    Ok(ReplayIndex::Build)
}

/// Whether the index holds [`BUILD_PENDING`]: a replay's build of it was not written, and
/// entries are missing until `profile reconcile --repair` (or the next replay) puts them.
///
/// # Errors
/// A store error.
pub fn is_pending(reader: &dyn TableReader) -> Result<bool> {
    Ok(reader.get(INDEX_TABLE, BUILD_PENDING, None)?.is_some())
}

/// Puts [`BUILD_PENDING`], stamped now, and flushes: before a replay of [`ReplayIndex::Build`]
/// writes.
///
/// # Errors
/// A store error.
pub fn mark_pending(writer: &mut dyn TableWriter) -> Result<()> {
    writer.write(vec![Mutation::Put {
        table: INDEX_TABLE,
        row: BUILD_PENDING.to_vec(),
        cells: vec![Cell {
            family: INDEX_FAMILY.to_string(),
            qualifier: INDEX_QUALIFIER.to_vec(),
            ts_ms: pipeline::time::now_ms(),
            value: INDEX_CELL.to_vec(),
        }],
    }])?;
    writer.flush()?;
    Ok(())
}

/// What a replay's index work at its end did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// [`ReplayIndex::Build`]: the entries built.
    Built(Built),
    /// [`ReplayIndex::Repair`]: what the repair found and fixed.
    Repaired(Reconciled),
}

/// The end of a replay that kept no index up (`upkeep` [`ReplayIndex::Build`] or
/// [`ReplayIndex::Repair`]): builds or repairs the index, then removes [`BUILD_PENDING`], and
/// flushes. `None` for [`ReplayIndex::PerWrite`], which has nothing to do.
///
/// # Errors
/// A store error: [`BUILD_PENDING`] stays, and the next replay repairs the index.
pub fn finish(
    reader: &dyn TableReader,
    writer: &mut dyn TableWriter,
    defs: &[TagDef],
    upkeep: ReplayIndex,
) -> Result<Option<Finished>> {
    match upkeep {
        ReplayIndex::PerWrite => Ok(None),
        ReplayIndex::Build => {
            let built = build(reader, writer, defs)?;
            // After the entries are flushed: a kill in between leaves the row, and a repair.
            // As of its stamp, not of all time: HBase would hide a later one.
            if let Some(row) = reader.get(INDEX_TABLE, BUILD_PENDING, None)? {
                let ts_ms = row.cells.iter().map(|c| c.ts_ms).max().unwrap_or(i64::MAX);
                writer.write(vec![Mutation::DeleteRow {
                    table: INDEX_TABLE,
                    row: BUILD_PENDING.to_vec(),
                    ts_ms,
                }])?;
                writer.flush()?;
            }
            Ok(Some(Finished::Built(built)))
        }
        // The row is no entry: the repair deletes it as stale, after the entries it puts.
        ReplayIndex::Repair => Ok(Some(Finished::Repaired(reconcile(
            reader,
            Some(writer),
            defs,
        )?))),
    }
}

/// Entries queued before they are passed to the writer (some 3 MB of rows): the writer buffers
/// them in turn, the embedded store up to a sorted table's 8 MiB.
const ENTRIES_PER_WRITE: usize = 1 << 16;

/// What a build read and wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Built {
    /// `user_profile_tag` rows read.
    pub profile_rows: u64,
    /// Index entries put (a MULTI_VALUE value's repeated element counted each time).
    pub entries: u64,
}

/// Puts the index entries of every value `user_profile_tag` holds (each tag's newest, typed by
/// `defs`; short-term tags and unknown codes have none), each stamped as its value, and
/// flushes `writer`. Reads the profile table a page at a time and holds at most
/// [`ENTRIES_PER_WRITE`] entries beside what the writer buffers. Meant for an empty index (see
/// the module doc): it deletes nothing.
///
/// # Errors
/// A store error; the entries written before it stay (`profile reconcile --repair` completes
/// them).
pub fn build(
    reader: &dyn TableReader,
    writer: &mut dyn TableWriter,
    defs: &[TagDef],
) -> Result<Built> {
    let types: FastMap<&[u8], (&str, DataType)> = defs
        .iter()
        .filter(|d| d.value_type != ValueType::ShortTerm)
        .map(|d| {
            let code = d.tag_code.as_str();
            (code.as_bytes(), (code, d.data_type))
        })
        .collect();
    let mut built = Built::default();
    let mut batch: KeyBatch = new_batch();
    let mut scratch = Vec::new();
    let mut failed = None;
    each_row(reader, PROFILE_TABLE, (&[], &[]), &mut |row| {
        if failed.is_some() {
            return;
        }
        built.profile_rows += 1;
        let Some(user) = parse_profile_row(&row.key) else {
            return;
        };
        for cell in &row.cells {
            let Some(&(code, data_type)) = types.get(cell.qualifier.as_slice()) else {
                continue;
            };
            for_each_row_of_cell(code, data_type, &cell.value, user, &mut scratch, |entry| {
                batch.put(entry, cell.ts_ms);
            });
        }
        if batch.len() >= ENTRIES_PER_WRITE {
            built.entries += batch.len() as u64;
            failed = writer.write_keys(&batch).err();
            batch.clear();
        }
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    built.entries += batch.len() as u64;
    writer.write_keys(&batch)?;
    writer.flush()?;
    Ok(built)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use sinks::config::StoreConfig;
    use sinks::table::{Cell, Mutation};
    use sinks::OpenOptions;

    use super::*;
    use crate::audience::index::{index_row, values_of_cell};
    use crate::audience::reconcile::reconcile;
    use crate::key::profile_row;
    use crate::tables::{BEHAVIOR_FAMILY, DIMENSION_FAMILY};

    use crate::audience::tests::typed_def as def;

    fn defs() -> Vec<TagDef> {
        vec![
            def("dim_city", DataType::String, ValueType::Dimension),
            def("beh_buy", DataType::Int, ValueType::Statistic),
            def("dim_likes", DataType::MultiValue, ValueType::Dimension),
            def("vip", DataType::Boolean, ValueType::Dimension),
            def("rt_cat", DataType::String, ValueType::ShortTerm),
        ]
    }

    fn cell(family: &str, code: &str, ts_ms: i64, value: &str) -> Cell {
        Cell {
            family: family.into(),
            qualifier: code.as_bytes().to_vec(),
            ts_ms,
            value: value.as_bytes().to_vec(),
        }
    }

    fn store(dir: &std::path::Path) -> sinks::Store {
        let cfg = StoreConfig {
            dir: dir.join("store"),
            ..StoreConfig::default()
        };
        let options = OpenOptions {
            newest_timestamp_wins: true,
            ..OpenOptions::default()
        };
        sinks::open(&cfg, &crate::tables::tables(), &options).unwrap()
    }

    /// Every entry of the index with its stamps, as text.
    fn index(store: &sinks::Store) -> BTreeMap<String, Vec<i64>> {
        let spec = ScanSpec {
            max_versions: 10,
            ..ScanSpec::default()
        };
        let rows = store.reader().scan(INDEX_TABLE, &spec).unwrap();
        rows.iter()
            .map(|r| {
                let stamps = r.cells.iter().map(|c| c.ts_ms).collect();
                (String::from_utf8_lossy(&r.key).into_owned(), stamps)
            })
            .collect()
    }

    /// Profiles written in several flushes, values replaced, late versions and a behaviour
    /// family's older versions kept: the build indexes each tag's newest value only, stamped as
    /// it, with one entry per distinct element, and leaves nothing for `reconcile` to repair.
    #[test]
    fn the_build_indexes_each_newest_value_as_reconcile_expects() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        assert_eq!(replay_index(&store.reader()).unwrap(), ReplayIndex::Build);
        let mut w = store.writer();
        let mut want = BTreeMap::new();
        for i in 0..500u64 {
            let user = format!("{}", 13_800_000_000 + i);
            let city = ["hz", "sh", "a_b c"][(i % 3) as usize];
            let buys = (i % 7) as i64 - 2;
            let row = profile_row(&user);
            let first = vec![
                cell(DIMENSION_FAMILY, "dim_city", 10, "old"),
                cell(BEHAVIOR_FAMILY, "beh_buy", 10, "99"),
                cell(DIMENSION_FAMILY, "dim_likes", 10, r#"["a","b","a"]"#),
                cell(DIMENSION_FAMILY, "rt_cat", 10, "x"),
                cell(DIMENSION_FAMILY, "dim_unknown", 10, "x"),
            ];
            w.write(vec![Mutation::Put {
                table: PROFILE_TABLE,
                row: row.clone(),
                cells: first,
            }])
            .unwrap();
            if i % 2 == 0 {
                w.flush().unwrap();
            }
            let mut later = vec![
                cell(DIMENSION_FAMILY, "dim_city", 20, city),
                cell(BEHAVIOR_FAMILY, "beh_buy", 30, &buys.to_string()),
                // Late: the newer values stay.
                cell(DIMENSION_FAMILY, "dim_city", 15, "late"),
                cell(BEHAVIOR_FAMILY, "beh_buy", 25, "7"),
            ];
            if i % 5 == 0 {
                later.push(cell(DIMENSION_FAMILY, "vip", 40, "true"));
            }
            w.write(vec![Mutation::Put {
                table: PROFILE_TABLE,
                row,
                cells: later,
            }])
            .unwrap();
            let defs = defs();
            let type_of = |code: &str| defs.iter().find(|d| d.tag_code == code).unwrap().data_type;
            let mut expect = |code: &str, value: &str, ts: i64| {
                for v in values_of_cell(type_of(code), value.as_bytes()) {
                    let key = index_row(code, &v, &user);
                    want.insert(String::from_utf8(key).unwrap(), vec![ts]);
                }
            };
            expect("dim_city", city, 20);
            expect("beh_buy", &buys.to_string(), 30);
            expect("dim_likes", r#"["a","b"]"#, 10);
            if i % 5 == 0 {
                expect("vip", "true", 40);
            }
        }
        w.flush().unwrap();
        assert_eq!(
            replay_index(&store.reader()).unwrap(),
            ReplayIndex::PerWrite
        );

        let built = build(&store.reader(), w.as_mut(), &defs()).unwrap();
        assert_eq!(built.profile_rows, 500);
        // The repeated element counted twice.
        assert_eq!(built.entries, want.len() as u64 + 500);
        assert_eq!(index(&store), want);
        let found = reconcile(&store.reader(), None, &defs()).unwrap();
        assert!(found.consistent(), "{found:?}");
        assert_eq!(found.index_rows, want.len() as u64);
    }

    #[test]
    fn an_empty_profile_table_builds_an_empty_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let mut w = store.writer();
        let built = build(&store.reader(), w.as_mut(), &defs()).unwrap();
        assert_eq!(built, Built::default());
        assert!(index(&store).is_empty());
        assert_eq!(replay_index(&store.reader()).unwrap(), ReplayIndex::Build);
    }

    /// A replay's lifecycle: the pending row put before it writes, then the build and its
    /// removal; or, killed before the build, the next replay repairs the index, which
    /// `reconcile` finds missing entries in and the pending row stale until then.
    #[test]
    fn a_build_not_written_is_repaired_by_the_next_replay() {
        for killed in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let store = store(dir.path());
            let reader = store.reader();
            let mut w = store.writer();
            assert_eq!(replay_index(&reader).unwrap(), ReplayIndex::Build);
            mark_pending(w.as_mut()).unwrap();
            assert!(is_pending(&reader).unwrap());
            // Pending wins over what the tables hold.
            assert_eq!(replay_index(&reader).unwrap(), ReplayIndex::Repair);
            let puts = (0..50u64)
                .map(|i| Mutation::Put {
                    table: PROFILE_TABLE,
                    row: profile_row(&format!("u{i}")),
                    cells: vec![cell(DIMENSION_FAMILY, "dim_city", 10, "hz")],
                })
                .collect();
            w.write(puts).unwrap();
            w.flush().unwrap();
            if killed {
                let found = reconcile(&reader, None, &defs()).unwrap();
                assert_eq!((found.missing, found.stale), (50, 1), "{found:?}");
                let next = replay_index(&reader).unwrap();
                assert_eq!(next, ReplayIndex::Repair);
                let done = finish(&reader, w.as_mut(), &defs(), next).unwrap();
                assert!(
                    matches!(done, Some(Finished::Repaired(r)) if r.missing == 50 && r.stale == 1),
                    "{done:?}"
                );
            } else {
                let done = finish(&reader, w.as_mut(), &defs(), ReplayIndex::Build).unwrap();
                assert!(
                    matches!(done, Some(Finished::Built(b)) if b.entries == 50),
                    "{done:?}"
                );
            }
            assert!(!is_pending(&reader).unwrap(), "killed: {killed}");
            assert_eq!(replay_index(&reader).unwrap(), ReplayIndex::PerWrite);
            let found = reconcile(&reader, None, &defs()).unwrap();
            assert!(found.consistent(), "killed: {killed}: {found:?}");
            assert_eq!(found.index_rows, 50);
            assert_eq!(
                finish(&reader, w.as_mut(), &defs(), ReplayIndex::PerWrite).unwrap(),
                None
            );
        }
    }
}
