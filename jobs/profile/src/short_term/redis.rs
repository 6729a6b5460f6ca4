//! The short-term tags in Redis: one hash `short-tags:{user}` a user, written by one pipeline a
//! batch and read by one pipeline of `HGETALL`s.

use redis::{Client, Connection, ErrorKind, ServerErrorKind};

use super::{encode_field, expires_at, key, live, parse_old_key, ShortTermStore, Written};
use crate::merge::ShortTermValue;
use crate::registry::redact;
use crate::{Error, Result};

/// How long connecting, and each reply, may take before the call fails (retriably): a flush
/// must not hang on a Redis that stopped answering.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Writes fields of the hash `KEYS[1]` (a user's short-term tags) at `ARGV[1]`, the writer's
/// epoch second: `ARGV[2], ARGV[3]` is a field (tag code) and its value
/// ([`super::encode_field`]: `{expires_at} {ts} {json}`), and so on.
///
/// First drops the fields expired at `now`; then sets each field unless it holds a value of a
/// newer event time (the same event time: the later write); then makes the key expire with
/// its latest field. A field whose value does not parse (not written by us) counts as older
/// than any, and has no say in the key's expiry. Returns the fields set.
const WRITE_NEWEST: &str = "\
local now = tonumber(ARGV[1])
local function parse(v)
  local e, t = string.match(v, '^(%-?%d+) (%-?%d+) ')
  return tonumber(e), tonumber(t)
