//! The embedded registry: one SQLite file (rusqlite, SQLite compiled in).

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::{
    create_table_sql, from_row, to_row, upsert_each, Plan, TagRegistry, TagStatuses, Upserted,
};
use super::{COLUMNS, TABLE};
use crate::tag::{TagDef, TagStatus};
use crate::{Error, Result};

/// A tag registry in a SQLite file.
#[derive(Debug)]
pub struct SqliteRegistry {
    conn: Connection,
    path: PathBuf,
    /// Transactions this connection committed: `PRAGMA data_version` counts only other
    /// connections' ([`TagRegistry::version`] adds the two).
    writes: u64,
}

impl SqliteRegistry {
    /// Opens (or creates, with its directory) the registry file at `path` and its table.
    ///
    /// The file is in WAL mode, so a job reading statuses does not block an import.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the directory cannot be created; [`Error::Sqlite`] when the file
    /// cannot be opened as a database.
    pub fn open(path: &Path) -> Result<Self> {
        let conn = crate::sqlite::open(path, &create_table_sql(""))?;
        Ok(Self {
            conn,
            path: path.to_path_buf(),
            writes: 0,
        })
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> Error + '_ {
        crate::sqlite::error(&self.path)
    }
}

fn select_one(conn: &Connection, code: &str) -> rusqlite::Result<Option<super::Row>> {
    conn.query_row(
        &format!("SELECT {COLUMNS} FROM {TABLE} WHERE tag_code = ?1"),
        [code],
        read_row,
    )
    .optional()
}

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<super::Row> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
    ))
}

impl TagRegistry for SqliteRegistry {
    fn upsert(&mut self, tags: &[TagDef]) -> Result<Vec<Result<Upserted>>> {
        let err = crate::sqlite::error(&self.path);
        // IMMEDIATE: the write lock from the first read, so two imports cannot both see a
        // code as new.
        let mut tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&err)?;
        let outcomes = upsert_each(
            &mut tx,
            tags,
            |tx, code| {
                select_one(tx, code)
                    .map_err(&err)?
                    .map(from_row)
                    .transpose()
            },
            |tx, planned, tag| {
                let r = to_row(tag);
                let sql = if planned == Plan::Insert {
                    format!("INSERT INTO {TABLE} ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")
                } else {
                    format!(
                        "UPDATE {TABLE} SET name = ?2, data_type = ?3, value_type = ?4, status = ?5, \
                         ttl_secs = ?6, category = ?7, owner = ?8, update_frequency = ?9 \
                         WHERE tag_code = ?1"
                    )
                };
                tx.execute(&sql, params![r.0, r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8])
                    .map_err(&err)?;
                Ok(())
            },
        )?;
        tx.commit().map_err(&err)?;
        self.writes += 1;
        Ok(outcomes)
    }

    /// SQLite's `data_version`, which changes when another connection (another process's
    /// import or `set-status`) commits, plus this connection's own commits: one pragma, where
    /// [`TagRegistry::list`] reads and parses every row.
    fn version(&mut self) -> Result<Option<u64>> {
        let err = crate::sqlite::error(&self.path);
        let data_version: i64 = self
            .conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(&err)?;
        Ok(Some((data_version as u64).wrapping_add(self.writes)))
    }

    fn list(&mut self) -> Result<Vec<TagDef>> {
        let err = self.err();
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM {TABLE} ORDER BY tag_code"))
            .map_err(&err)?;
        let rows = stmt
            .query_map([], read_row)
            .map_err(&err)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(&err)?;
        rows.into_iter().map(from_row).collect()
    }

    fn get(&mut self, code: &str) -> Result<Option<TagDef>> {
        select_one(&self.conn, code)
            .map_err(self.err())?
            .map(from_row)
            .transpose()
    }

    fn set_status(&mut self, code: &str, status: TagStatus) -> Result<TagStatus> {
        let err = crate::sqlite::error(&self.path);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&err)?;
        let Some(old) = select_one(&tx, code)
            .map_err(&err)?
            .map(from_row)
            .transpose()?
        else {
            return Err(Error::UnknownTag(code.to_string()));
        };
        tx.execute(
            &format!("UPDATE {TABLE} SET status = ?2 WHERE tag_code = ?1"),
            params![code, status.as_str()],
        )
        .map_err(&err)?;
        tx.commit().map_err(&err)?;
        self.writes += 1;
        Ok(old.status)
    }

    fn statuses(&mut self) -> Result<TagStatuses> {
        let err = self.err();
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT tag_code, status FROM {TABLE}"))
            .map_err(&err)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(&err)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(&err)?;
        super::statuses_of(rows)
    }

    fn location(&self) -> String {
        format!("sqlite://{}", self.path.display())
    }
}
