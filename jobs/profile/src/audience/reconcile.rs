//! `hourglass profile reconcile`: the index compared with `user_profile_tag`, mismatches
//! counted by kind and, when asked, repaired.
//!
//! A tool for an operator after an incident or with the index turned off for a while, not for
//! every hour. Its memory is bounded whatever the tables' sizes: the profile table is read a
//! page at a time, and the index's key range is cut into passes of at most
//! [`ENTRIES_PER_PASS`] expected entries (whole tag codes, in the index's key order). A pass
//! reads the profile table, keeps the entries of its codes, sorts them, and merges them with
//! its range of the index, read a page at a time; the mismatches are written as they are found.
//! A first read of the profile table counts the entries per code to plan the passes: a store
//! whose index fits one pass is read twice, one of N passes N + 1 times.

use std::collections::{BTreeMap, BTreeSet};

use sinks::table::{Cell, Mutation, Row, ScanSpec, TableReader, TableWriter};

use super::index::{
    code_range, index_row, values_of_cell, IndexValue, INDEX_CELL, INDEX_FAMILY, INDEX_QUALIFIER,
};
use super::INDEX_TABLE;
use crate::key::parse_profile_row;
use crate::tables::PROFILE_TABLE;
use crate::tag::{TagDef, ValueType};
use crate::Result;

/// What a reconciliation found (and, with repair, fixed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Reconciled {
    /// `user_profile_tag` rows read.
    pub profile_rows: u64,
    /// `user_tag_index` rows read.
    pub index_rows: u64,
    /// Entries a stored value needs and the index lacks.
    pub missing: u64,
    /// Entries of no stored value: a value that changed, a tag purged or unknown, a row that
    /// is not an index key.
    pub stale: u64,
    /// Whether the mismatches were repaired (missing entries put, stale ones deleted).
    pub repaired: bool,
}

impl Reconciled {
    /// Whether the index matched the profiles.
    pub fn consistent(&self) -> bool {
        self.missing == 0 && self.stale == 0
    }
}

/// Expected index entries one pass holds at most (a key of some 40 bytes and a stamp each: about
/// 0.3 GB). A tag code's entries are never split between passes, so a pass of one code holds
/// all of that code's.
pub const ENTRIES_PER_PASS: usize = 4 << 20;

/// Rows one scan call of the profile table or the index reads.
const PAGE: usize = 4096;

/// Mismatches queued before they are written.
const FIX_BATCH: usize = 8192;

/// Compares `user_tag_index` with `user_profile_tag` (each tag's newest value, typed by
/// `defs`; short-term tags are not indexed); with a `repair` writer, puts the missing entries
/// (stamped as their values) and deletes the stale ones (as of their own stamps, so a later
/// entry of the same value is not hidden). Memory is bounded (module doc).
///
/// # Errors
/// A store error.
pub fn reconcile(
    reader: &dyn TableReader,
    repair: Option<&mut dyn TableWriter>,
    defs: &[TagDef],
) -> Result<Reconciled> {
    reconcile_in_passes(reader, repair, defs, ENTRIES_PER_PASS)
}

