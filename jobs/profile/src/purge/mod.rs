//! Purging an offline tag: its column deleted from every `user_profile_tag` row (and the
//! cached profiles of those users invalidated, with a cache), its `user_tag_history` rows
//! deleted, page by page from a checkpoint file, its `user_tag_index` entries deleted, then the
//! tables major-compacted.
//!
//! A purge runs while the tag is `offline`, so no job writes the column meanwhile. It scans
//! each table in pages of [`PurgeOptions::page_rows`] rows, deletes what it found, flushes, and
//! only then records the page's last row key in the checkpoint: a purge killed at any point
//! resumes after the last page it finished, and a page done twice deletes nothing more
//! (deletes are idempotent). Once both tables are done and compaction asked for, the checkpoint
//! says so, and a purge run again returns [`Outcome::AlreadyPurged`] without scanning.
//!
//! The checkpoint is a small JSON file rather than a registry table: it is local to the purge,
//! needs no change to the registry's schema in two databases, and is deleted with the store's
//! working directory. Its path is the caller's (the CLI's default:
//! `hourglass-data/purge-CODE.json`).
//!
//! With [`PurgeOptions::cache_url`], each page's users are invalidated in the profile cache
//! after the page's deletes are durable and before its checkpoint is written ([`cache`]): a
//! reader's backfill of a row read before the deletes is then refused by the generation check.
//! Redis failing does not stop the purge: those users are counted
//! ([`PurgeCounts::cache_not_invalidated`]) and their entries expire by their TTL, as do those
//! of a page whose deletes were durable when the purge was killed.

mod cache;

use std::io::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sinks::table::{Column, Mutation, ScanSpec, TableReader};
use sinks::Store;

use crate::key::parse_history_row;
use crate::registry::TagRegistry;
use crate::tables::{BEHAVIOR_FAMILY, DIMENSION_FAMILY, HISTORY_TABLE, PROFILE_TABLE};
use crate::tag::TagStatus;
use crate::{Error, Result};

/// Rows a page holds by default: each page is one scan, one flush of deletes and one write of
/// the checkpoint.
pub const PAGE_ROWS: usize = 1000;

/// The stamp purge deletes bound: every version of every cell. HBase takes its server's current
/// time for it (`LATEST_TIMESTAMP`), so a cell stamped in the future would stay there; profile
/// events are stamped with their event time, which is never ahead of the writing job's clock.
const EVERY_VERSION: i64 = i64::MAX;

/// What a purge found and deleted, added up over the runs of one purge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurgeCounts {
    /// `user_profile_tag` rows scanned: those holding the tag's column (the scan asks HBase
    /// for that column only, so rows without it are skipped on the server).
    pub profile_rows: u64,
    /// Columns deleted from them (one per family holding the code).
    pub columns_deleted: u64,
    /// `user_tag_history` rows scanned: every row of the table (its keys start with the user).
    pub history_rows: u64,
    /// History rows of the tag deleted.
    pub history_deleted: u64,
    /// `user_tag_index` entries of the tag deleted.
    #[serde(default)]
    pub index_deleted: u64,
    /// Users whose cached profile was invalidated (their row lost the column).
    #[serde(default)]
    pub cache_invalidated: u64,
    /// Users whose cached profile could not be invalidated (Redis failing): it shows the tag
    /// until it expires (`[cache] ttl_secs`).
    #[serde(default)]
    pub cache_not_invalidated: u64,
}

/// How far one table's scan has gone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableProgress {
    /// The last row key of the last finished page (`None`: none yet).
    pub after: Option<Vec<u8>>,
    /// Whether the table's scan reached its end.
    pub done: bool,
}

