//! The registry in MySQL/MariaDB (the `mysql` crate: synchronous, like the job's workers).

use std::time::Duration;

use mysql::prelude::Queryable;
use mysql::{Conn, Opts, OptsBuilder, TxOpts};

use super::{create_table_sql, from_row, redact, to_row, upsert_each, Plan, Row};
use super::{TagRegistry, TagStatuses, Upserted, COLUMNS, TABLE};
use crate::tag::{TagDef, TagStatus};
use crate::{Error, Result};

/// Connecting gives up after this long (a registry that does not answer fails the command, it
/// does not hang it).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A statement gives up after this long.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// The table options of [`TABLE`]: InnoDB for transactions and row locks; binary UTF-8, so
/// names in any script are kept and codes compare byte for byte as in SQLite.
const TABLE_OPTIONS: &str = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";

/// A tag registry in a MySQL or MariaDB database, over one connection.
#[derive(Debug)]
pub struct MysqlRegistry {
    conn: Conn,
    /// The URL without its password.
    url: String,
}

impl MysqlRegistry {
    /// Connects to `url` (`mysql://user:pass@host:port/db`) and creates the table if missing.
    ///
    /// # Errors
    ///
    /// [`Error::Url`] for a URL the driver cannot parse; [`Error::Mysql`] when the server
    /// cannot be reached, refuses the login, or the table cannot be created.
    pub fn open(url: &str) -> Result<Self> {
        let shown = redact(url);
        let opts = Opts::from_url(url).map_err(|e| Error::Url {
            url: shown.clone(),
            reason: e.to_string(),
        })?;
        let opts = OptsBuilder::from_opts(opts)
            .tcp_connect_timeout(Some(CONNECT_TIMEOUT))
            .read_timeout(Some(IO_TIMEOUT))
            .write_timeout(Some(IO_TIMEOUT));
        let err = mysql_error(&shown);
        let mut conn = Conn::new(opts).map_err(err)?;
        conn.query_drop(create_table_sql(TABLE_OPTIONS))
            .map_err(mysql_error(&shown))?;
        Ok(Self { conn, url: shown })
    }
}

fn mysql_error(url: &str) -> impl Fn(mysql::Error) -> Error + '_ {
    move |source| Error::Mysql {
        url: url.to_string(),
        source,
    }
}

impl TagRegistry for MysqlRegistry {
    fn upsert(&mut self, tags: &[TagDef]) -> Result<Vec<Result<Upserted>>> {
        let err = mysql_error(&self.url);
        let mut tx = self
            .conn
            .start_transaction(TxOpts::default())
            .map_err(&err)?;
        let outcomes = upsert_each(
            &mut tx,
            tags,
            |tx, code| {
                // FOR UPDATE: the row stays as read until the commit.
                let stored: Option<Row> = tx
                    .exec_first(
                        format!("SELECT {COLUMNS} FROM {TABLE} WHERE tag_code = ? FOR UPDATE"),
                        (code,),
                    )
                    .map_err(&err)?;
                stored.map(from_row).transpose()
            },
            |tx, planned, tag| {
                let r = to_row(tag);
                if planned == Plan::Insert {
                    tx.exec_drop(
                        format!("INSERT INTO {TABLE} ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                        (r.0, r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8),
                    )
                } else {
                    tx.exec_drop(
                        format!(
                            "UPDATE {TABLE} SET name = ?, data_type = ?, value_type = ?, status = ?, \
                             ttl_secs = ?, category = ?, owner = ?, update_frequency = ? \
                             WHERE tag_code = ?"
                        ),
                        (r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8, r.0),
                    )
                }
                .map_err(&err)
            },
        )?;
        tx.commit().map_err(&err)?;
        Ok(outcomes)
    }

    fn list(&mut self) -> Result<Vec<TagDef>> {
        let rows: Vec<Row> = self
            .conn
            .query(format!("SELECT {COLUMNS} FROM {TABLE} ORDER BY tag_code"))
            .map_err(mysql_error(&self.url))?;
        rows.into_iter().map(from_row).collect()
    }

    fn get(&mut self, code: &str) -> Result<Option<TagDef>> {
        let row: Option<Row> = self
            .conn
            .exec_first(
                format!("SELECT {COLUMNS} FROM {TABLE} WHERE tag_code = ?"),
                (code,),
            )
            .map_err(mysql_error(&self.url))?;
        row.map(from_row).transpose()
    }

    fn set_status(&mut self, code: &str, status: TagStatus) -> Result<TagStatus> {
        let err = mysql_error(&self.url);
        let mut tx = self
            .conn
            .start_transaction(TxOpts::default())
            .map_err(&err)?;
        let stored: Option<Row> = tx
            .exec_first(
                format!("SELECT {COLUMNS} FROM {TABLE} WHERE tag_code = ? FOR UPDATE"),
                (code,),
            )
            .map_err(&err)?;
        let Some(old) = stored.map(from_row).transpose()? else {
            return Err(Error::UnknownTag(code.to_string()));
        };
        tx.exec_drop(
            format!("UPDATE {TABLE} SET status = ? WHERE tag_code = ?"),
            (status.as_str(), code),
        )
        .map_err(&err)?;
        tx.commit().map_err(&err)?;
        Ok(old.status)
    }

    fn statuses(&mut self) -> Result<TagStatuses> {
        let rows: Vec<(String, String)> = self
            .conn
            .query(format!("SELECT tag_code, status FROM {TABLE}"))
            .map_err(mysql_error(&self.url))?;
        super::statuses_of(rows)
    }

    fn location(&self) -> String {
        self.url.clone()
    }
}
