//! The short-term tags' store: Redis when configured, else a SQLite file, behind one batched trait.

mod redis;
mod sqlite;

use std::path::Path;

use crate::merge::ShortTermValue;
use crate::Result;

pub use self::redis::{Migrated, RedisStore};
pub use self::sqlite::SqliteStore;

/// Where the short-term tags are kept when no `[redis]` is configured: a SQLite file beside
/// the embedded store's default directory, relative to the working directory.
pub const DEFAULT_EMBEDDED_PATH: &str = "./hourglass-data/short_term.sqlite";

/// The Redis key of a user's short-term tags: the hash `short-tags:{user}`, one field per tag
/// code ([`encode_field`]). A prefix of its own: a user id may hold `:`, so a key
/// `short:{user}` could be a key of the layout before ([`parse_old_key`]).
pub fn key(user: &str) -> String {
    format!("short-tags:{user}")
}

/// `(user, code)` of a key of the layout before the hashes, `short:{user}:{code}` (one string
/// key a value); `None` for another key. Codes hold no `:`, user ids may.
pub fn parse_old_key(key: &str) -> Option<(&str, &str)> {
    let (user, code) = key.strip_prefix("short:")?.rsplit_once(':')?;
    (!user.is_empty() && !code.is_empty()).then_some((user, code))
}

/// A value as a field of the user's hash: `{expires_at} {ts} {json}` (epoch seconds, the
/// event time, the value's JSON). Redis 7.0 expires keys, not fields, so each field carries
/// its expiry; the event time decides which of two values stays.
pub fn encode_field(expires_at: i64, ts: i64, json: &str) -> String {
    format!("{expires_at} {ts} {json}")
}

/// `(expires_at, ts, json)` of a field written by [`encode_field`]; `None` for another text.
pub fn decode_field(field: &str) -> Option<(i64, i64, &str)> {
    let mut parts = field.splitn(3, ' ');
    let expires_at = parts.next()?.parse().ok()?;
    let ts = parts.next()?.parse().ok()?;
    Some((expires_at, ts, parts.next()?))
}

/// The values of `codes` among a user's hash `fields` (`(code, field)`), live at `now`, as
/// `(code, JSON)` in the order of `codes`. A field that [`decode_field`] cannot read (not
/// written by us) is given whole: what is stored is shown, never dropped.
pub fn live(fields: Vec<(String, String)>, codes: &[&str], now: i64) -> Vec<(String, String)> {
    let mut fields: std::collections::HashMap<String, String> = fields.into_iter().collect();
    codes
        .iter()
        .filter_map(|&code| {
            let field = fields.remove(code)?;
            let json = match decode_field(&field) {
                Some((at, _, _)) if at <= now => return None,
                Some((_, _, json)) => json.to_string(),
                None => field,
            };
            Some((code.to_string(), json))
        })
        .collect()
}

/// What a [`ShortTermStore::write_batch`] did with its values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Values sent to the store (kept there unless a value with a newer event time was).
    pub written: usize,
    /// Values not written: expired at their event time plus TTL before `now`.
    pub expired: usize,
}

/// The epoch second a value written at `now` expires at: its event time plus its TTL, or
/// `now` plus its TTL for an event from the future (a producer's clock ahead does not make a
/// value outlive its TTL). `None` when that is not after `now`, or the TTL is 0 (which a
/// checked tag never has).
pub fn expires_at(value: &ShortTermValue, now: i64) -> Option<i64> {
    let ttl = i64::try_from(value.ttl_secs).ok().filter(|&t| t > 0)?;
    let at = value.ts.min(now).checked_add(ttl)?;
    (at > now).then_some(at)
}