/// A purge's checkpoint, as its file holds it (JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// The tag purged.
    pub code: String,
    /// Where the tables are ([`Store::location`]): a checkpoint resumes a purge of that store
    /// only (`None` until the first run opened one).
    #[serde(default)]
    pub location: Option<String>,
    /// `user_profile_tag`'s progress.
    pub profile: TableProgress,
    /// `user_tag_history`'s progress.
    pub history: TableProgress,
    /// What the runs so far found and deleted.
    pub counts: PurgeCounts,
    /// Whether the purge finished: both tables done and their compaction asked for.
    pub done: bool,
}

impl Checkpoint {
    /// The checkpoint in the file at `path`, if there is one.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be read; [`Error::Invalid`] if it is not a checkpoint.
    pub fn load(path: &Path) -> Result<Option<Self>> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(io_error(path, source)),
        };
        serde_json::from_str(&text).map(Some).map_err(|e| {
            Error::Invalid(format!(
                "{} is not a purge checkpoint ({e}); delete it to start the purge over",
                path.display()
            ))
        })
    }

    /// Writes the checkpoint to `path` (its directory created if missing), atomically: a
    /// kill leaves the old file or the new one.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be written.
    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
        }
        let text = serde_json::to_vec_pretty(self).expect("a checkpoint serializes");
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = Path::new(&tmp);
        let written = std::fs::File::create(tmp).and_then(|mut f| {
            f.write_all(&text)?;
            f.sync_all()
        });
        written.map_err(|e| io_error(tmp, e))?;
        std::fs::rename(tmp, path).map_err(|e| io_error(path, e))
    }
}

fn io_error(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.display().to_string(),
        source,
    }
}

/// What to purge and how.
#[derive(Debug, Clone)]
pub struct PurgeOptions<'a> {
    /// The tag's code.
    pub code: &'a str,
    /// The checkpoint file: read to resume, written after every page.
    pub checkpoint: &'a Path,
    /// Rows per page (default [`PAGE_ROWS`]; 0 is read as 1).
    pub page_rows: usize,
    /// Stop after this many pages, as a kill would, and return [`Outcome::Stopped`] (default
    /// `None`: to the end). For tests of resuming, and for purging in slices.
    pub max_pages: Option<u64>,
    /// The Redis of the profile cache (`[redis] url` with `[cache] enabled`), whose entries of
    /// the users a page changed are invalidated (default `None`: no cache).
    pub cache_url: Option<&'a str>,
}

impl<'a> PurgeOptions<'a> {
    /// A purge of `code` checkpointed in `checkpoint`, in pages of [`PAGE_ROWS`] rows.
    pub fn new(code: &'a str, checkpoint: &'a Path) -> Self {
        PurgeOptions {
            code,
            checkpoint,
            page_rows: PAGE_ROWS,
            max_pages: None,
            cache_url: None,
        }
    }
}

/// What a purge reports as it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// A page of `table` is done: the purge's counts so far.
    Page {
        /// The table.
        table: &'static str,
        /// Counts so far, earlier runs included.
        counts: PurgeCounts,
    },
    /// The scan of `table` reached its end.
    TableDone {
        /// The table.
        table: &'static str,
        /// Counts so far.
        counts: PurgeCounts,
    },
    /// The major compaction of `table` is being asked for.
    Compacting {
        /// The table.
        table: &'static str,
    },
}

/// How a purge ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Both tables purged and compaction asked for: the counts of every run of this purge.
    Purged(PurgeCounts),
    /// The checkpoint says an earlier run finished: nothing was done.
    AlreadyPurged(PurgeCounts),
    /// [`PurgeOptions::max_pages`] pages were done; run again to go on.
    Stopped(PurgeCounts),
}

