//! One table of the store: its generations, read as one, and its families' settings.

use super::series::SeriesTable;
use crate::embedded::generations::{Generation, Lease, Merged, Span};
use crate::embedded::ttl::FamilyTtls;
use crate::table::TimeRange;
use fjall::{Keyspace, KvPair};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// One table: its generations and its families' TTLs.
pub(crate) struct Table {
    pub(crate) name: &'static str,
    /// The table's generations, oldest first (see [`crate::embedded::generations`]); writes go to
    /// the last.
    pub(super) generations: RwLock<Vec<Generation>>,
    /// `(family name, TTL in ms)`, as given by the table spec.
    pub(crate) families: FamilyTtls,
    /// The families whose puts' cells are stored as one key-value
    /// ([`crate::schema::FamilySpec::packed`]).
    pub(crate) packed: Vec<&'static str>,
    /// Each packed family's [`crate::schema::FamilySpec::packed_apart`], in the order of `packed`.
    pub(super) packed_apart: Vec<&'static [&'static str]>,
    /// The families that keep more than one version of a cell, with their
    /// [`crate::schema::FamilySpec::max_versions`]: each version is a key-value of its own
    /// ([`crate::embedded::codec::encode_version_key`]).
    pub(super) versioned: Vec<(&'static str, u32)>,
    /// The table's series runs, in a store created with the series layout
    /// ([`crate::schema::KeyCodec::series`]).
    pub(crate) series: Option<SeriesTable>,
}

/// A table's stored key-values over a key range in key order: its generations' (merged, the
/// newest generation's of a key winning) and its series points', as packed key-values. A key in
/// both comes from both, the series point first: reads keep a qualifier's cell of the newest
/// put by seq, as between two puts of other qualifiers.
pub(crate) struct Stored {
    merged: std::iter::Peekable<Merged>,
    series: std::iter::Peekable<std::vec::IntoIter<KvPair>>,
    /// An error reading the series runs, returned first.
    error: Option<fjall::Error>,
}

impl Stored {
    fn new(merged: Merged, series: fjall::Result<Vec<KvPair>>) -> Self {
        let (series, error) = match series {
            Ok(points) => (points, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        Stored {
            merged: merged.peekable(),
            series: series.into_iter().peekable(),
            error,
        }
    }
}

impl Iterator for Stored {
    type Item = fjall::Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.error.take() {
            return Some(Err(e));
        }
        let series_first = match (self.series.peek(), self.merged.peek()) {
            (None, _) | (Some(_), Some(Err(_))) => false,
            (Some(_), None) => true,
            (Some((a, _)), Some(Ok((b, _)))) => a <= b,
        };
        if series_first {
            self.series.next().map(Ok)
        } else {
            self.merged.next()
        }
    }
}

impl Table {
    /// The generations, oldest first, for reading. A writer that panicked while holding the lock
    /// left the list whole (it only pushes, removes or widens a span in place), so the list is
    /// read on.
    pub(super) fn read(&self) -> RwLockReadGuard<'_, Vec<Generation>> {
        self.generations
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The generations, oldest first, for changing the list or a span.
    pub(super) fn write(&self) -> RwLockWriteGuard<'_, Vec<Generation>> {
        self.generations
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Every generation, oldest first.
    pub(crate) fn generations(&self) -> Vec<Keyspace> {
        self.read().iter().map(|g| g.keyspace.clone()).collect()
    }

    /// Every generation, oldest first, leased for writes (removals) to all of them.
    pub(crate) fn leases(&self) -> Vec<Lease> {
        self.read().iter().map(Generation::lease).collect()
    }

    /// A lease of every generation with its span, oldest first.
    pub(crate) fn leases_with_spans(&self) -> Vec<(Lease, Span)> {
        self.read().iter().map(|g| (g.lease(), g.span)).collect()
    }

    /// The generations that may hold cells stamped within `range` (all of them without one),
    /// oldest first.
    pub(crate) fn generations_within(&self, range: Option<&TimeRange>) -> Vec<Keyspace> {
        self.read()
            .iter()
            .filter(|g| g.span.may_hold(range))
            .map(|g| g.keyspace.clone())
            .collect()
    }

    /// Every generation with its span, oldest first.
    #[cfg(test)]
    pub(crate) fn generation_spans(&self) -> Vec<(Keyspace, crate::embedded::generations::Span)> {
        self.read()
            .iter()
            .map(|g| (g.keyspace.clone(), g.span))
            .collect()
    }

