//! A SQLite file of the profile job (the registry's, the embedded short-term tags'): opened with
//! its directory, in WAL mode with `synchronous = NORMAL`, with its schema.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use crate::{Error, Result};

/// How long a writer waits for another process's write lock (a running job reading statuses, a
/// second import, `profile get` reading short-term tags) before failing, retriably.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens (or creates, with its directory) the database at `path` in WAL mode, so that readers do
/// not block the writer, and runs `schema` (`CREATE … IF NOT EXISTS` statements).
///
/// `synchronous = NORMAL`: a commit is written to the WAL without an `fsync`, which WAL mode
/// does at checkpoints. A committed transaction survives a crash of the process (the job's
/// SIGKILL), as the embedded store's writes do before `persist`; a crash of the machine may
/// lose the last ones, as it may the store's. With `FULL`, the default, a replay's flushes
/// (one transaction each) spent more time waiting for `fsync` than computing: 1,223 of them
/// in a 200k-event replay.
///
/// # Errors
///
/// [`Error::Io`] when the directory cannot be created; [`Error::Sqlite`] when the file cannot be
/// opened as a database or `schema` fails.
pub(crate) fn open(path: &Path, schema: &str) -> Result<Connection> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.display().to_string(),
            source,
        })?;
    }
    let err = error(path);
    let conn = Connection::open(path).map_err(&err)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(&err)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(&err)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(&err)?;
    conn.execute_batch(schema).map_err(&err)?;
    Ok(conn)
}

/// Turns a rusqlite error on the file at `path` into [`Error::Sqlite`].
pub(crate) fn error(path: &Path) -> impl Fn(rusqlite::Error) -> Error + '_ {
    move |source| Error::Sqlite {
        path: path.display().to_string(),
        source,
    }
}
