//! The clock TTLs are measured against, and a fjall compaction filter that drops expired cells
//! and versions past their family's count, as HBase compactions do.

use super::codec;
use fjall::compaction::filter::{
    CompactionFilter, CompactionFilterResult, Context, Factory, ItemAccessor, Verdict,
};
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The clock TTLs are measured against: milliseconds since the epoch.
pub(crate) type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The system's [`Clock`].
pub(crate) fn system_now_ms() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

/// Family names and their TTLs in milliseconds (`None`: forever) of one table.
pub(crate) type FamilyTtls = Arc<[(&'static str, Option<i64>)]>;

/// Family names and their [`crate::schema::FamilySpec::max_versions`] of one table, for the
/// families whose cells may be stored as versions ([`codec::encode_version_key`]): the
/// versioned ones, and, written by a `newest_timestamp_wins` writer, every family not packed.
pub(crate) type FamilyVersions = Arc<[(&'static str, u32)]>;

/// Makes a [`TtlFilter`] for each compaction of one table's keyspace.
pub(crate) struct TtlFilterFactory {
    table: &'static str,
    /// The table's generation whose keyspace this factory filters.
    generation: usize,
    families: FamilyTtls,
    versions: FamilyVersions,
    // fjall requires factories to be `RefUnwindSafe`; the clock only reads time and holds no
    // state a panic could leave half-updated, so asserting unwind safety is sound.
    now_ms: AssertUnwindSafe<Clock>,
}

impl TtlFilterFactory {
    pub(crate) fn new(
        table: &'static str,
        generation: usize,
        families: FamilyTtls,
        versions: FamilyVersions,
        now_ms: Clock,
    ) -> Self {
        TtlFilterFactory {
            table,
            generation,
            families,
            versions,
            now_ms: AssertUnwindSafe(now_ms),
        }
    }
}

impl Factory for TtlFilterFactory {
    fn name(&self) -> &str {
        self.table
    }

    fn make_filter(&self, _ctx: &Context) -> Box<dyn CompactionFilter> {
        // One "now" per compaction, as HBase's compaction scanner fixes `now` when it starts.
        Box::new(TtlFilter {
            table: self.table,
            oldest: self.generation == 0,
            families: self.families.clone(),
            versions: self.versions.clone(),
            now_ms: (self.now_ms.0)(),
            dropped: 0,
            past_count: 0,
            column: VersionCount::default(),
        })
    }
}

/// The versions of each cell of one row and family a compaction has met so far.
#[derive(Default)]
struct VersionCount {
    /// The row and family, as the start of their keys (`row 0x00 family`).
    at: Vec<u8>,
    /// Versions met per qualifier. A cell's versions come newest first, but not always one
    /// after the other: a longer qualifier's may sort between them
    /// ([`codec::encode_version_key`]).
    seen: HashMap<Vec<u8>, u32>,
}

impl VersionCount {
    /// Counts one more version of `qualifier` in the row and family `at` starts the key of, and
    /// returns how many of its versions this compaction has met, this one included.
    fn count(&mut self, at: &[u8], qualifier: &[u8]) -> u32 {
        if self.at != at {
            self.at.clear();
            self.at.extend_from_slice(at);
            self.seen.clear();
        }
        let seen = match self.seen.get_mut(qualifier) {
            Some(seen) => seen,
            None => self.seen.entry(qualifier.to_vec()).or_default(),
        };
        *seen += 1;
        *seen
    }
}

/// Replaces expired cells by tombstones while a compaction rewrites them, and removes the
/// versions of a cell past its family's count.
struct TtlFilter {
    table: &'static str,
    /// Whether this is the table's generation 0, below which no older write of a key can be.
    oldest: bool,
    families: FamilyTtls,
    versions: FamilyVersions,
    now_ms: i64,
    dropped: u64,
    past_count: u64,
    column: VersionCount,
}

impl TtlFilter {
    /// Whether the version `item` is past its family's count: this compaction has met as many
    /// newer versions of the cell as the family keeps.
    ///
    /// Those newer versions are in this generation, where reads see them, so this one is past
    /// the count wherever else the cell has versions; none of them expires before it (they are
    /// stamped later), and a column delete that removes one removes every older one too. So it
    /// is invisible for good, as after an HBase major compaction, and is removed.
    fn past_count(&mut self, key: &[u8], family: &[u8], qualifier: &[u8]) -> bool {
        let Some(&(_, keeps)) = self.versions.iter().find(|(f, _)| f.as_bytes() == family) else {
            return false;
        };
        // `row 0x00 family`: the key up to the family's end.
        let at = key.len() - qualifier.len() - 9;
        self.column.count(&key[..at], qualifier) > keeps
    }
}

impl CompactionFilter for TtlFilter {
    fn filter_item(&mut self, item: ItemAccessor<'_>, _ctx: &Context) -> CompactionFilterResult {
        let Some((_, family, column)) = codec::decode_key(item.key()) else {
            return Ok(Verdict::Keep);
        };
        if let codec::Column::Version(qualifier, _) = column {
            if self.past_count(item.key(), family, qualifier) {
                self.past_count += 1;
                // A tombstone, not `Destroy`: the same version may sit in a lower level.
                return Ok(Verdict::Remove);
            }
        }
        let ttl = self
            .families
            .iter()
            .find(|(name, _)| name.as_bytes() == family);
        let Some(&(_, Some(ttl))) = ttl else {
            return Ok(Verdict::Keep);
        };
        let value = item.value()?;
        match codec::decode_ts(&value) {
            Some(ts) if ts == codec::EXPIRED => Ok(Verdict::Keep),
            Some(ts) if codec::is_expired(ts, Some(ttl), self.now_ms) => {
                self.dropped += 1;
                if let codec::Column::Packed(_) = column {
                    // A put's packed cells hide the cells of earlier puts of the row with the
                    // same qualifiers, under other keys, which neither a tombstone nor the
                    // oldest generation would: keep what orders the put (its `seq`) under its
                    // key, which lists the qualifiers.
                    let Some(packed) = codec::PackedValue::decode(&value) else {
                        return Ok(Verdict::Keep);
                    };
                    let mut marker = Vec::new();
                    codec::encode_packed_expired(&mut marker, packed.seq);
                    return Ok(Verdict::ReplaceValue(marker.into()));
                }
                if !self.oldest {
                    // An older generation may hold an earlier write of this key, which a
                    // tombstone here would not hide: keep the key, with an empty value stamped
                    // so that it is expired under any clock. `purge_expired` removes it from
                    // every generation.
                    let mut marker = Vec::new();
                    codec::encode_value(&mut marker, codec::EXPIRED, &[]);
                    return Ok(Verdict::ReplaceValue(marker.into()));
                }
                // `Remove` leaves a tombstone rather than dropping the item outright (`Destroy`):
                // an older version of the key in a lower level must not resurface. Tombstones
                // vanish when they reach the last level.
                Ok(Verdict::Remove)
            }
            _ => Ok(Verdict::Keep),
        }
    }

    fn finish(self: Box<Self>) {
        if self.dropped > 0 || self.past_count > 0 {
            tracing::debug!(
                table = self.table,
                cells = self.dropped,
                versions = self.past_count,
                "compaction dropped expired cells and versions past their family's count"
            );
        }
    }
}