    /// The visible stored cells whose keys start with `prefix`, in key order, read from the
    /// generations that may hold cells stamped within `time` (as [`Table::range`]).
    ///
    /// With series runs, a `prefix` of one row (`row 0x00`, or `row 0x00 family`) also yields
    /// the row's series point.
    pub(crate) fn prefix(&self, prefix: &[u8], time: Option<&TimeRange>) -> Stored {
        let merged = Merged::new(
            self.generations_within(time)
                .iter()
                .map(|g| g.prefix(prefix))
                .collect(),
        );
        let series = self
            .series
            .as_ref()
            .map_or(Ok(Vec::new()), |s| s.row_points(prefix, time));
        Stored::new(merged, series)
    }

    /// The visible stored cells with keys from `start` on (to `stop`, excluded, unless empty),
    /// in key order, read from the generations that may hold cells stamped within `time`.
    ///
    /// A key whose newest write is in a skipped generation, and so outside `time`, may then
    /// show an older write stamped within it: HBase's scans with a time range do the same while
    /// no compaction has dropped the older version. Hourglass never writes one cell with two
    /// timestamps (its cells' timestamps follow from their keys), so its answers do not depend
    /// on which generations are skipped.
    ///
    /// With series runs, the points whose rows lie in `[start, rows_stop)` come too (row keys;
    /// `rows_stop` empty: no end). It is the scan's own stop, which `stop` may have left open
    /// (a stop holding 0x00 does not bound stored keys); it also names the one series a range
    /// of one series' rows holds, so that only that series' bucket is decoded.
    pub(crate) fn range(
        &self,
        start: &[u8],
        stop: &[u8],
        time: Option<&TimeRange>,
        rows_stop: &[u8],
    ) -> Stored {
        let generations = self.generations_within(time);
        let iters = generations.iter().map(|g| {
            if stop.is_empty() {
                g.range(start..)
            } else {
                g.range(start..stop)
            }
        });
        let series = self
            .series
            .as_ref()
            .map_or(Ok(Vec::new()), |s| s.range_points(start, rows_stop, time));
        Stored::new(Merged::new(iters.collect()), series)
    }

    /// Every stored key-value of the generations, in key order, without the series points.
    pub(crate) fn generic_range(&self) -> Merged {
        Merged::new(
            self.generations_within(None)
                .iter()
                .map(Keyspace::iter)
                .collect(),
        )
    }

    /// The family's name and TTL, if the table has this family.
    pub(crate) fn family(&self, name: &[u8]) -> Option<(&'static str, Option<i64>)> {
        self.families
            .iter()
            .copied()
            .find(|(f, _)| f.as_bytes() == name)
    }

    /// Whether a put's cells of `family` are stored as one key-value.
    pub(crate) fn is_packed(&self, family: &str) -> bool {
        self.packed.contains(&family)
    }

    /// The qualifiers a put of packed `family` stores apart from its other cells
    /// ([`crate::schema::FamilySpec::packed_apart`]); none for a family not packed.
    pub(crate) fn packed_apart(&self, family: &str) -> &'static [&'static str] {
        self.packed
            .iter()
            .position(|f| *f == family)
            .map_or(&[], |i| self.packed_apart[i])
    }

    /// The versions of a cell `family` keeps ([`crate::schema::FamilySpec::max_versions`]; 1 for a
    /// family not versioned or not in the table).
    pub(crate) fn max_versions(&self, family: &[u8]) -> u32 {
        self.versioned
            .iter()
            .find(|(f, _)| f.as_bytes() == family)
            .map_or(1, |&(_, n)| n)
    }

    /// Whether `family` stores each version of a cell under a key of its own.
    pub(crate) fn is_versioned(&self, family: &str) -> bool {
        self.versioned.iter().any(|(f, _)| *f == family)
    }

    pub(super) fn has_ttl(&self) -> bool {
        self.families.iter().any(|(_, ttl)| ttl.is_some())
    }

    /// The longest TTL of the table's families if every family has one: a cell stamped before
    /// `now` minus it has expired, whatever its family.
    pub(super) fn longest_ttl(&self) -> Option<i64> {
        self.families
            .iter()
            .try_fold(i64::MIN, |most, (_, ttl)| ttl.map(|t| most.max(t)))
    }
}
