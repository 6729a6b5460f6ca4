//! How evenly a table's rows spread over its regions or salt buckets: the report a domain's
//! landing check fills (predicted from a recording, or counted in a live HBase table), its
//! statistics and its renderings, knowing no domain.

mod live;
mod render;

use std::collections::{BTreeMap, HashMap};

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

pub use live::count_regions;
pub use render::{svg, table};

/// How many of the hottest id prefixes a report shows.
pub const HOTTEST: usize = 5;

/// Rows landing in one salt bucket or region.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bucket {
    /// `00`.. for a salt bucket, `r00`.. for a predicted plain region, the start key for a
    /// region of a split or a live table (`(start)` for the first).
    pub label: String,
    /// First row key of the bucket or region (empty: the table's start).
    pub start: String,
    /// First row key after it (empty: the table's end).
    pub end: String,
    /// Rows counted (live) or predicted (file).
    pub rows: u64,
}

/// An id prefix and the rows of its ids. Serialized with the count of ids named after the
/// entity (`"devices": 1000`, `"users": 80`).
#[derive(Debug, Clone, PartialEq)]
pub struct Prefix {
    /// The prefix (see [`Layout::prefix_of`]).
    pub prefix: String,
    /// What an id names (`device`, `user`), for the serialized count's name.
    pub entity: &'static str,
    /// Ids with this prefix.
    pub ids: u64,
    /// Their rows.
    pub rows: u64,
    /// Their share of all rows.
    pub share: f64,
    /// The bucket or region holding most of them.
    pub top_bucket: String,
    /// Share of the prefix's rows in `top_bucket`.
    pub top_bucket_share: f64,
}

impl Serialize for Prefix {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(6))?;
        map.serialize_entry("prefix", &self.prefix)?;
        map.serialize_entry(&format!("{}s", self.entity), &self.ids)?;
        map.serialize_entry("rows", &self.rows)?;
        map.serialize_entry("share", &self.share)?;
        map.serialize_entry("top_bucket", &self.top_bucket)?;
        map.serialize_entry("top_bucket_share", &self.top_bucket_share)?;
        map.end()
    }
}

/// The check's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LandingReport {
    /// `file PATH` or `hbase HOST:PORT table NAME`.
    pub source: String,
    /// The table checked.
    pub table: &'static str,
    /// The key layout: the domain's name for it (`salted`, `plain`, `wide`, …).
    pub scheme: &'static str,
    /// What an id names (`device`, `user`).
    #[serde(skip)]
    pub entity: &'static str,
    /// Rows per bucket or region, in key order.
    pub buckets: Vec<Bucket>,
    /// All rows.
    pub rows: u64,
    /// Rows of the fullest bucket ÷ the mean over all buckets (empty ones included).
    pub max_over_mean: f64,
    /// Standard deviation ÷ mean of the rows per bucket.
    pub cv: f64,
    /// The id prefixes with the most rows, most first.
    pub hottest_prefixes: Vec<Prefix>,
    /// The threshold of the verdict.
    pub max_skew: f64,
    /// Whether `max_over_mean <= max_skew`.
    pub pass: bool,
    /// Input lines that give no row (file), by reason kind; rows whose key does not have the
    /// layout's shape (live) under `key`. Counted, never part of the spread.
    pub rejected: BTreeMap<String, u64>,
    /// How a row's bucket or region was found.
    pub note: String,
}

/// What a domain's check reports on: the table, its key layout and how its ids group.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// The table's name.
    pub table: &'static str,
    /// The key layout's name ([`LandingReport::scheme`]).
    pub scheme: &'static str,
    /// What an id names (`device`, `user`).
    pub entity: &'static str,
    /// The prefix an id shares with its batch, gateway or number range: the unit of a hot
    /// spot.
    pub prefix_of: fn(&str) -> &str,
}

/// Rows per id and the bucket each id's rows land in, as a prediction or a count gathers
/// them.
#[derive(Debug, Default)]
pub struct Tally {
    /// Per id: rows in each bucket index.
    ids: HashMap<String, BTreeMap<usize, u64>>,
    /// Lines or keys counted in no bucket, by kind.
    pub rejected: BTreeMap<String, u64>,
}