/// A store of short-term tag values, written and read in batches (one round trip a call).
///
/// A value lives `ttl_secs` counted from its event time, not from its write: a value written
/// late lives only what is left of its life, and one already expired at its event time plus
/// TTL is not written at all. Of two values of one (user, tag), the one with the newer event
/// time stays, whatever the order of the writes (a late event in a later flush does not
/// replace a newer value), as HBase keeps the newest cell of the other tags.
///
/// Implementations: [`RedisStore`] (a hash a user, `short-tags:{user}`, a field a tag holding
/// the value's JSON with its expiry and event time) and [`SqliteStore`] (the same semantics in
/// one local table).
pub trait ShortTermStore: std::fmt::Debug + Send {
    /// Writes a flush's values (at most one per user and tag, as
    /// [`crate::UserMerge::flush`] makes them), each living until its event time plus TTL,
    /// `now` being the current epoch second. Expired values are counted, not written. A stored
    /// value with a newer event time is kept.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Redis`] or [`crate::Error::Sqlite`]; [`is_retriable`] tells whether
    /// writing the batch again may succeed. A failed batch may have been written in part: a
    /// retry writes the same values again, which changes nothing.
    fn write_batch(&mut self, values: &[ShortTermValue], now: i64) -> Result<Written>;

    /// The live values of `codes` for each of `users` at `now`: per user, in the order of
    /// `users`, its `(code, JSON value)` pairs in the order of `codes`, the missing and
    /// expired ones left out.
    ///
    /// The caller names the codes (the registry's short-term tags): a value of a tag the
    /// registry no longer has is not returned.
    ///
    /// # Errors
    ///
    /// As [`ShortTermStore::write_batch`].
    fn read_users(
        &mut self,
        users: &[&str],
        codes: &[&str],
        now: i64,
    ) -> Result<Vec<Vec<(String, String)>>>;

    /// One user's live values: [`ShortTermStore::read_users`] for one user.
    ///
    /// # Errors
    ///
    /// As [`ShortTermStore::read_users`].
    fn read_user(&mut self, user: &str, codes: &[&str], now: i64) -> Result<Vec<(String, String)>> {
        Ok(self
            .read_users(&[user], codes, now)?
            .pop()
            .unwrap_or_default())
    }

    /// Where the values are, for messages: the Redis URL without its password, or the file.
    fn location(&self) -> String;
}

/// Opens the short-term store: Redis at `redis_url` when given, else the SQLite file
/// `embedded_path` (created with its directory; [`DEFAULT_EMBEDDED_PATH`] by default).
///
/// # Errors
///
/// [`crate::Error::Redis`] when the URL is invalid or Redis cannot be reached;
/// [`crate::Error::Io`] or [`crate::Error::Sqlite`] when the file cannot be opened.
pub fn open(redis_url: Option<&str>, embedded_path: &Path) -> Result<Box<dyn ShortTermStore>> {
    match redis_url {
        Some(url) => Ok(Box::new(RedisStore::connect(url)?)),
        None => Ok(Box::new(SqliteStore::open(embedded_path)?)),
    }
}

/// Moves the values of the layout before the hashes (`short:{user}:{code}`) into the hashes
/// of the Redis of `cfg`'s `[redis]` ([`RedisStore::migrate`]), each value's TTL taken from
/// `cfg`'s registry, `now` being the current epoch second: `hourglass profile
/// migrate-short-term`.
///
/// # Errors
///
/// [`crate::Error::Invalid`] without `[redis]` (the SQLite store had no old layout); the
/// registry cannot be read; as [`RedisStore::migrate`].
pub fn migrate(cfg: &crate::ProfileConfig, now: i64) -> Result<Migrated> {
    let Some(url) = cfg.redis_url() else {
        return Err(crate::Error::Invalid(
            "no [redis] in the configuration: the short-term tags are in the SQLite file, \
             which has nothing to migrate"
                .into(),
        ));
    };
    let defs = crate::registry::open(&cfg.registry.url)?.list()?;
    let ttl_of = |code: &str| {
        defs.iter()
            .find(|d| d.tag_code == code && d.value_type == crate::ValueType::ShortTerm)
            .and_then(|d| d.ttl_secs)
    };
    RedisStore::connect(url)?.migrate(&ttl_of, now)
}