/// [`reconcile`] with passes of at most `per_pass` entries (at least one code each).
fn reconcile_in_passes(
    reader: &dyn TableReader,
    repair: Option<&mut dyn TableWriter>,
    defs: &[TagDef],
    per_pass: usize,
) -> Result<Reconciled> {
    let types: BTreeMap<&str, _> = defs
        .iter()
        .filter(|d| d.value_type != ValueType::ShortTerm)
        .map(|d| (d.tag_code.as_str(), d.data_type))
        .collect();
    let mut found = Reconciled::default();

    // Entries per code, to plan the passes.
    let mut per_code: BTreeMap<&str, usize> = BTreeMap::new();
    each_row(reader, PROFILE_TABLE, (&[], &[]), &mut |row| {
        found.profile_rows += 1;
        each_entry(&types, &row, None, &mut |code, _, _, _| {
            *per_code.entry(code).or_default() += 1;
        });
    })?;
    let passes = plan(&types, &per_code, per_pass);

    let mut fixes = Fixes {
        writer: repair,
        queued: Vec::new(),
    };
    let mut from: Vec<u8> = Vec::new();
    for (i, (codes, stop)) in passes.iter().enumerate() {
        // The last pass reads to the end of the index: rows past every known code are stale.
        let stop: &[u8] = if i + 1 == passes.len() { &[] } else { stop };
        let mut expected: Vec<(Vec<u8>, i64)> = Vec::new();
        if !codes.is_empty() {
            each_row(reader, PROFILE_TABLE, (&[], &[]), &mut |row| {
                each_entry(&types, &row, Some(codes), &mut |code, v, user, ts_ms| {
                    expected.push((index_row(code, v, user), ts_ms));
                });
            })?;
        }
        // A MULTI_VALUE value's repeated element is one entry.
        expected.sort_unstable();
        expected.dedup_by(|a, b| a.0 == b.0);
        let mut expected = expected.into_iter().peekable();
        let mut failed = None;
        each_row(reader, INDEX_TABLE, (&from, stop), &mut |row| {
            if failed.is_some() {
                return;
            }
            found.index_rows += 1;
            let mut fixed = Ok(());
            while let Some((key, ts_ms)) = expected.next_if(|(key, _)| *key < row.key) {
                found.missing += 1;
                fixed = fixed.and_then(|()| fixes.put(key, ts_ms));
            }
            if expected.next_if(|(key, _)| *key == row.key).is_none() {
                found.stale += 1;
                let ts_ms = row.cells.iter().map(|c| c.ts_ms).max().unwrap_or(i64::MAX);
                fixed = fixed.and_then(|()| fixes.delete(row.key, ts_ms));
            }
            failed = fixed.err();
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        for (key, ts_ms) in expected {
            found.missing += 1;
            fixes.put(key, ts_ms)?;
        }
        from = stop.to_vec();
    }
    if let Some(writer) = fixes.writer.as_deref_mut() {
        let rest = std::mem::take(&mut fixes.queued);
        if !rest.is_empty() {
            writer.write(rest)?;
        }
        writer.flush()?;
        found.repaired = true;
    }
    Ok(found)
}

/// The passes: each a set of codes (consecutive in the index's key order, at most `per_pass`
/// entries unless one code has more) and the end of its key range. At least one pass.
fn plan<'a>(
    types: &BTreeMap<&'a str, crate::tag::DataType>,
    per_code: &BTreeMap<&'a str, usize>,
    per_pass: usize,
) -> Vec<(BTreeSet<&'a str>, Vec<u8>)> {
    let mut ranges: Vec<(Vec<u8>, Vec<u8>, &str)> = types
        .keys()
        .map(|&code| {
            let (start, stop) = code_range(code);
            (start, stop, code)
        })
        .collect();
    ranges.sort();
    let mut passes: Vec<(BTreeSet<&str>, Vec<u8>)> = Vec::new();
    let mut held = 0usize;
    for (_, stop, code) in ranges {
        let n = per_code.get(code).copied().unwrap_or(0);
        match passes.last_mut() {
            Some((codes, end)) if held.saturating_add(n) <= per_pass => {
                codes.insert(code);
                *end = stop;
                held += n;
            }
            _ => {
                passes.push((BTreeSet::from([code]), stop));
                held = n;
            }
        }
    }
    if passes.is_empty() {
        passes.push((BTreeSet::new(), Vec::new()));
    }
    passes
}

/// Calls `each` with every row of `table` in `[start, stop)` (`stop` empty: to the end), read
/// [`PAGE`] rows at a time.
pub(super) fn each_row(
    reader: &dyn TableReader,
    table: &str,
    (start, stop): (&[u8], &[u8]),
    each: &mut dyn FnMut(Row),
) -> Result<()> {
    let mut spec = ScanSpec {
        start: start.to_vec(),
        stop: stop.to_vec(),
        limit: Some(PAGE),
        ..ScanSpec::default()
    };
    loop {
        let rows = reader.scan(table, &spec)?;
        let full = rows.len() >= PAGE;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        let mut next = last.key.clone();
        next.push(0);
        rows.into_iter().for_each(&mut *each);
        if !full {
            return Ok(());
        }
        spec.start = next;
    }
}

/// Calls `each` with the code, value, user and stamp of every entry `row` (a profile row)
/// needs, of the codes of `only` if given; the entry's key is [`index_row`] of them, built only
/// where a pass keeps it (the counting pass needs none).
fn each_entry<'a>(
    types: &BTreeMap<&'a str, crate::tag::DataType>,
    row: &Row,
    only: Option<&BTreeSet<&str>>,
    each: &mut dyn FnMut(&'a str, &IndexValue, &str, i64),
) {
    let Some(user) = parse_profile_row(&row.key) else {
        return;
    };
    for cell in &row.cells {
        let Some(code) = std::str::from_utf8(&cell.qualifier).ok() else {
            continue;
        };
        let Some((&code, &data_type)) = types.get_key_value(code) else {
            continue;
        };
        if only.is_some_and(|codes| !codes.contains(code)) {
            continue;
        }
        for v in values_of_cell(data_type, &cell.value) {
            each(code, &v, user, cell.ts_ms);
        }
    }
}

/// The repairs found so far, written [`FIX_BATCH`] at a time (none without a writer).
struct Fixes<'w> {
    writer: Option<&'w mut dyn TableWriter>,
    queued: Vec<Mutation>,
}