/// Purges the tag `options.code`: deletes its column (family `dimension` or `behavior`,
/// qualifier = the code) from every `user_profile_tag` row, deletes its `user_tag_history`
/// rows, then asks `store` to major-compact both tables. Resumes from `options.checkpoint` and
/// writes it after every page; reports each page to `progress`. With `options.cache_url`,
/// invalidates the cached profiles of the users whose column it deleted, page by page; Redis
/// failing is no error (the users are counted).
///
/// # Errors
/// [`Error::UnknownTag`]; [`Error::Refused`] unless the tag is `offline` (saying to run
/// `hourglass tags set-status CODE offline`), also when it was purged and set online since;
/// [`Error::Invalid`] for a checkpoint of another tag or store; [`Error::Store`] when the
/// store fails (the checkpoint keeps the pages done); [`Error::Io`] for the checkpoint file;
/// [`Error::Redis`] for a cache URL that is not one.
pub fn purge(
    store: &Store,
    registry: &mut dyn TagRegistry,
    options: &PurgeOptions<'_>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Outcome> {
    let mut checkpoint = check(registry, options)?;
    let location = store.location();
    match &checkpoint.location {
        Some(purged) if *purged != location => {
            return Err(Error::Invalid(format!(
                "{} is the checkpoint of a purge of the store at {purged}, not {location}: \
                 pass another checkpoint file",
                options.checkpoint.display()
            )));
        }
        Some(_) => {}
        None => checkpoint.location = Some(location),
    }
    if checkpoint.done {
        return Ok(Outcome::AlreadyPurged(checkpoint.counts));
    }
    let mut run = Run {
        store,
        reader: store.reader(),
        writer: store.writer(),
        options,
        pages: 0,
        cache: options.cache_url.map(cache::PurgeCache::new).transpose()?,
    };
    if !run.profile(&mut checkpoint, progress)? || !run.history(&mut checkpoint, progress)? {
        return Ok(Outcome::Stopped(checkpoint.counts));
    }
    let page = options.page_rows;
    let code = options.code;
    checkpoint.counts.index_deleted +=
        crate::audience::maintain::delete_code(&run.reader, run.writer.as_mut(), code, page)?;
    for table in [PROFILE_TABLE, HISTORY_TABLE, crate::audience::INDEX_TABLE] {
        progress(Progress::Compacting { table });
        store.admin().major_compact(table)?;
    }
    checkpoint.done = true;
    checkpoint.save(options.checkpoint)?;
    Ok(Outcome::Purged(checkpoint.counts))
}

/// Whether [`purge`] may run, without a store: the tag's definition and status, and the
/// checkpoint to resume from (a new one if there is none; `done` if the purge finished).
///
/// # Errors
/// As [`purge`], but for the store's.
pub fn check(registry: &mut dyn TagRegistry, options: &PurgeOptions<'_>) -> Result<Checkpoint> {
    let code = options.code;
    let def = registry
        .get(code)?
        .ok_or_else(|| Error::UnknownTag(code.to_string()))?;
    let checkpoint = Checkpoint::load(options.checkpoint)?.unwrap_or_else(|| Checkpoint {
        code: code.to_string(),
        ..Checkpoint::default()
    });
    if checkpoint.code != code {
        return Err(Error::Invalid(format!(
            "{} is the checkpoint of a purge of tag '{}', not '{code}': pass another \
             checkpoint file",
            options.checkpoint.display(),
            checkpoint.code
        )));
    }
    if def.status != TagStatus::Offline {
        let since = if checkpoint.done {
            format!(" (it was purged, and set {} since)", def.status)
        } else {
            String::new()
        };
        return Err(Error::Refused {
            code: code.to_string(),
            reason: format!(
                "is {}{since}; only an offline tag can be purged: run `hourglass tags \
                 set-status {code} offline` first",
                def.status
            ),
        });
    }
    Ok(checkpoint)
}

/// One run of a purge: the store's reader and writer, and the pages done so far.
struct Run<'a> {
    store: &'a Store,
    reader: sinks::Reader,
    writer: Box<dyn sinks::table::TableWriter>,
    options: &'a PurgeOptions<'a>,
    pages: u64,
    cache: Option<cache::PurgeCache>,
}