/// Whether an error of a short-term store may pass if the same call is made again: a lost,
/// refused or timed-out Redis connection (the store reconnects on the next call), Redis
/// loading its data or its script cache flushed, a busy or locked SQLite file. A refused
/// command, a bad URL or a full disk is not.
pub fn is_retriable(error: &crate::Error) -> bool {
    match error {
        crate::Error::Redis { source, .. } => self::redis::is_retriable(source),
        crate::Error::Sqlite { source, .. } => matches!(
            source.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::CellValue;

    fn value(ts: i64, ttl_secs: u64) -> ShortTermValue {
        ShortTermValue {
            user: "10086".into(),
            code: "rt_last_cat".into(),
            ts,
            value: CellValue::String("beauty".into()),
            ttl_secs,
        }
    }

    #[test]
    fn the_ttl_counts_from_the_event_time() {
        let left = |ts, ttl, now| expires_at(&value(ts, ttl), now).map(|at| at - now);
        assert_eq!(left(1000, 3600, 1000), Some(3600));
        assert_eq!(left(1000, 3600, 4000), Some(600));
        assert_eq!(left(1000, 3600, 4599), Some(1));
        assert_eq!(left(1000, 3600, 4600), None, "expired");
        assert_eq!(left(1000, 3600, 9000), None);
        assert_eq!(left(1000, 0, 1000), None, "no TTL: none");
        assert_eq!(
            left(5000, 60, 1000),
            Some(60),
            "from the future: its TTL from now"
        );
        assert_eq!(expires_at(&value(i64::MAX, u64::MAX), 0), None);
        assert_eq!(expires_at(&value(0, 60), i64::MAX - 1), None);
    }

    #[test]
    fn fields_and_keys_read_back() {
        assert_eq!(key("10086"), "short-tags:10086");
        assert_eq!(
            parse_old_key("short:10086:rt_last_cat"),
            Some(("10086", "rt_last_cat"))
        );
        assert_eq!(
            parse_old_key("short:a:b:rt_x"),
            Some(("a:b", "rt_x")),
            "a user id may hold ':'"
        );
        for other in [
            "short-tags:10086",
            "short:10086",
            "short::rt_x",
            "short:u:",
            "x:u:c",
        ] {
            assert_eq!(parse_old_key(other), None, "{other}");
        }
        let field = encode_field(1_800_000_000, -5, r#"{"a": "b c"}"#);
        assert_eq!(field, r#"1800000000 -5 {"a": "b c"}"#);
        assert_eq!(
            decode_field(&field),
            Some((1_800_000_000, -5, r#"{"a": "b c"}"#))
        );
        for other in ["", "12", "12 x {}", "x 12 {}", "\"beauty\""] {
            assert_eq!(decode_field(other), None, "{other}");
        }
    }

    #[test]
    fn live_values_are_the_asked_unexpired_fields_in_the_order_asked() {
        let fields = vec![
            ("rt_a".to_string(), encode_field(100, 10, "1")),
            ("rt_b".to_string(), encode_field(50, 10, "2")),
            ("rt_c".to_string(), "\"foreign\"".to_string()),
            ("rt_gone".to_string(), encode_field(100, 10, "3")),
        ];
        let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(c, v)| ((*c).to_string(), (*v).to_string()))
                .collect()
        };
        assert_eq!(
            live(fields.clone(), &["rt_c", "rt_b", "rt_a", "rt_x"], 49),
            pairs(&[("rt_c", "\"foreign\""), ("rt_b", "2"), ("rt_a", "1")])
        );
        assert_eq!(
            live(fields, &["rt_a", "rt_b"], 50),
            pairs(&[("rt_a", "1")]),
            "expired at its expiry"
        );
    }
}
