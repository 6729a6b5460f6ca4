//! The short-term tags in Redis: `short:{user}:{code}` keys, written by one pipeline a batch.

use redis::{Client, Connection, ErrorKind, ServerErrorKind};

use super::{expires_at, key, ShortTermStore, Written};
use crate::merge::ShortTermValue;
use crate::registry::redact;
use crate::{Error, Result};

/// How long connecting, and each reply, may take before the call fails (retriably): a flush
/// must not hang on a Redis that stopped answering.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Sets `KEYS[1]` to `ARGV[1]` expiring at epoch second `ARGV[2]`, unless the key's value
/// expires later: one tag's values all have its TTL, so the later expiry is the newer event.
/// `EXPIRETIME` (Redis 7.0) is -2 for a missing key and -1 for one without expiry (written by
/// someone else), both replaced.
const SET_NEWEST: &str = "\
if redis.call('EXPIRETIME', KEYS[1]) > tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EXAT', ARGV[2])
return 1";

/// The short-term tags in a Redis server (or a Redis-protocol one: Valkey, KeyDB).
///
/// Each value is `SET short:{user}:{code} <JSON> EXAT <event time + TTL>` inside a small Lua
/// script that keeps a value of a newer event time (the later expiry), all of a batch's scripts
/// sent in one pipeline: one round trip per flush. The script is loaded once per connection
/// (`SCRIPT LOAD`) and called by its digest. A lost connection is dropped and made again on the
/// next call.
pub struct RedisStore {
    client: Client,
    conn: Option<(Connection, String)>,
    url: String,
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
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.url)
            .field("connected", &self.conn.is_some())
            .finish_non_exhaustive()
    }
}

/// A connection with its timeouts, and the digest of [`SET_NEWEST`] loaded on it.
fn open_connection(client: &Client) -> redis::RedisResult<(Connection, String)> {
    let mut conn = client.get_connection_with_timeout(TIMEOUT)?;
    conn.set_read_timeout(Some(TIMEOUT))?;
    conn.set_write_timeout(Some(TIMEOUT))?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(SET_NEWEST)
        .query(&mut conn)?;
    Ok((conn, sha))
}

impl ShortTermStore for RedisStore {
    fn write_batch(&mut self, values: &[ShortTermValue], now: i64) -> Result<Written> {
        let mut done = Written::default();
        let mut pipe = redis::pipe();
        let live: Vec<(&ShortTermValue, i64)> = values
            .iter()
            .filter_map(|v| {
                let at = expires_at(v, now);
                if at.is_none() {
                    done.expired += 1;
                }
                at.map(|at| (v, at))
            })
            .collect();
        if live.is_empty() {
            return Ok(done);
        }
        self.with_connection(|conn, sha| {
            for (v, at) in &live {
                pipe.cmd("EVALSHA")
                    .arg(sha)
                    .arg(1)
                    .arg(key(&v.user, &v.code))
                    .arg(v.value.to_json())
                    .arg(at)
                    .ignore();
            }
            pipe.exec(conn)
        })?;
        done.written = live.len();
        Ok(done)
    }

    fn read_users(
        &mut self,
        users: &[&str],
        codes: &[&str],
        _now: i64,
    ) -> Result<Vec<Vec<(String, String)>>> {
        if users.is_empty() || codes.is_empty() {
            return Ok(vec![Vec::new(); users.len()]);
        }
        let keys: Vec<String> = users
            .iter()
            .flat_map(|u| codes.iter().map(move |c| key(u, c)))
            .collect();
        // Redis drops an expired key itself, so what MGET finds is live.
        let found: Vec<Option<String>> =
            self.with_connection(|conn, _| redis::cmd("MGET").arg(&keys).query(conn))?;
        Ok(found
            .chunks(codes.len())
            .map(|values| {
                codes
                    .iter()
                    .zip(values)
                    .filter_map(|(c, v)| v.clone().map(|v| ((*c).to_string(), v)))
                    .collect()
            })
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
