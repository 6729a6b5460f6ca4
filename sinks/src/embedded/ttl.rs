//! The clock TTLs are measured against, and a fjall compaction filter that drops expired cells,
//! as HBase compactions do.

use super::codec;
use fjall::compaction::filter::{
    CompactionFilter, CompactionFilterResult, Context, Factory, ItemAccessor, Verdict,
};
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

/// Makes a [`TtlFilter`] for each compaction of one table's keyspace.
pub(crate) struct TtlFilterFactory {
    table: &'static str,
    /// The table's generation whose keyspace this factory filters.
    generation: usize,
    families: FamilyTtls,
    // fjall requires factories to be `RefUnwindSafe`; the clock only reads time and holds no
    // state a panic could leave half-updated, so asserting unwind safety is sound.
    now_ms: AssertUnwindSafe<Clock>,
}

impl TtlFilterFactory {
    pub(crate) fn new(
        table: &'static str,
        generation: usize,
        families: FamilyTtls,
        now_ms: Clock,
    ) -> Self {
        TtlFilterFactory {
            table,
            generation,
            families,
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
            now_ms: (self.now_ms.0)(),
            dropped: 0,
        })
    }
}

/// Replaces expired cells by tombstones while a compaction rewrites them.
struct TtlFilter {
    table: &'static str,
    /// Whether this is the table's generation 0, below which no older write of a key can be.
    oldest: bool,
    families: FamilyTtls,
    now_ms: i64,
    dropped: u64,
}

impl CompactionFilter for TtlFilter {
    fn filter_item(&mut self, item: ItemAccessor<'_>, _ctx: &Context) -> CompactionFilterResult {
        let Some((_, family, column)) = codec::decode_key(item.key()) else {
            return Ok(Verdict::Keep);
        };
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
        if self.dropped > 0 {
            tracing::debug!(
                table = self.table,
                cells = self.dropped,
                "compaction dropped expired cells"
            );
        }
    }
}
