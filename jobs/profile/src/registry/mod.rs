//! The tag registry: one table of [`TagDef`]s, in SQLite (embedded) or MySQL/MariaDB.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use crate::tag::{TagDef, TagStatus};
use crate::{Error, Result};

mod mysql;
mod sqlite;

pub use self::mysql::MysqlRegistry;
pub use self::sqlite::SqliteRegistry;

/// The registry's table, in both backends.
pub const TABLE: &str = "tag_registry";

/// Every tag's status at one moment: what a job reads once per flush (no cache that outlives a
/// batch), so a tag set offline is no longer written after the next flush.
pub type TagStatuses = BTreeMap<String, TagStatus>;

/// What [`TagRegistry::upsert`] did with one definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upserted {
    /// The code was new.
    Inserted,
    /// The stored definition changed.
    Updated,
    /// The stored definition was already this one.
    Unchanged,
}

/// A store of tag definitions keyed by `tag_code`.
///
/// Both backends keep the same table ([`TABLE`], created by [`open`] if missing) and obey the
/// same rules: every definition is [validated](TagDef::validate) before it is written, a code is
/// never renamed, and a tag that has been online keeps its meaning
/// ([`TagDef::check_change`]).
pub trait TagRegistry: fmt::Debug + Send {
    /// Inserts or updates each definition, in one transaction; returns one outcome per
    /// definition, in order. A definition that breaks a rule is not written (its outcome is the
    /// error) and does not stop the others.
    ///
    /// # Errors
    ///
    /// The backend failed: nothing was written.
    fn upsert(&mut self, tags: &[TagDef]) -> Result<Vec<Result<Upserted>>>;

    /// Every definition, ordered by code.
    ///
    /// # Errors
    ///
    /// The backend failed, or a stored row is not a valid definition (edited by hand).
    fn list(&mut self) -> Result<Vec<TagDef>>;

    /// The definition of `code`, if there is one.
    ///
    /// # Errors
    ///
    /// As [`TagRegistry::list`].
    fn get(&mut self, code: &str) -> Result<Option<TagDef>>;

    /// Sets the status of `code` and returns the previous one.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTag`] when no tag has this code; a backend failure.
    fn set_status(&mut self, code: &str, status: TagStatus) -> Result<TagStatus>;

    /// Every tag's status, read in one query.
    ///
    /// # Errors
    ///
    /// As [`TagRegistry::list`].
    fn statuses(&mut self) -> Result<TagStatuses>;

    /// Where the registry is, without a password: for messages.
    fn location(&self) -> String;

    /// A number that differs from the one returned before whenever a definition may have
    /// changed in between, by anyone: a reader holding the definitions of one call can keep
    /// them while it is the same. `None` (the default) when the backend has none, and the
    /// definitions must be read again each time.
    ///
    /// # Errors
    ///
    /// The backend failed.
    fn version(&mut self) -> Result<Option<u64>> {
        Ok(None)
    }
}

/// The definitions of `registry` with its [`TagRegistry::version`], if they may have changed
/// since the version `held` (`None` held, or a backend without versions: always read). The
/// version is taken before the list, so a change committed in between is read again next time.
///
/// # Errors
/// As [`TagRegistry::version`] and [`TagRegistry::list`].
pub fn read_if_changed(
    registry: &mut dyn TagRegistry,
    held: Option<u64>,
) -> Result<Option<(Vec<TagDef>, Option<u64>)>> {
    let version = registry.version()?;
    if version.is_some() && version == held {
        return Ok(None);
    }
    Ok(Some((registry.list()?, version)))
}

/// A registry's address: `sqlite://PATH` or `mysql://user:pass@host:port/db`.
#[derive(Clone, PartialEq, Eq)]
pub enum RegistryUrl {
    /// A SQLite file (created with its directory if missing).
    Sqlite(PathBuf),
    /// A MySQL/MariaDB database, as its full URL.
    Mysql(String),
}

