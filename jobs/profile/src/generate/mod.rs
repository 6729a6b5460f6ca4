//! Realistic tag traffic for the profile job: a registry CSV and JSON Lines tag events, deterministic for a seed.

mod bad;
mod catalog;
mod users;

use std::io::Write;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub use self::catalog::{registry, write_registry_csv};
pub use self::users::MAX_USERS;

use self::catalog::{catalog, GenTag, Values};
use self::users::{mix, user_id, IdStyle, Zipf};
use crate::tag::{TagDef, TagStatus};
use crate::{Error, Result};

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GenerateConfig {
    /// Distinct users, `1..=`[`MAX_USERS`] (default 10,000); the most active get most events.
    pub users: u64,
    /// Events (lines) to write (default 100,000).
    pub events: u64,
    /// The seed: the same seed and settings write the same bytes (default 1).
    pub seed: u64,
    /// Event time of the first event, epoch seconds (default 1796500000, 2026-12-06).
    pub start: i64,
    /// Seconds the events' times cover, rising with the line number; about one event in 20
    /// is up to 10 minutes late (default 86,400).
    pub span_secs: u64,
    /// Share of bad events, `0.0..=1.0` (default 0), spread evenly over the dead-letter kinds.
    pub bad_ratio: f64,
    /// The power law's exponent, `0.1..=3.0` (default 1.0): user of rank r makes events in
    /// proportion to `1 / r^exponent`.
    pub zipf_exponent: f64,
}

impl Default for GenerateConfig {
    fn default() -> Self {
        GenerateConfig {
            users: 10_000,
            events: 100_000,
            seed: 1,
            start: 1_796_500_000,
            span_secs: 86_400,
            bad_ratio: 0.0,
            zipf_exponent: 1.0,
        }
    }
}

impl GenerateConfig {
    /// Checks the settings' ranges.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] naming the setting and its range.
    pub fn validate(&self) -> Result<()> {
        let invalid = |what: String| Err(Error::Invalid(what));
        if !(1..=MAX_USERS).contains(&self.users) {
            return invalid(format!(
                "users must be 1 to {MAX_USERS}, got {}",
                self.users
            ));
        }
        if !(0.0..=1.0).contains(&self.bad_ratio) {
            return invalid(format!("bad ratio must be 0 to 1, got {}", self.bad_ratio));
        }
        if !(0.1..=3.0).contains(&self.zipf_exponent) {
            return invalid(format!(
                "the Zipf exponent must be 0.1 to 3, got {}",
                self.zipf_exponent
            ));
        }
        let last = i64::try_from(self.span_secs)
            .ok()
            .and_then(|span| self.start.checked_add(span));
        if self.start < 0 || last.is_none_or(|t| t > pipeline::json::MAX_TS) {
            return invalid(format!(
                "start {} plus span {} must be epoch seconds within 0..={}",
                self.start,
                self.span_secs,
                pipeline::json::MAX_TS
            ));
        }
        Ok(())
    }
}

/// The tag a probe event ([`EventGenerator::probe_line`]) sets: a `STRING` dimension tag the
/// generated registry does not hold ([`probe_tag`] defines it), so that no drawn event sets it.
pub const PROBE_TAG: &str = "bench_probe";

/// The definition of [`PROBE_TAG`], to import beside [`registry`]'s.
pub fn probe_tag() -> TagDef {
    TagDef {
        tag_code: PROBE_TAG.into(),
        name: "Bench probe".into(),
        data_type: crate::DataType::String,
        value_type: crate::ValueType::Dimension,
        status: TagStatus::Online,
        ttl_secs: None,
        category: "bench".into(),
        owner: "hourglass".into(),
        update_frequency: "realtime".into(),
    }
}

/// What [`EventGenerator::next_line`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// An event every tag of which the registry accepts.
    Good,
    /// An event that is rejected, or one tag of which is, with this
    /// [`crate::RejectReason::kind`].
    Bad(&'static str),
}

/// Events written, and the bad ones by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Lines written.
    pub events: u64,
    /// Bad lines per [`crate::RejectReason::KINDS`] entry, in that order.
    pub bad: [u64; crate::RejectReason::KINDS.len()],
}

/// Most tags a good event carries.
const MAX_TAGS: usize = 8;
/// Exponent of the tags' popularity law: flatter than the users'.
const TAG_ZIPF: f64 = 0.8;