impl Tally {
    /// Counts `rows` of `id` in bucket `bucket`.
    pub fn add(&mut self, id: &str, bucket: usize, rows: u64) {
        let per = match self.ids.get_mut(id) {
            Some(per) => per,
            None => self.ids.entry(id.to_string()).or_default(),
        };
        *per.entry(bucket).or_default() += rows;
    }

    /// Counts one line or key of `kind` that is in no bucket.
    pub fn reject(&mut self, kind: &str) {
        *self.rejected.entry(kind.to_string()).or_default() += 1;
    }

    /// Per id, its rows in each bucket index.
    pub fn ids(&self) -> impl Iterator<Item = (&str, &BTreeMap<usize, u64>)> {
        self.ids.iter().map(|(id, per)| (id.as_str(), per))
    }

    /// Adds every id's rows to its buckets.
    ///
    /// # Panics
    /// If an id was counted in a bucket index `buckets` does not have.
    pub fn fill(&self, buckets: &mut [Bucket]) {
        for per in self.ids.values() {
            for (&b, &rows) in per {
                buckets[b].rows += rows;
            }
        }
    }
}

/// Buckets for the regions that `splits` cut a table into, labelled by their start keys.
pub fn region_buckets(splits: &[Vec<u8>]) -> Vec<Bucket> {
    (0..=splits.len())
        .map(|r| {
            let start = r.checked_sub(1).map_or(String::new(), |p| text(&splits[p]));
            Bucket {
                label: if start.is_empty() {
                    "(start)".into()
                } else {
                    start.clone()
                },
                start,
                end: splits.get(r).map_or(String::new(), |s| text(s)),
                rows: 0,
            }
        })
        .collect()
}

/// Buckets for the regions `splits` cut a table into, labelled `r00`, `r01`, …: the regions
/// of a split the check computed rather than one a user made.
pub fn numbered_region_buckets(splits: &[Vec<u8>]) -> Vec<Bucket> {
    let mut buckets = region_buckets(splits);
    for (r, b) in buckets.iter_mut().enumerate() {
        b.label = format!("r{r:02}");
    }
    buckets
}

/// The region of `key` among the regions `splits` cut a table into.
pub fn region_of(splits: &[Vec<u8>], key: &[u8]) -> usize {
    splits.partition_point(|s| s.as_slice() <= key)
}

/// A row key as printable text.
pub fn text(key: &[u8]) -> String {
    key.escape_ascii().to_string()
}

/// `n − 1` split keys dividing `[lo, hi]` into equal ranges of the 8 bytes after their common
/// prefix, read as a big-endian number (HBase's `UniformSplit`, over the range in use).
pub fn uniform_splits(lo: &[u8], hi: &[u8], n: u32) -> Vec<Vec<u8>> {
    let common = lo.iter().zip(hi).take_while(|(a, b)| a == b).count();
    let word = |k: &[u8]| {
        let mut w = [0u8; 8];
        for (d, s) in w.iter_mut().zip(k.iter().skip(common)) {
            *d = *s;
        }
        u128::from(u64::from_be_bytes(w))
    };
    let (a, b) = (word(lo), word(hi));
    (1..u128::from(n))
        .map(|i| {
            let v = a + (b - a) * i / u128::from(n);
            let mut key = lo[..common].to_vec();
            let bytes = (v as u64).to_be_bytes();
            let len = bytes.iter().rposition(|&x| x != 0).map_or(0, |p| p + 1);
            key.extend_from_slice(&bytes[..len]);
            key
        })
        .collect()
}