impl RegistryUrl {
    /// Parses a registry URL: `sqlite://PATH` (`sqlite://./dir/tags.sqlite`,
    /// `sqlite:///abs/tags.sqlite`) or `mysql://user:pass@host:port/db`.
    ///
    /// # Errors
    ///
    /// [`Error::Url`] for another scheme, an empty path or a MySQL URL without a database.
    pub fn parse(url: &str) -> Result<Self> {
        let err = |reason: &str| Error::Url {
            url: redact(url),
            reason: reason.to_string(),
        };
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(err(
                    "no file after sqlite:// (e.g. sqlite://./hourglass-data/tags.sqlite)",
                ));
            }
            return Ok(Self::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("mysql://") {
            let opts = ::mysql::Opts::from_url(url).map_err(|e| err(&e.to_string()))?;
            if opts.get_db_name().is_none_or(str::is_empty) {
                return Err(err(
                    "no database: name it as the path, mysql://user:pass@host:port/DATABASE",
                ));
            }
            return Ok(Self::Mysql(url.to_string()));
        }
        Err(err(
            "unsupported scheme: expected sqlite://PATH or mysql://user:pass@host:port/db",
        ))
    }

    /// Opens the registry, creating its table (and, for SQLite, the file and its directory) if
    /// missing.
    ///
    /// # Errors
    ///
    /// The database cannot be reached, created or read.
    pub fn open(&self) -> Result<Box<dyn TagRegistry>> {
        Ok(match self {
            Self::Sqlite(path) => Box::new(SqliteRegistry::open(path)?),
            Self::Mysql(url) => Box::new(MysqlRegistry::open(url)?),
        })
    }
}

impl fmt::Display for RegistryUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            Self::Mysql(url) => f.write_str(&redact(url)),
        }
    }
}

impl fmt::Debug for RegistryUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RegistryUrl({self})")
    }
}

/// Opens the registry at `url` ([`RegistryUrl::parse`], [`RegistryUrl::open`]).
///
/// # Errors
///
/// As those two.
pub fn open(url: &str) -> Result<Box<dyn TagRegistry>> {
    RegistryUrl::parse(url)?.open()
}

/// `url` with the password of its user info replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    match rest[..at].find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &url[..scheme_end],
            &rest[..colon],
            &rest[at..]
        ),
        None => url.to_string(),
    }
}

/// The table both backends create: the same columns and types (each understood by SQLite and
/// MySQL alike), `options` being the backend's table options.
pub(crate) fn create_table_sql(options: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {TABLE} (
            tag_code VARCHAR(64) NOT NULL PRIMARY KEY,
            name VARCHAR(255) NOT NULL,
            data_type VARCHAR(16) NOT NULL,
            value_type VARCHAR(16) NOT NULL,
            status VARCHAR(16) NOT NULL,
            ttl_secs BIGINT NULL,
            category VARCHAR(255) NOT NULL,
            owner VARCHAR(255) NOT NULL,
            update_frequency VARCHAR(64) NOT NULL
        ){options}"
    )
}

/// The `(tag_code, status)` rows of [`TABLE`] as statuses; a status no tag can have is an
/// error naming the tag.
fn statuses_of(rows: Vec<(String, String)>) -> Result<TagStatuses> {
    rows.into_iter()
        .map(|(code, status)| {
            let status = status.parse().map_err(|e: Error| {
                Error::Invalid(format!("stored tag '{code}': {e}: fix its row in {TABLE}"))
            })?;
            Ok((code, status))
        })
        .collect()
}

/// The columns of [`TABLE`] in [`Row`] order.
pub(crate) const COLUMNS: &str =
    "tag_code, name, data_type, value_type, status, ttl_secs, category, owner, update_frequency";

/// A stored row as both drivers read it.
pub(crate) type Row = (
    String,
    String,
    String,
    String,
    String,
    Option<i64>,
    String,
    String,
    String,
);

/// The row of a definition (`ttl_secs` fits: [`TagDef::validate`] bounds it).
pub(crate) fn to_row(tag: &TagDef) -> Row {
    (
        tag.tag_code.clone(),
        tag.name.clone(),
        tag.data_type.as_str().to_string(),
        tag.value_type.as_str().to_string(),
        tag.status.as_str().to_string(),
        tag.ttl_secs.map(|t| i64::try_from(t).unwrap_or(i64::MAX)),
        tag.category.clone(),
        tag.owner.clone(),
        tag.update_frequency.clone(),
    )
}