end
local exp, ts, dead = {}, {}, {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local e, t = parse(all[i + 1])
  if e and e <= now then
    dead[#dead + 1] = all[i]
  elseif e then
    exp[all[i]], ts[all[i]] = e, t
  end
end
for i = 1, #dead, 500 do
  redis.call('HDEL', KEYS[1], unpack(dead, i, math.min(i + 499, #dead)))
end
local set = 0
for i = 2, #ARGV, 2 do
  local e, t = parse(ARGV[i + 1])
  if ts[ARGV[i]] == nil or t >= ts[ARGV[i]] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    exp[ARGV[i]], ts[ARGV[i]] = e, t
    set = set + 1
  end
end
local latest = 0
for _, e in pairs(exp) do
  if e > latest then latest = e end
end
if latest > now then redis.call('EXPIREAT', KEYS[1], latest) end
return set";

/// The short-term tags in a Redis server (or a Redis-protocol one: Valkey, KeyDB).
///
/// A user's values are the fields of one hash, `short-tags:{user}` (field: the tag code; value:
/// `{expires_at} {ts} {json}`, [`super::encode_field`]), which expires with its latest field.
/// A write is one call of a small Lua script per user of the batch ([`WRITE_NEWEST`]: keeps a
/// value of a newer event time, drops the expired fields), all of a batch's calls in one
/// pipeline: one round trip per flush. A read is one `HGETALL` per user, in one pipeline, each
/// field's own expiry checked (a field outlives its TTL in the hash until the next write or the
/// key's expiry, and is never returned). Redis 7.0 has no expiry per hash field (`HEXPIRE` is
/// 7.4), hence the expiry inside the value.
///
/// The script is loaded once per connection (`SCRIPT LOAD`) and called by its digest. A lost
/// connection is dropped and made again on the next call.
pub struct RedisStore {
    client: Client,
    conn: Option<(Connection, String)>,
    url: String,
}

/// What [`RedisStore::migrate`] did with the keys of the layout before the hashes,
/// `short:{user}:{code}` (one key a value).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Migrated {
    /// Old keys seen.
    pub found: u64,
    /// Moved into their user's hash (kept there unless it held a newer value) and deleted.
    pub moved: u64,
    /// Already expired or gone when read: left to Redis.
    pub expired: u64,
    /// Of a code the registry has no short-term tag of (its TTL, hence its event time, is not
    /// known): left as they are, to expire by themselves.
    pub unknown_tag: u64,
    /// Not a value of ours (not a string, no expiry, or not `short:{user}:{code}`): left.
    pub not_ours: u64,
}

impl RedisStore {
    /// Connects to `url` (`redis://[:password@]host:port/db`).
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when the URL is invalid or the server cannot be reached (then
    /// [`super::is_retriable`]).
    pub fn connect(url: &str) -> Result<Self> {
        let shown = redact(url);
        let client = Client::open(url).map_err(|source| Error::Redis {
            url: shown.clone(),
            source,
        })?;
        let mut store = Self {
            client,
            conn: None,
            url: shown,
        };
        store.connection()?;
        Ok(store)
    }

    /// The open connection and the script's digest, connecting first if there is none.
    fn connection(&mut self) -> Result<&mut (Connection, String)> {
        let open = match self.conn.take() {
            Some(open) => open,
            None => open_connection(&self.client).map_err(|source| self.error(source))?,
        };
        Ok(self.conn.insert(open))
    }

    fn error(&self, source: redis::RedisError) -> Error {
        Error::Redis {
            url: self.url.clone(),
            source,
        }
    }

    /// Runs `f` on the connection; on a failure after which the connection may be unusable,
    /// drops it so that the next call connects again.
    fn with_connection<T>(
        &mut self,
        f: impl FnOnce(&mut Connection, &str) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let (conn, sha) = self.connection()?;
        let result = f(conn, sha);
        result.map_err(|source| {
            if is_retriable(&source) {
                self.conn = None;
            }
            self.error(source)
        })
    }

    /// Sets `fields` (`(user, code, encoded value)`, a user's fields next to each other) with
    /// [`WRITE_NEWEST`] at `now`, then deletes `delete`: one pipeline.
    fn write_fields(
        &mut self,
        fields: &[(&str, &str, String)],
        now: i64,
        delete: &[String],
    ) -> Result<()> {
        if fields.is_empty() && delete.is_empty() {
            return Ok(());
        }
        self.with_connection(|conn, sha| {
            let mut pipe = redis::pipe();
            for user in fields.chunk_by(|a, b| a.0 == b.0) {
                let call = pipe
                    .cmd("EVALSHA")
                    .arg(sha)
                    .arg(1)
                    .arg(key(user[0].0))
                    .arg(now);
                for (_, code, value) in user {
                    call.arg(code).arg(value);
                }
                call.ignore();
            }
            if !delete.is_empty() {
                pipe.cmd("DEL").arg(delete).ignore();
            }
            pipe.exec(conn)
        })
    }

    /// Moves the values of the layout before the hashes (`short:{user}:{code}`, one string key
    /// a value, expiring at its event time plus TTL) into their users' hashes, and deletes
    /// them: a deployment's values stay visible after the upgrade. `ttl_of` gives a code's TTL
    /// from the registry; a value's event time is its expiry less that TTL (the old keys did
    /// not keep it). Of an old value and one the new job wrote, the newer event stays.
    /// Scans the keys `short:*` 1,000 at a time; may run while the job writes (the new job
    /// writes no old key; run it after the upgrade), and again (what is moved is deleted).
    ///
    /// # Errors
    ///
    /// As [`ShortTermStore::write_batch`]; what was moved before stays moved.
    pub fn migrate(&mut self, ttl_of: &dyn Fn(&str) -> Option<u64>, now: i64) -> Result<Migrated> {
        let mut done = Migrated::default();
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = self.with_connection(|conn, _| {
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg("short:*")
                    .arg("COUNT")
                    .arg(1000)
                    .query(conn)
            })?;
            self.migrate_keys(&keys, ttl_of, now, &mut done)?;
            if next == 0 {
                return Ok(done);
            }
            cursor = next;
        }
    }

    /// [`RedisStore::migrate`] of one page of keys.
    fn migrate_keys(
        &mut self,
        keys: &[String],
        ttl_of: &dyn Fn(&str) -> Option<u64>,
        now: i64,
        done: &mut Migrated,
    ) -> Result<()> {
        let mut known = Vec::with_capacity(keys.len());
        for k in keys {
            done.found += 1;
            match parse_old_key(k) {
                None => done.not_ours += 1,
                Some((user, code)) => match ttl_of(code) {
                    Some(ttl) => known.push((k, user, code, ttl)),
                    None => done.unknown_tag += 1,
                },
            }
        }
        if known.is_empty() {
            return Ok(());
        }
        // MGET answers nil for a key that is not a string, where GET would fail. A key that
        // expires between the two reads reads as expired.
        let (values, expiries): (Vec<Option<String>>, Vec<i64>) =
            self.with_connection(|conn, _| {
                let names: Vec<&String> = known.iter().map(|k| k.0).collect();
                let values = redis::cmd("MGET").arg(&names).query(conn)?;
                let mut expiries = redis::pipe();
                for name in &names {
                    expiries.cmd("EXPIRETIME").arg(*name);
                }
                Ok((values, expiries.query(conn)?))
            })?;
        let mut fields = Vec::new();
        let mut delete = Vec::new();
        for ((k, user, code, ttl), (value, at)) in
            known.iter().zip(values.into_iter().zip(expiries))
        {
            match value {
                // -1: no expiry, which none of ours lacks.
                Some(_) if at == -1 => done.not_ours += 1,
                Some(json) if at > now => {
                    let ttl = i64::try_from(*ttl).unwrap_or(i64::MAX);
                    let ts = at.saturating_sub(ttl).min(now);
                    fields.push((*user, *code, encode_field(at, ts, &json)));
                    delete.push((*k).clone());
                    done.moved += 1;
                }
                Some(_) => done.expired += 1,
                None if at == -2 => done.expired += 1,
                None => done.not_ours += 1,
            }
        }
        fields.sort_by(|a, b| a.0.cmp(b.0));
        self.write_fields(&fields, now, &delete)
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.url)
            .field("connected", &self.conn.is_some())
            .finish_non_exhaustive()
    }
}

/// A connection with its timeouts, and the digest of [`WRITE_NEWEST`] loaded on it.
fn open_connection(client: &Client) -> redis::RedisResult<(Connection, String)> {
    let mut conn = client.get_connection_with_timeout(TIMEOUT)?;
    conn.set_read_timeout(Some(TIMEOUT))?;
    conn.set_write_timeout(Some(TIMEOUT))?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(WRITE_NEWEST)
        .query(&mut conn)?;
    Ok((conn, sha))
}

impl ShortTermStore for RedisStore {
    fn write_batch(&mut self, values: &[ShortTermValue], now: i64) -> Result<Written> {
        let mut done = Written::default();
        let fields: Vec<(&str, &str, String)> = values
            .iter()
            .filter_map(|v| {
                let at = expires_at(v, now);
                if at.is_none() {
                    done.expired += 1;
                }
                at.map(|at| {
                    let field = encode_field(at, v.ts, &v.value.to_json());
                    (v.user.as_str(), v.code.as_str(), field)
                })
            })
            .collect();
        self.write_fields(&fields, now, &[])?;
        done.written = fields.len();
        Ok(done)
    }

    fn read_users(
        &mut self,
        users: &[&str],
        codes: &[&str],
        now: i64,
    ) -> Result<Vec<Vec<(String, String)>>> {
        if users.is_empty() || codes.is_empty() {
            return Ok(vec![Vec::new(); users.len()]);
        }
        let hashes: Vec<Vec<(String, String)>> = self.with_connection(|conn, _| {
            let mut pipe = redis::pipe();
            for user in users {
                pipe.cmd("HGETALL").arg(key(user));
            }
            pipe.query(conn)
        })?;
        Ok(hashes
            .into_iter()
            .map(|fields| live(fields, codes, now))
            .collect())
    }

    fn location(&self) -> String {
        self.url.clone()
    }
}

/// Whether the same command may succeed later: the connection was lost, refused or timed out,
/// Redis is loading its data, or its script cache was flushed (a new connection loads the
/// script again).
pub(super) fn is_retriable(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::NoScript
                    | ServerErrorKind::TryAgain
            )
        )
}
