//! The short-term tags without Redis: one SQLite table, each value with its expiry.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, TransactionBehavior};

use super::{expires_at, ShortTermStore, Written};
use crate::merge::ShortTermValue;
use crate::Result;

/// The table: the stored value's event time beside its expiry, so that a late write of an
/// older event is refused even when the tag's TTL changed.
const CREATE: &str = "
CREATE TABLE IF NOT EXISTS short_term_tag (
    user_id TEXT NOT NULL,
    tag_code TEXT NOT NULL,
    value TEXT NOT NULL,
    ts INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (user_id, tag_code)
) WITHOUT ROWID;
DROP INDEX IF EXISTS short_term_tag_expiry;";

/// Pages of the file SQLite keeps in memory (`cache_size`, negative: KiB): 32 MiB, the file of
/// a million users' short-term tags. With the default 2 MiB, each commit of a flush's values of
/// random users read and spilled pages (`perf` of a replay of a million users: a tenth of the
/// job's time in SQLite, most of it paging).
const CACHE_KIB: i64 = 32 * 1024;

/// Shortest time between two deletions of the expired values: a deletion scans the table (an
/// index on the expiry, which a deletion per batch needed, cost a second B-tree update per
/// value written).
const SWEEP_EVERY_SECS: i64 = 60;

/// Replaces a stored value of an older (or the same) event time, or one already expired.
const UPSERT: &str = "
INSERT INTO short_term_tag (user_id, tag_code, value, ts, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (user_id, tag_code) DO UPDATE SET
    value = excluded.value, ts = excluded.ts, expires_at = excluded.expires_at
WHERE excluded.ts >= short_term_tag.ts OR short_term_tag.expires_at <= ?6";

/// The short-term tags in a local SQLite file, with Redis's semantics: an expired value is
/// never returned, and is deleted by the next write batch.
///
/// Why SQLite and not a table of the embedded store (`sinks`): that store's TTL is one per
/// table, counted from the cell's timestamp, where each short-term tag has its own; its files
/// are held by the one process that writes them, where a reader (`profile get`) must be able
/// to read while the job writes (SQLite's WAL allows it); and "keep the newer event" is one
/// `ON CONFLICT … WHERE` here. rusqlite is already the registry's.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    /// When the expired values were last deleted, epoch seconds (0: never).
    swept_at: i64,
}

impl SqliteStore {
    /// Opens (or creates, with its directory) the file at `path` and its table, in WAL mode.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the directory cannot be created; [`Error::Sqlite`] when the file
    /// cannot be opened as a database.
    pub fn open(path: &Path) -> Result<Self> {
        let conn = crate::sqlite::open(path, CREATE)?;
        conn.pragma_update(None, "cache_size", -CACHE_KIB)
            .map_err(crate::sqlite::error(path))?;
        Ok(Self {
            conn,
            path: path.to_path_buf(),
            swept_at: 0,
        })
    }
}

