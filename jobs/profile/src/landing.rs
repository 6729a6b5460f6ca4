//! `hourglass tables landing-check --table user_profile_tag`: how evenly the users' rows spread
//! over the table's regions, under the MD5-salted keys the job writes or under plain user-id
//! keys, predicted from a recording of tag events or counted in a live HBase table.
//!
//! A user is one row (`key.rs`), so a region's rows are its users. Under plain keys, ids that
//! share their leading digits (mobile numbers on a few carrier prefixes, sequential account
//! numbers) sort next to each other, and a split over the id range gives a few regions most
//! users: the hot spot the salt exists to avoid.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pipeline::source::replay::input::{self, LineReader};
use sinks::hbase::HbaseConfig;
use sinks::landing::{
    count_regions, numbered_region_buckets, region_buckets, region_of, report, uniform_splits,
    LandingReport, Layout, Tally,
};

use crate::event::{decode_event, EventLimits};
use crate::key::parse_profile_row;
use crate::tables::{profile_table, PROFILE_TABLE, REGIONS};
use crate::{Error, ProfileConfig, Result};

/// How long the check retries an unreachable HBase, as the other interactive commands.
const RETRY: Duration = Duration::from_secs(60);

/// Digits of an all-digit id that name its range: a mobile number's carrier prefix (`138`),
/// an account number's first thousandth of the range.
const NUMBER_PREFIX: usize = 3;

/// The row keys to predict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// `<md5 hex:4><user>` over the table's split (`tables create`'s 16 regions).
    Salted,
    /// `<user>`, over regions split evenly over the recording's id range.
    Plain,
}

/// What to check, as `hourglass tables landing-check` parses it for `user_profile_tag`.
#[derive(Debug, Clone)]
pub struct LandingArgs {
    /// A recording of tag events (JSON Lines, `.gz`/`.zst` allowed); `None` with `hbase`.
    pub file: Option<PathBuf>,
    /// Count the rows of the live table per region instead, through the HBase Thrift1 gateway
    /// at this `HOST:PORT`.
    pub hbase: Option<String>,
    /// The keys to predict, for a file.
    pub keys: Keys,
    /// Regions of the plain keys' split, for a file [`REGIONS`] unless given.
    pub regions: Option<u32>,
    /// Largest acceptable max ÷ mean rows per region.
    pub max_skew: f64,
    /// Profile job configuration (TOML): event limits, `[store.hbase_client]` for HBase.
    pub config: Option<PathBuf>,
}

/// The prefix a user id shares with its number range or id system: up to and including its
/// last `-`, `:` or `.` (`u-`, `anon:`), else the first three digits of an all-digit id (a
/// mobile number's carrier prefix, `138`), else the id.
pub fn user_prefix(user: &str) -> &str {
    if let Some(i) = user.rfind(['-', ':', '.']) {
        return &user[..=i];
    }
    if user.len() > NUMBER_PREFIX && user.bytes().all(|b| b.is_ascii_digit()) {
        return &user[..NUMBER_PREFIX];
    }
    user
}

fn layout(keys: Keys) -> Layout {
    Layout {
        table: PROFILE_TABLE,
        scheme: match keys {
            Keys::Salted => "md5-salted",
            Keys::Plain => "plain",
        },
        entity: "user",
        prefix_of: user_prefix,
    }
}

/// Runs the check: the spread of a recording's users, or of the live table's rows.
///
/// # Errors
/// An unreadable file or config, an unreachable HBase, a bad number of regions, or no user to
/// check.
pub fn check(args: &LandingArgs) -> Result<LandingReport> {
    let cfg = match &args.config {
        Some(path) => ProfileConfig::load(path)?,
        None => ProfileConfig::default(),
    };
    match (&args.file, &args.hbase) {
        (Some(file), _) => {
            let regions = args.regions.unwrap_or(REGIONS);
            if !(1..=1000).contains(&regions) {
                return Err(Error::Invalid(format!(
                    "--buckets must be 1..=1000, got {regions}"
                )));
            }
            from_file(file, &cfg.limits, args.keys, regions, args.max_skew)
        }
        (None, Some(addr)) => from_hbase(&cfg, addr, args.max_skew),
        (None, None) => Err(Error::Invalid(
            "give a recording FILE or --hbase HOST:PORT".into(),
        )),
    }
}

/// The users of a recording of tag events, and its refused lines by kind.
fn users_of(file: &Path, limits: &EventLimits, tally: &mut Tally) -> Result<BTreeSet<String>> {
    let io = |source| Error::Io {
        path: file.display().to_string(),
        source,
    };
    let reader = input::open(file, None).map_err(|e| Error::Invalid(e.to_string()))?;
    let mut lines = LineReader::new(reader);
    let mut buf = Vec::new();
    let mut users = BTreeSet::new();
    while let Some(line) = lines.next_line(&mut buf).map_err(io)? {
        match decode_event(line.number, &line.bytes, limits) {
            Ok(event) => {
                users.insert(event.user_id);
            }
            Err(rejected) => tally.reject(rejected.reason.kind()),
        }
    }
    Ok(users)
}

