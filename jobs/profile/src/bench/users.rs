//! The benchmark's users: the ids of a populated store in rank order, and a Zipf law over the
//! ranks.

use std::io::{BufRead, BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use rand::Rng;
use sinks::table::{ScanSpec, TableReader};

use crate::key::parse_profile_row;
use crate::tables::PROFILE_TABLE;
use crate::{Error, Result};

/// Rows one scan call of the id listing returns.
const SCAN_PAGE: usize = 10_000;

/// The first `want` user ids of `user_profile_tag` in row-key order, which the MD5 salt makes
/// unrelated to the ids and to the users' activity, so rank `r` is the `r`-th of them.
/// Read page by page (the rows' cells are read too: a scan has no key-only form), with a
/// progress line on stderr every 5 s.
///
/// # Errors
/// A store error; [`Error::Invalid`] when the table holds no profile (naming the command
/// that fills it).
pub fn scan_users(store: &dyn TableReader, want: usize, location: &str) -> Result<Vec<String>> {
    let started = Instant::now();
    let mut said = Instant::now();
    let mut ids = Vec::with_capacity(want.min(10_000_000));
    let mut start = Vec::new();
    loop {
        let spec = ScanSpec {
            start: start.clone(),
            limit: Some(SCAN_PAGE.min(want - ids.len())),
            ..ScanSpec::default()
        };
        let rows = store.scan(PROFILE_TABLE, &spec)?;
        let page = rows.len();
        for row in &rows {
            if let Some(user) = parse_profile_row(&row.key) {
                ids.push(user.to_string());
            }
        }
        let Some(last) = rows.last() else { break };
        if page < spec.limit.unwrap_or(0) || ids.len() >= want {
            break;
        }
        start = last.key.clone();
        start.push(0);
        if said.elapsed().as_secs() >= 5 {
            said = Instant::now();
            eprintln!(
                "bench profile: listing users of {location}: {} so far ({:.0} s)",
                ids.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    if ids.is_empty() {
        return Err(Error::Invalid(format!(
            "{PROFILE_TABLE} in {location} holds no profile: populate it first, e.g. \
             `hourglass profile replay EVENTS.jsonl --config CONFIG` with the same --store or --hbase"
        )));
    }
    Ok(ids)
}

/// Reads user ids from `path`, one a line, hottest first.
///
/// # Errors
/// [`Error::Io`]; [`Error::Invalid`] for an empty file.
pub fn read_users(path: &Path) -> Result<Vec<String>> {
    let io = |source| Error::Io {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut ids = Vec::new();
    for line in std::io::BufReader::new(file).lines() {
        let line = line.map_err(io)?;
        let id = line.trim();
        if !id.is_empty() {
            ids.push(id.to_string());
        }
    }
    if ids.is_empty() {
        return Err(Error::Invalid(format!(
            "{} lists no user id (one a line expected)",
            path.display()
        )));
    }
    Ok(ids)
}

/// Writes `ids` to `path`, one a line, for a peer that reads the same users.
///
/// # Errors
/// [`Error::Io`].
pub fn write_users(path: &Path, ids: &[String]) -> Result<()> {
    let io = |source| Error::Io {
        path: path.display().to_string(),
        source,
    };
    let mut out = BufWriter::new(std::fs::File::create(path).map_err(io)?);
    for id in ids {
        writeln!(out, "{id}").map_err(io)?;
    }
    out.flush().map_err(io)
}

/// The discrete Zipf law over ranks `0..n`: rank `r` drawn with probability
/// `(r + 1)^-s / H(n, s)`, exactly (a cumulative table, 8 bytes a rank, and a binary search a
/// draw), so that a peer in another language draws the same law (`bench/profile-python`).
#[derive(Debug, Clone)]
pub struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    /// The law over `n` ranks (at least 1) with exponent `s`.
    pub fn new(n: usize, s: f64) -> Self {
        let mut sum = 0.0;
        let mut cumulative: Vec<f64> = (1..=n.max(1))
            .map(|k| {
                sum += (k as f64).powf(-s);
                sum
            })
            .collect();
        for c in &mut cumulative {
            *c /= sum;
        }
        Zipf { cumulative }
    }

    /// One rank.
    pub fn draw(&self, rng: &mut impl Rng) -> usize {
        let u: f64 = rng.random();
        self.cumulative
            .partition_point(|&c| c <= u)
            .min(self.cumulative.len() - 1)
    }

    /// The probability that a draw falls among the `k` first ranks: the hit ratio of a cache
    /// that holds exactly them.
    pub fn mass_of_top(&self, k: usize) -> f64 {
        match k {
            0 => 0.0,
            k => self.cumulative[k.min(self.cumulative.len()) - 1],
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn the_law_is_zipfs() {
        let z = Zipf::new(1_000_000, 1.1);
        // H(1e5, 1.1) / H(1e6, 1.1): the top tenth holds ~92 % of the draws.
        let top = z.mass_of_top(100_000);
        assert!((0.91..0.93).contains(&top), "{top}");
        assert!(
            (z.mass_of_top(1) - 1.0 / 8.08).abs() < 0.01,
            "{}",
            z.mass_of_top(1)
        );
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let n = 200_000;
        let hot = (0..n).filter(|_| z.draw(&mut rng) < 100_000).count();
        assert!(((hot as f64 / n as f64) - top).abs() < 0.005);
        assert_eq!(Zipf::new(1, 1.1).draw(&mut rng), 0);
    }

    #[test]
    fn ids_round_trip_through_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users.txt");
        let ids: Vec<String> = ["10086", "13800138000", "a.b"].map(String::from).into();
        write_users(&path, &ids).unwrap();
        assert_eq!(read_users(&path).unwrap(), ids);
        std::fs::write(&path, "\n").unwrap();
        assert!(read_users(&path).is_err());
    }
}