/// The event stream of one [`GenerateConfig`], a line at a time, in O(1) memory.
///
/// Users are drawn by a power law (a few users make most events), with ids shaped as in
/// production (mostly 11-digit mobile numbers sharing their leading digits, then account
/// numbers sent as JSON integers, then other systems' string ids). Each event carries a few
/// tags of the generated registry ([`registry`]), popular tags more often, with values of the
/// tag's type: a user's dimension tags keep their value across events, counts and amounts
/// vary. At [`GenerateConfig::bad_ratio`] an event is bad, of one dead-letter kind
/// ([`crate::RejectReason::KINDS`]).
#[derive(Debug)]
pub struct EventGenerator {
    config: GenerateConfig,
    tags: Vec<GenTag>,
    /// Indexes into `tags` of the online tags, most popular first.
    online: Vec<usize>,
    users: Zipf,
    popular: Zipf,
    rng: ChaCha8Rng,
    next: u64,
    id: String,
    chosen: Vec<usize>,
}

impl EventGenerator {
    /// The generator of `config`'s events.
    ///
    /// # Errors
    ///
    /// As [`GenerateConfig::validate`].
    pub fn new(config: GenerateConfig) -> Result<Self> {
        config.validate()?;
        let tags = catalog();
        let mut online: Vec<usize> = (0..tags.len())
            .filter(|&i| tags[i].def.status == TagStatus::Online)
            .collect();
        // A fixed order, so that the popular tags are of every kind, not the catalog's first.
        online.sort_by_key(|&i| mix(i as u64 ^ 0x7A65_5F74_6167));
        Ok(EventGenerator {
            users: Zipf::new(config.users, config.zipf_exponent),
            popular: Zipf::new(online.len() as u64, TAG_ZIPF),
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            config,
            tags,
            online,
            next: 0,
            id: String::new(),
            chosen: Vec::with_capacity(MAX_TAGS),
        })
    }

    /// Writes the next event into `line` (cleared first; no newline), or returns `None` when
    /// all were written.
    pub fn next_line(&mut self, line: &mut Vec<u8>) -> Option<Line> {
        if self.next >= self.config.events {
            return None;
        }
        let i = self.next;
        self.next += 1;
        line.clear();
        let user = self.users.rank(self.rng.random());
        let style = user_id(self.config.seed, user, &mut self.id);
        let ts = self.event_time(i);
        self.choose_tags();
        let bad = self.config.bad_ratio > 0.0 && self.rng.random_bool(self.config.bad_ratio);
        if bad {
            let kind = self.rng.random_range(0..bad::KINDS_MADE);
            bad::write(self, kind, user, style, ts, line);
            return Some(Line::Bad(crate::RejectReason::KINDS[kind]));
        }
        self.write_event(user, style, ts, line, |_| {});
        Some(Line::Good)
    }

    /// Writes a good event at `ts` into `line` (cleared first; no newline), of a user drawn as
    /// [`EventGenerator::next_line`] draws them, with tags and values drawn as it does; returns
    /// the user's id. For live traffic (`hourglass profile bench-live`), stamped with the wall
    /// clock: the settings' event count, start and span are not used.
    pub fn live_line(&mut self, ts: i64, line: &mut Vec<u8>) -> &str {
        let user = self.users.rank(self.rng.random());
        self.live_event(user, ts, line, |_| {})
    }

    /// Writes a good event at `ts` into `line` as [`EventGenerator::live_line`], of the user of
    /// rank `rank` (below the settings' users; 0 is the most active), carrying [`PROBE_TAG`] =
    /// `value` besides its drawn tags; returns the user's id. `value` is written as a JSON
    /// string as it is: give one without quotes or backslashes.
    pub fn probe_line(&mut self, rank: u64, ts: i64, value: &str, line: &mut Vec<u8>) -> &str {
        self.live_event(rank % self.config.users, ts, line, |line| {
            line.push(b',');
            write_string(line, PROBE_TAG);
            line.push(b':');
            write_string(line, value);
        })
    }

    fn live_event(
        &mut self,
        user: u64,
        ts: i64,
        line: &mut Vec<u8>,
        extra: impl FnOnce(&mut Vec<u8>),
    ) -> &str {
        line.clear();
        let style = user_id(self.config.seed, user, &mut self.id);
        self.choose_tags();
        self.write_event(user, style, ts, line, extra);
        &self.id
    }

    /// The `i`-th event's time: rising evenly over the span, one in 20 up to 10 minutes late.
    fn event_time(&mut self, i: u64) -> i64 {
        let span = self.config.span_secs as f64;
        let on_time = (span * i as f64 / self.config.events.max(1) as f64) as i64;
        let late = if self.rng.random_ratio(1, 20) {
            self.rng.random_range(0..=600)
        } else {
            0
        };
        self.config.start + (on_time - late).max(0)
    }