/// Predicts the rows of `user_profile_tag` per region from the users of `file`.
fn from_file(
    file: &Path,
    limits: &EventLimits,
    keys: Keys,
    regions: u32,
    max_skew: f64,
) -> Result<LandingReport> {
    let mut tally = Tally::default();
    let users = users_of(file, limits, &mut tally)?;
    let (mut buckets, note) = match keys {
        Keys::Salted => {
            let spec = profile_table();
            for user in &users {
                tally.add(user, spec.region_of(user), 1);
            }
            let note = format!(
                "md5-salted: one row per user, `<md5 hex:4><user>`, over the {} regions \
                 `tables create` pre-splits on the salt",
                spec.split_keys.len() + 1
            );
            (region_buckets(&spec.split_keys), note)
        }
        Keys::Plain => {
            let (lo, hi) = match (users.first(), users.last()) {
                (Some(lo), Some(hi)) => (lo.as_bytes(), hi.as_bytes()),
                _ => (&b""[..], &b""[..]),
            };
            let splits = uniform_splits(lo, hi, regions);
            for user in &users {
                tally.add(user, region_of(&splits, user.as_bytes()), 1);
            }
            let note = format!(
                "plain: one row per user keyed by the id alone, over {regions} regions split \
                 uniformly over the recording's id range (from its first to its last id, as \
                 HBase's UniformSplit)"
            );
            (numbered_region_buckets(&splits), note)
        }
    };
    tally.fill(&mut buckets);
    Ok(report(
        format!("file {}", file.display()),
        &layout(keys),
        buckets,
        tally,
        max_skew,
        note,
    )?)
}

/// Counts the live table's rows per region at `addr`.
fn from_hbase(cfg: &ProfileConfig, addr: &str, max_skew: f64) -> Result<LandingReport> {
    let mut store = cfg.store.clone();
    store.hbase = Some(addr.to_string());
    let mut hb = HbaseConfig::from_store(&store)?;
    hb.retry.max_elapsed = Some(RETRY);
    let (buckets, tally) = count_regions(&hb, PROFILE_TABLE, |key| {
        parse_profile_row(key).map(str::to_string)
    })?;
    let unparsed = tally.rejected.get("key").copied().unwrap_or(0);
    let note = format!(
        "hbase: {} regions of {PROFILE_TABLE} from getTableRegions, every row counted by a scan \
         of each region's range; {unparsed} keys that are not `<md5 hex:4><user>` are counted \
         in their region but in no prefix",
        buckets.len()
    );
    Ok(report(
        format!("hbase {addr} table {PROFILE_TABLE}"),
        &layout(Keys::Salted),
        buckets,
        tally,
        max_skew,
        note,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_number_ranges_or_id_systems() {
        assert_eq!(user_prefix("13812345678"), "138");
        assert_eq!(user_prefix("100123456"), "100");
        assert_eq!(user_prefix("u-0aca8e3c3f9c"), "u-");
        assert_eq!(user_prefix("anon:0aca8e3c3f9c"), "anon:");
        assert_eq!(user_prefix("007"), "007");
        assert_eq!(user_prefix("alice"), "alice");
    }

    #[test]
    fn phone_numbers_crowd_plain_regions_and_spread_under_the_salt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut text = String::from("not json\n");
        for i in 0..2000u64 {
            let prefix = if i % 4 == 0 { "139" } else { "138" };
            text.push_str(&format!(
                "{{\"user_id\":\"{prefix}{:08}\",\"ts\":1796400000,\"tags\":{{}}}}\n",
                i * 7919 % 100_000_000
            ));
        }
        text.push_str("{\"user_id\":\"u-000000000001\",\"ts\":1796400000,\"tags\":{}}\n");
        std::fs::write(&path, text).unwrap();
        let limits = EventLimits::default();
        let plain = from_file(&path, &limits, Keys::Plain, 16, 1.5).unwrap();
        let salted = from_file(&path, &limits, Keys::Salted, 16, 1.5).unwrap();
        assert_eq!((plain.rows, salted.rows), (2001, 2001));
        assert_eq!(plain.rejected.get("invalid_json"), Some(&1));
        assert!(plain.max_over_mean > 10.0, "{}", plain.max_over_mean);
        assert!(!plain.pass);
        assert!(salted.max_over_mean < 1.5, "{}", salted.max_over_mean);
        assert!(salted.pass);
        assert_eq!(plain.hottest_prefixes[0].prefix, "138");
        assert_eq!(plain.hottest_prefixes[0].ids, 1500);
        assert_eq!(salted.buckets.len(), REGIONS as usize);
    }
}