/// The definition a stored row holds.
pub(crate) fn from_row(row: Row) -> Result<TagDef> {
    let (tag_code, name, data_type, value_type, status, ttl, category, owner, update_frequency) =
        row;
    let bad = |e: Error| {
        Error::Invalid(format!(
            "stored tag '{tag_code}' is not a valid definition ({e}): fix its row in {TABLE}"
        ))
    };
    let tag = TagDef {
        data_type: data_type.parse().map_err(bad)?,
        value_type: value_type.parse().map_err(bad)?,
        status: status.parse().map_err(bad)?,
        ttl_secs: ttl
            .map(|t| u64::try_from(t).map_err(|_| bad(Error::Invalid(format!("ttl_secs {t}")))))
            .transpose()?,
        tag_code: tag_code.clone(),
        name,
        category,
        owner,
        update_frequency,
    };
    Ok(tag)
}

/// What to do with `new` given the stored definition of its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    Insert,
    Update,
    Unchanged,
}

/// The rules of an upsert, the same for every backend.
pub(crate) fn plan(stored: Option<&TagDef>, new: &TagDef) -> Result<Plan> {
    new.validate()?;
    match stored {
        None => Ok(Plan::Insert),
        Some(old) if old == new => Ok(Plan::Unchanged),
        Some(old) => {
            old.check_change(new)?;
            Ok(Plan::Update)
        }
    }
}

/// Upserts `tags` one by one by the rules of [`plan`], the loop of every backend's
/// [`TagRegistry::upsert`] within its transaction `tx`: `stored` reads a code's stored
/// definition, `write` inserts or updates a tag ([`Plan::Unchanged`] writes nothing). A tag the
/// rules refuse is an `Err` outcome; an error of `stored` or `write` is the upsert's.
pub(crate) fn upsert_each<T>(
    tx: &mut T,
    tags: &[TagDef],
    mut stored: impl FnMut(&mut T, &str) -> Result<Option<TagDef>>,
    mut write: impl FnMut(&mut T, Plan, &TagDef) -> Result<()>,
) -> Result<Vec<Result<Upserted>>> {
    let mut outcomes = Vec::with_capacity(tags.len());
    for tag in tags {
        let stored = stored(tx, &tag.tag_code)?;
        let planned = match plan(stored.as_ref(), tag) {
            Ok(p) => p,
            Err(e) => {
                outcomes.push(Err(e));
                continue;
            }
        };
        if planned != Plan::Unchanged {
            write(tx, planned, tag)?;
        }
        outcomes.push(Ok(planned.outcome()));
    }
    Ok(outcomes)
}

impl Plan {
    pub(crate) const fn outcome(self) -> Upserted {
        match self {
            Plan::Insert => Upserted::Inserted,
            Plan::Update => Upserted::Updated,
            Plan::Unchanged => Upserted::Unchanged,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            RegistryUrl::parse("sqlite://./hourglass-data/tags.sqlite").unwrap(),
            RegistryUrl::Sqlite("./hourglass-data/tags.sqlite".into())
        );
        assert_eq!(
            RegistryUrl::parse("sqlite:///var/lib/tags.sqlite").unwrap(),
            RegistryUrl::Sqlite("/var/lib/tags.sqlite".into())
        );
        let my = RegistryUrl::parse("mysql://hourglass:secret@127.0.0.1:3306/hourglass").unwrap();
        assert_eq!(
            my.to_string(),
            "mysql://hourglass:***@127.0.0.1:3306/hourglass"
        );
        assert!(!format!("{my:?}").contains("secret"));
        for (bad, says) in [
            ("sqlite://", "no file"),
            ("postgres://u:secret@h/db", "unsupported scheme"),
            ("tags.sqlite", "unsupported scheme"),
            ("mysql://u:secret@127.0.0.1:3306", "no database"),
            ("mysql://u:secret@127.0.0.1:3306/", "no database"),
        ] {
            let e = RegistryUrl::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn redacts_only_the_password() {
        assert_eq!(redact("mysql://u:p@h:1/db"), "mysql://u:***@h:1/db");
        assert_eq!(redact("mysql://u@h/db"), "mysql://u@h/db");
        assert_eq!(redact("mysql://h/db@x"), "mysql://h/db@x");
    }
}

#[cfg(test)]
mod backend_tests;