    /// Picks 1 to [`MAX_TAGS`] distinct online tags into `chosen`, popular ones more often.
    fn choose_tags(&mut self) {
        // 1 to 3 tags mostly, sometimes a batch of up to MAX_TAGS.
        let count = match self.rng.random_range(0..100) {
            0..=34 => 1,
            35..=64 => 2,
            65..=84 => 3,
            _ => self.rng.random_range(4..=MAX_TAGS),
        };
        self.chosen.clear();
        while self.chosen.len() < count {
            let tag = self.online[self.popular.rank(self.rng.random()) as usize];
            if !self.chosen.contains(&tag) {
                self.chosen.push(tag);
            }
        }
        // JSON objects are written ordered by code, as most producers' serializers do not
        // promise; it keeps the lines comparable by eye.
        let tags = &self.tags;
        self.chosen
            .sort_unstable_by(|&a, &b| tags[a].def.tag_code.cmp(&tags[b].def.tag_code));
    }

    /// Writes the event of `user` at `ts` with the chosen tags, then calls `extra` to add
    /// tags (each written `,"code":value`) before the closing braces.
    fn write_event(
        &mut self,
        user: u64,
        style: IdStyle,
        ts: i64,
        line: &mut Vec<u8>,
        extra: impl FnOnce(&mut Vec<u8>),
    ) {
        line.extend_from_slice(b"{\"user_id\":");
        self.write_user(style, line);
        // Writing to a Vec cannot fail.
        let _ = write!(line, ",\"ts\":{ts}");
        line.extend_from_slice(b",\"tags\":{");
        for n in 0..self.chosen.len() {
            if n > 0 {
                line.push(b',');
            }
            let tag = self.chosen[n];
            write_string(line, &self.tags[tag].def.tag_code);
            line.push(b':');
            self.write_value(user, tag, line);
        }
        extra(line);
        line.extend_from_slice(b"}}");
    }

    /// The user id as JSON: an account number as an integer, in one event of four as a string.
    fn write_user(&mut self, style: IdStyle, line: &mut Vec<u8>) {
        if style == IdStyle::Account && !self.rng.random_ratio(1, 4) {
            line.extend_from_slice(self.id.as_bytes());
        } else {
            write_string(line, &self.id);
        }
    }

    /// A value of tag `tag` for user `user`. Dimension values are the user's own (the same in
    /// every event); the others are drawn.
    fn write_value(&mut self, user: u64, tag: usize, line: &mut Vec<u8>) {
        let values = self.tags[tag].values;
        if self.tags[tag].def.value_type == crate::ValueType::Dimension {
            let own = mix(self.config.seed ^ mix(user) ^ mix(tag as u64));
            write_value(&mut ChaCha8Rng::seed_from_u64(own), values, line);
        } else {
            write_value(&mut self.rng, values, line);
        }
    }
}

/// A value of `values` as JSON.
fn write_value(rng: &mut impl Rng, values: Values, line: &mut Vec<u8>) {
    // Writing to a Vec cannot fail.
    let _ = match values {
        Values::Bool(p) => write!(line, "{}", rng.random_bool(p)),
        // u^3: most counts small, a few large.
        Values::Count(max) => write!(
            line,
            "{}",
            (max as f64 * rng.random::<f64>().powi(3)) as i64
        ),
        Values::Range(min, max) => write!(line, "{}", rng.random_range(min..=max)),
        Values::Amount(max) => write!(line, "{:.2}", max * rng.random::<f64>().powi(2)),
        Values::Ratio => write!(line, "{:.4}", rng.random::<f64>()),
        Values::Choice(words) => {
            write_string(line, words[rng.random_range(0..words.len())]);
            Ok(())
        }
        Values::Multi(words, most) => {
            let count = rng.random_range(1..=most.min(words.len()));
            let start = rng.random_range(0..words.len());
            line.push(b'[');
            for n in 0..count {
                if n > 0 {
                    line.push(b',');
                }
                write_string(line, words[(start + n) % words.len()]);
            }
            line.push(b']');
            Ok(())
        }
    };
}

/// `s` as a JSON string. The catalog's words and the ids need no escapes (a test checks
/// that every line decodes); anything else is escaped by serde_json.
fn write_string(line: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        line.push(b'"');
        line.extend_from_slice(s.as_bytes());
        line.push(b'"');
    } else {
        // Writing to a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *line, s);
    }
}

/// Writes every event of `generator`, a line each, to `out`, and counts them.
///
/// # Errors
///
/// The writer's error.
pub fn write_events<W: Write>(
    mut generator: EventGenerator,
    mut out: W,
) -> std::io::Result<Summary> {
    let mut summary = Summary::default();
    let mut line = Vec::with_capacity(512);
    while let Some(kind) = generator.next_line(&mut line) {
        line.push(b'\n');
        out.write_all(&line)?;
        summary.events += 1;
        if let Line::Bad(kind) = kind {
            if let Some(k) = crate::RejectReason::KINDS.iter().position(|&k| k == kind) {
                summary.bad[k] += 1;
            }
        }
    }
    out.flush()?;
    Ok(summary)
}

#[cfg(test)]
mod tests;