impl Fixes<'_> {
    fn put(&mut self, row: Vec<u8>, ts_ms: i64) -> Result<()> {
        self.queue(Mutation::Put {
            table: INDEX_TABLE,
            row,
            cells: vec![Cell {
                family: INDEX_FAMILY.to_string(),
                qualifier: INDEX_QUALIFIER.to_vec(),
                ts_ms,
                value: INDEX_CELL.to_vec(),
            }],
        })
    }

    fn delete(&mut self, row: Vec<u8>, ts_ms: i64) -> Result<()> {
        self.queue(Mutation::DeleteRow {
            table: INDEX_TABLE,
            row,
            ts_ms,
        })
    }

    fn queue(&mut self, m: Mutation) -> Result<()> {
        let Some(writer) = self.writer.as_deref_mut() else {
            return Ok(());
        };
        self.queued.push(m);
        if self.queued.len() >= FIX_BATCH {
            writer.write(std::mem::take(&mut self.queued))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use sinks::config::StoreConfig;
    use sinks::OpenOptions;

    use super::*;
    use crate::key::profile_row;
    use crate::tag::DataType;

    use crate::audience::tests::typed_def as def;

    fn defs() -> Vec<TagDef> {
        vec![
            def("dim_city", DataType::String, ValueType::Dimension),
            def("dim_city_tier", DataType::String, ValueType::Dimension),
            def("beh_buy", DataType::Int, ValueType::Statistic),
            def("dim_interests", DataType::MultiValue, ValueType::Dimension),
            def("vip", DataType::Boolean, ValueType::Dimension),
            def("rt_cat", DataType::String, ValueType::ShortTerm),
        ]
    }

    fn cell(code: &str, ts_ms: i64, value: &str) -> Cell {
        Cell {
            family: "dimension".into(),
            qualifier: code.as_bytes().to_vec(),
            ts_ms,
            value: value.as_bytes().to_vec(),
        }
    }

    fn entry(row: Vec<u8>, ts_ms: i64) -> Mutation {
        Mutation::Put {
            table: INDEX_TABLE,
            row,
            cells: vec![Cell {
                family: INDEX_FAMILY.into(),
                qualifier: INDEX_QUALIFIER.to_vec(),
                ts_ms,
                value: INDEX_CELL.to_vec(),
            }],
        }
    }

    /// Profiles of random users, and an index that misses some of their entries and holds
    /// others of no value: of a value the user no longer has, of an unknown code, keys that
    /// are no index row, before and after every code's range. The entries a brute force says
    /// are needed.
    fn scenario(store: &sinks::Store) -> BTreeSet<Vec<u8>> {
        let mut rng = ChaCha8Rng::seed_from_u64(38);
        let defs = defs();
        let types: BTreeMap<&str, DataType> = defs
            .iter()
            .filter(|d| d.value_type != ValueType::ShortTerm)
            .map(|d| (d.tag_code.as_str(), d.data_type))
            .collect();
        let mut needed = BTreeSet::new();
        let mut batch = Vec::new();
        for i in 0..300u64 {
            let user = format!("{}", 13_800_000_000 + i);
            let mut cells = Vec::new();
            let city = ["hz", "sh", "a_b c"][rng.random_range(0..3)];
            cells.push(cell("dim_city", 10, city));
            if rng.random_bool(0.5) {
                cells.push(cell(
                    "dim_city_tier",
                    11,
                    ["tier1", "tier2"][rng.random_range(0..2)],
                ));
            }
            cells.push(cell("beh_buy", 12, &rng.random_range(-2..5).to_string()));
            if rng.random_bool(0.6) {
                // A repeated element is one entry.
                cells.push(cell("dim_interests", 13, r#"["ball","books","ball"]"#));
            }
            cells.push(cell(
                "vip",
                14,
                if rng.random_bool(0.3) {
                    "true"
                } else {
                    "false"
                },
            ));
            cells.push(cell("rt_cat", 15, "beauty"));
            cells.push(cell("dim_unregistered", 16, "x"));
            for c in &cells {
                let code = std::str::from_utf8(&c.qualifier).unwrap();
                let Some(&t) = types.get(code) else { continue };
                for v in values_of_cell(t, &c.value) {
                    let key = index_row(code, &v, &user);
                    needed.insert(key.clone());
                    if rng.random_bool(0.9) {
                        batch.push(entry(key, c.ts_ms));
                    }
                }
            }
            if rng.random_bool(0.2) {
                let stale = index_row("beh_buy", &super::super::index::IndexValue::Int(99), &user);
                batch.push(entry(stale, 5));
            }
            batch.push(Mutation::Put {
                table: PROFILE_TABLE,
                row: profile_row(&user),
                cells,
            });
        }
        for junk in ["", "a", "beh_buy_", "dim_city_zz", "gone_code_Sx_1", "zzz"] {
            batch.push(entry(format!("{junk}junk").into_bytes(), 7));
        }
        let mut w = store.writer();
        w.write(batch).unwrap();
        w.flush().unwrap();
        needed
    }

    fn index_keys(store: &sinks::Store) -> BTreeSet<Vec<u8>> {
        let reader = store.reader();
        let mut keys = BTreeSet::new();
        reader
            .scan_keys(INDEX_TABLE, &ScanSpec::default(), &mut |k| {
                keys.insert(k.to_vec());
            })
            .unwrap();
        keys
    }

    #[test]
    fn passes_of_any_size_find_and_repair_what_one_pass_does() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = StoreConfig {
            dir: dir.path().join("store"),
            ..StoreConfig::default()
        };
        let store = sinks::open(&cfg, &crate::tables::tables(), &OpenOptions::default()).unwrap();
        let needed = scenario(&store);
        let held = index_keys(&store);
        let want_missing = needed.difference(&held).count() as u64;
        let want_stale = held.difference(&needed).count() as u64;
        assert!(
            want_missing > 10 && want_stale > 10,
            "{want_missing} {want_stale}"
        );

        let reader = store.reader();
        let whole = reconcile_in_passes(&reader, None, &defs(), usize::MAX).unwrap();
        assert_eq!((whole.missing, whole.stale), (want_missing, want_stale));
        assert_eq!(whole.profile_rows, 300);
        assert_eq!(whole.index_rows, held.len() as u64);
        for per_pass in [0, 1, 7, 300, 1000] {
            let passes = reconcile_in_passes(&reader, None, &defs(), per_pass).unwrap();
            assert_eq!(passes, whole, "{per_pass} entries a pass");
        }

        // Repaired in passes of one code: the index is then exactly what the profiles need.
        let mut w = store.writer();
        let fixed = reconcile_in_passes(&reader, Some(&mut *w), &defs(), 1).unwrap();
        assert!(fixed.repaired);
        assert_eq!(index_keys(&store), needed);
        let after = reconcile(&reader, None, &defs()).unwrap();
        assert!(after.consistent(), "{after:?}");
    }
}