impl Run<'_> {
    /// Scans `table` from `at` on, one page at a time: `page` turns a page's rows into deletes
    /// and adds to the counts. Returns `false` if the page budget ran out first.
    fn pages(
        &mut self,
        table: &'static str,
        columns: Vec<Column>,
        checkpoint: &mut Checkpoint,
        at: fn(&mut Checkpoint) -> &mut TableProgress,
        page: &mut dyn FnMut(&[sinks::table::Row], &mut PurgeCounts) -> Vec<Mutation>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<bool> {
        let limit = self.options.page_rows.max(1);
        while !at(checkpoint).done {
            if self.options.max_pages.is_some_and(|max| self.pages >= max) {
                return Ok(false);
            }
            // The first key after the last one done: `after 0x00`.
            let start = at(checkpoint).after.clone().map_or_else(Vec::new, |mut k| {
                k.push(0);
                k
            });
            let spec = ScanSpec {
                start,
                limit: Some(limit),
                columns: columns.clone(),
                ..ScanSpec::default()
            };
            let rows = self.reader.scan(table, &spec)?;
            let deletes = page(&rows, &mut checkpoint.counts);
            let users = match &self.cache {
                Some(_) => cache::PurgeCache::changed_users(&deletes),
                None => Vec::new(),
            };
            self.writer.write(deletes)?;
            self.writer.flush()?;
            self.store.persist()?;
            if let Some(cache) = &mut self.cache {
                cache.invalidate(&users, &mut checkpoint.counts);
            }
            let state = at(checkpoint);
            if let Some(last) = rows.last() {
                state.after = Some(last.key.clone());
            }
            state.done = rows.len() < limit;
            checkpoint.save(self.options.checkpoint)?;
            self.pages += 1;
            progress(Progress::Page {
                table,
                counts: checkpoint.counts,
            });
        }
        progress(Progress::TableDone {
            table,
            counts: checkpoint.counts,
        });
        Ok(true)
    }

    /// Deletes the code's column, in either family, from every profile row holding it.
    fn profile(
        &mut self,
        checkpoint: &mut Checkpoint,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<bool> {
        let code = self.options.code.as_bytes();
        // Both families: a gray tag may change its value type, and so its family.
        let families = [DIMENSION_FAMILY, BEHAVIOR_FAMILY];
        let columns = families.iter().map(|f| Column::new(f, code)).collect();
        self.pages(
            PROFILE_TABLE,
            columns,
            checkpoint,
            |c| &mut c.profile,
            &mut |rows, counts| {
                counts.profile_rows += rows.len() as u64;
                let mut deletes = Vec::new();
                for row in rows {
                    for family in families {
                        if row.cell(family, code).is_some() {
                            counts.columns_deleted += 1;
                            deletes.push(Mutation::DeleteColumn {
                                table: PROFILE_TABLE,
                                row: row.key.clone(),
                                family: family.to_string(),
                                qualifier: code.to_vec(),
                                ts_ms: EVERY_VERSION,
                            });
                        }
                    }
                }
                deletes
            },
            progress,
        )
    }

    /// Deletes every history row of the code.
    fn history(
        &mut self,
        checkpoint: &mut Checkpoint,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<bool> {
        let code = self.options.code;
        self.pages(
            HISTORY_TABLE,
            Vec::new(),
            checkpoint,
            |c| &mut c.history,
            &mut |rows, counts| {
                counts.history_rows += rows.len() as u64;
                let ours = rows
                    .iter()
                    .filter(|row| parse_history_row(&row.key).is_some_and(|(_, c, _)| c == code));
                ours.map(|row| {
                    counts.history_deleted += 1;
                    Mutation::DeleteRow {
                        table: HISTORY_TABLE,
                        row: row.key.clone(),
                        ts_ms: EVERY_VERSION,
                    }
                })
                .collect()
            },
            progress,
        )
    }
}

#[cfg(test)]
mod tests;