impl ShortTermStore for SqliteStore {
    fn write_batch(&mut self, values: &[ShortTermValue], now: i64) -> Result<Written> {
        let err = crate::sqlite::error(&self.path);
        let sweep = now - self.swept_at >= SWEEP_EVERY_SECS;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&err)?;
        let mut done = Written::default();
        {
            let mut upsert = tx.prepare_cached(UPSERT).map_err(&err)?;
            for v in values {
                let Some(at) = expires_at(v, now) else {
                    done.expired += 1;
                    continue;
                };
                upsert
                    .execute(params![v.user, v.code, v.value.to_json(), v.ts, at, now])
                    .map_err(&err)?;
                done.written += 1;
            }
            // Expired values are never read; deleting them now and then bounds the file.
            if sweep {
                tx.prepare_cached("DELETE FROM short_term_tag WHERE expires_at <= ?1")
                    .and_then(|mut d| d.execute([now]))
                    .map_err(&err)?;
            }
        }
        tx.commit().map_err(&err)?;
        if sweep {
            self.swept_at = now;
        }
        Ok(done)
    }

    fn read_users(
        &mut self,
        users: &[&str],
        codes: &[&str],
        now: i64,
    ) -> Result<Vec<Vec<(String, String)>>> {
        let err = crate::sqlite::error(&self.path);
        let mut select = self
            .conn
            .prepare_cached(
                "SELECT tag_code, value FROM short_term_tag \
                 WHERE user_id = ?1 AND expires_at > ?2",
            )
            .map_err(&err)?;
        let mut out = Vec::with_capacity(users.len());
        for user in users {
            let mut found: Vec<(String, String)> = select
                .query_map(params![user, now], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(Iterator::collect)
                .map_err(&err)?;
            let position = |code: &str| codes.iter().position(|c| *c == code);
            found.retain(|(code, _)| position(code).is_some());
            found.sort_by_key(|(code, _)| position(code));
            out.push(found);
        }
        Ok(out)
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::CellValue;

    const NOW: i64 = 1_796_500_000;

    fn value(user: &str, code: &str, ts: i64, v: &str, ttl_secs: u64) -> ShortTermValue {
        ShortTermValue {
            user: user.into(),
            code: code.into(),
            ts,
            value: CellValue::String(v.into()),
            ttl_secs,
        }
    }

    fn store(dir: &tempfile::TempDir) -> SqliteStore {
        SqliteStore::open(&dir.path().join("sub/short_term.sqlite")).unwrap()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(c, v)| ((*c).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn values_live_their_ttl_from_the_event_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = store(&dir);
        let codes = ["rt_a", "rt_b", "rt_c"];
        let written = s
            .write_batch(
                &[
                    value("u1", "rt_a", NOW - 100, "a", 3600),
                    value("u1", "rt_b", NOW - 3600, "b", 3600), // expired at its event time
                    value("u1", "rt_c", NOW, "c", 60),
                    value("u2", "rt_a", NOW, "x", 60),
                ],
                NOW,
            )
            .unwrap();
        assert_eq!(
            written,
            Written {
                written: 3,
                expired: 1
            }
        );
        assert_eq!(
            s.read_users(&["u1", "u2", "nobody"], &codes, NOW).unwrap(),
            vec![
                pairs(&[("rt_a", "\"a\""), ("rt_c", "\"c\"")]),
                pairs(&[("rt_a", "\"x\"")]),
                vec![],
            ]
        );
        assert_eq!(
            s.read_user("u1", &["rt_c", "rt_a"], NOW).unwrap(),
            pairs(&[("rt_c", "\"c\""), ("rt_a", "\"a\"")]),
            "in the order of the codes asked"
        );
        assert_eq!(
            s.read_user("u1", &["rt_a"], NOW).unwrap(),
            pairs(&[("rt_a", "\"a\"")]),
            "only the codes asked"
        );
        // rt_c expires at NOW + 60, rt_a at NOW + 3500.
        assert_eq!(
            s.read_user("u1", &codes, NOW + 60).unwrap(),
            pairs(&[("rt_a", "\"a\"")]),
            "an expired value is never returned"
        );
        assert!(s.read_user("u1", &codes, NOW + 3500).unwrap().is_empty());

        // A write batch a minute after the last deletion deletes what has expired, whoever's.
        s.write_batch(&[], NOW + 61).unwrap();
        let rows: i64 = s
            .conn
            .query_row("SELECT COUNT(*) FROM short_term_tag", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1, "only u1's rt_a is left");
    }

    #[test]
    fn the_newer_event_stays_whatever_the_order_of_writes() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = store(&dir);
        let read = |s: &mut SqliteStore, now| s.read_user("u1", &["rt_a"], now).unwrap();
        s.write_batch(&[value("u1", "rt_a", NOW - 10, "old", 3600)], NOW)
            .unwrap();
        s.write_batch(&[value("u1", "rt_a", NOW, "new", 3600)], NOW)
            .unwrap();
        assert_eq!(read(&mut s, NOW), pairs(&[("rt_a", "\"new\"")]));
        // A late event, in a later batch, does not replace it.
        s.write_batch(&[value("u1", "rt_a", NOW - 5, "late", 3600)], NOW + 1)
            .unwrap();
        assert_eq!(read(&mut s, NOW + 1), pairs(&[("rt_a", "\"new\"")]));
        // The same event time: the later write.
        s.write_batch(&[value("u1", "rt_a", NOW, "again", 3600)], NOW + 1)
            .unwrap();
        assert_eq!(read(&mut s, NOW + 1), pairs(&[("rt_a", "\"again\"")]));
        // Once the stored value has expired, an older event's value with a longer TTL may
        // take its place (the tag's TTL was raised).
        s.write_batch(&[value("u1", "rt_a", NOW + 100, "short", 1)], NOW + 100)
            .unwrap();
        s.write_batch(&[value("u1", "rt_a", NOW + 50, "long", 3600)], NOW + 200)
            .unwrap();
        assert_eq!(read(&mut s, NOW + 200), pairs(&[("rt_a", "\"long\"")]));
    }

    #[test]
    fn values_survive_a_reopen_and_types_are_json() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = store(&dir);
        let mut v = value("10086", "rt_n", NOW, "", 60);
        v.value = CellValue::Int(3);
        let mut m = value("10086", "rt_m", NOW, "", 60);
        m.value = CellValue::MultiValue(r#"["a","b"]"#.into());
        s.write_batch(&[v, m], NOW).unwrap();
        drop(s);
        let mut s = store(&dir);
        assert_eq!(
            s.read_user("10086", &["rt_m", "rt_n"], NOW).unwrap(),
            pairs(&[("rt_m", r#"["a","b"]"#), ("rt_n", "3")])
        );
        assert!(s.location().ends_with("short_term.sqlite"));
    }
}