/// The report on `buckets` (their rows filled in) and `tally` under `layout`: spread
/// statistics, the hottest prefixes and the verdict against `max_skew`.
///
/// # Errors
/// [`crate::Error::Invalid`] when there are no rows to check.
pub fn report(
    source: String,
    layout: &Layout,
    buckets: Vec<Bucket>,
    tally: Tally,
    max_skew: f64,
    note: String,
) -> crate::Result<LandingReport> {
    let rows: u64 = buckets.iter().map(|b| b.rows).sum();
    if rows == 0 || buckets.is_empty() {
        return Err(crate::Error::Invalid(format!(
            "{source}: no rows to check; give a recording of the table's input, or write one \
             into the table first"
        )));
    }
    let n = buckets.len() as f64;
    let mean = rows as f64 / n;
    let max = buckets.iter().map(|b| b.rows).max().unwrap_or(0) as f64;
    let var = buckets
        .iter()
        .map(|b| (b.rows as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    let max_over_mean = max / mean;
    let mut prefixes: HashMap<&str, (u64, u64, BTreeMap<usize, u64>)> = HashMap::new();
    for (id, per) in &tally.ids {
        let p = prefixes.entry((layout.prefix_of)(id)).or_default();
        p.0 += 1;
        for (&b, &r) in per {
            p.1 += r;
            *p.2.entry(b).or_default() += r;
        }
    }
    let mut hottest: Vec<Prefix> = prefixes
        .into_iter()
        .map(|(prefix, (ids, prefix_rows, per))| {
            let (top, top_rows) = per
                .iter()
                .max_by_key(|(&b, &r)| (r, std::cmp::Reverse(b)))
                .map_or((0, 0), |(&b, &r)| (b, r));
            Prefix {
                prefix: prefix.to_string(),
                entity: layout.entity,
                ids,
                rows: prefix_rows,
                share: prefix_rows as f64 / rows as f64,
                top_bucket: buckets.get(top).map_or(String::new(), |b| b.label.clone()),
                top_bucket_share: top_rows as f64 / prefix_rows.max(1) as f64,
            }
        })
        .collect();
    hottest.sort_by(|a, b| b.rows.cmp(&a.rows).then_with(|| a.prefix.cmp(&b.prefix)));
    hottest.truncate(HOTTEST);
    Ok(LandingReport {
        source,
        table: layout.table,
        scheme: layout.scheme,
        entity: layout.entity,
        buckets,
        rows,
        max_over_mean,
        cv: var.sqrt() / mean,
        hottest_prefixes: hottest,
        max_skew,
        pass: max_over_mean <= max_skew,
        rejected: tally.rejected,
        note,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(rows: u64) -> Bucket {
        Bucket {
            label: String::new(),
            start: String::new(),
            end: String::new(),
            rows,
        }
    }

    fn upto_dash(id: &str) -> &str {
        id.find('-').map_or(id, |i| &id[..=i])
    }

    #[test]
    fn skew_counts_empty_buckets_in_the_mean() {
        let buckets = vec![bucket(30), bucket(10), bucket(0), bucket(0)];
        let mut tally = Tally::default();
        tally.add("a-1", 0, 30);
        tally.add("b-1", 1, 10);
        let layout = Layout {
            table: "t",
            scheme: "salted",
            entity: "device",
            prefix_of: upto_dash,
        };
        let r = report("t".into(), &layout, buckets, tally, 1.5, String::new()).unwrap();
        assert_eq!(r.rows, 40);
        assert!((r.max_over_mean - 3.0).abs() < 1e-12, "{}", r.max_over_mean);
        // mean 10, deviations 20, 0, -10, -10: variance 150.
        assert!((r.cv - 150f64.sqrt() / 10.0).abs() < 1e-12, "{}", r.cv);
        assert!(!r.pass);
        assert_eq!(r.hottest_prefixes[0].prefix, "a-");
        assert_eq!(r.hottest_prefixes[0].share, 0.75);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["hottest_prefixes"][0]["devices"], 1);
    }

    #[test]
    fn nothing_to_check_is_an_error() {
        let layout = Layout {
            table: "t",
            scheme: "plain",
            entity: "user",
            prefix_of: upto_dash,
        };
        let e = report(
            "file x".into(),
            &layout,
            vec![bucket(0)],
            Tally::default(),
            1.5,
            String::new(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("no rows to check"), "{e}");
    }

    #[test]
    fn uniform_splits_are_ordered_and_inside_the_range() {
        let splits = uniform_splits(b"gw00-0000", b"gw15-0019", 16);
        assert_eq!(splits.len(), 15);
        assert!(splits.windows(2).all(|w| w[0] < w[1]), "{splits:?}");
        assert!(splits.iter().all(|s| s.as_slice() > &b"gw00-0000"[..]));
        assert!(splits.iter().all(|s| s.as_slice() <= &b"gw15-0019"[..]));
        let buckets = numbered_region_buckets(&splits);
        assert_eq!(buckets.len(), 16);
        assert_eq!(
            (buckets[0].label.as_str(), buckets[0].start.as_str()),
            ("r00", "")
        );
        assert_eq!(region_of(&splits, b"gw00-0000"), 0);
        assert_eq!(region_of(&splits, b"gw15-0019"), 15);
    }
}
