//! Per worker, which offsets may be committed: what is durable, and where the hours that are
//! not final yet begin (see [`OffsetLedger`]).

use std::collections::BTreeMap;

/// Where a partition could be committed: the next offset, and the newest event time of the
/// readings before it (stored with the commit, restored on restart).
pub(super) type Position = (i64, Option<i64>);

/// Per worker: which offsets are durable and which readings' hours are still open.
///
/// A partition is committed up to the lower of (a) the next offset after everything durable and
/// (b) the first offset of a reading whose hour is not final yet (the frontier has not passed
/// its end plus the allowed lateness). (b) makes restarts exact for the wide rows' hour
/// summaries, which the window computes from the whole hour: a restarted job re-reads every
/// reading of each hour it may still change, so it rebuilds that hour's window completely. A
/// job without a window (the profile job) has no (b): it commits what is durable.
#[derive(Debug)]
pub(super) struct OffsetLedger {
    /// Emission time → per local partition, the position after the readings emitted then.
    pending: BTreeMap<u64, Vec<Option<Position>>>,
    /// Per local partition, the position after everything durable.
    durable: Vec<Option<Position>>,
    /// Per local partition: start of each hour not final yet → the position of its first reading.
    open: Vec<BTreeMap<i64, Position>>,
    /// Per local partition, the committed next offset.
    pub(super) committed: Vec<Option<i64>>,
    /// The hourly window's spec, which says when an hour is final (`None`: the job keeps no
    /// window, and what is durable is committed).
    window: Option<operators::WindowSpec>,
    /// The newest durable frontier taken in: hours final before it stay final after a restart.
    pub(super) frontier: u64,
    /// Per local partition, the frontier of the commit this run resumed from: the previous runs
    /// closed the hours final there, and this run skipped their re-read readings, so no commit
    /// of the partition may carry a lower frontier (see [`OffsetLedger::to_commit`]).
    pub(super) resumed_frontier: Vec<u64>,
}

fn merge(slot: &mut Option<Position>, next: Position) {
    *slot = Some(match *slot {
        Some((o, ts)) => (o.max(next.0), ts.max(next.1)),
        None => next,
    });
}

impl OffsetLedger {
    pub(super) fn new(partitions: usize, window: Option<operators::WindowSpec>) -> Self {
        OffsetLedger {
            pending: BTreeMap::new(),
            durable: vec![None; partitions],
            open: vec![BTreeMap::new(); partitions],
            committed: vec![None; partitions],
            window,
            frontier: 0,
            resumed_frontier: vec![0; partitions],
        }
    }

    /// Records the record at `offset` of local partition `local`, emitted at `time`; `hour` is
    /// the start of its reading's hour (`None` for a rejected record); `before` and `after` are
    /// the partition's newest event time before and after it.
    pub(super) fn record(
        &mut self,
        time: u64,
        local: usize,
        offset: i64,
        hour: Option<i64>,
        before: Option<i64>,
        after: Option<i64>,
    ) {
        if let Some(h) = hour {
            self.open[local].entry(h).or_insert((offset, before));
        }
        let n = self.durable.len();
        let slots = match self.pending.last_entry() {
            Some(e) if *e.key() == time => e.into_mut(),
            _ => self.pending.entry(time).or_insert_with(|| vec![None; n]),
        };
        merge(&mut slots[local], (offset + 1, after));
    }

    /// Takes in the probe's frontier: what was emitted before it is durable, and hours that
    /// end (plus lateness) before it are final. `None` (the dataflow drained) makes everything
    /// durable but no hour final: the watermark did not get there.
    pub(super) fn advance(&mut self, frontier: Option<u64>) {
        while let Some(entry) = self.pending.first_entry() {
            if frontier.is_some_and(|f| *entry.key() >= f) {
                break;
            }
            for (local, slot) in entry.remove().into_iter().enumerate() {
                if let Some(next) = slot {
                    merge(&mut self.durable[local], next);
                }
            }
        }
        if let Some(f) = frontier {
            self.frontier = self.frontier.max(f);
            if let Some(window) = self.window {
                for open in &mut self.open {
                    open.retain(|&h, _| !window.is_final(h.max(0) as u64, f));
                }
            }
        }
    }

    /// `(local partition, position, durable next offset, frontier)` to commit: see the type's
    /// docs.
    ///
    /// The frontier is the newest one taken in, or the partition's resumed frontier if that is
    /// newer. A restarted job's durable frontier starts low (the watermark is the minimum over
    /// all partitions, and other partitions may have resumed from older commits), while it skips
    /// the re-read readings of the hours its partition's last commit had closed; without the
    /// floor, a commit past some of those readings would carry a frontier at which their hour
    /// is open again, and the next restart would rebuild that hour from the rest of its
    /// readings, rewriting its summary cells from a part of the hour.
    pub(super) fn to_commit(&self) -> Vec<(usize, Position, i64, u64)> {
        (0..self.durable.len())
            .filter_map(|local| {
                let durable = self.durable[local]?;
                let first_open = self.open[local].values().min_by_key(|p| p.0).copied();
                let pos = match first_open {
                    Some(open) if open.0 < durable.0 => open,
                    _ => durable,
                };
                let frontier = self.frontier.max(self.resumed_frontier[local]);
                self.committed[local]
                    .is_none_or(|c| pos.0 > c)
                    .then_some((local, pos, durable.0, frontier))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hourly(allowed_lateness: u64) -> operators::WindowSpec {
        operators::WindowSpec {
            width: 3600,
            allowed_lateness,
            early_fire: None,
            max_pending: None,
        }
    }

    const H: i64 = 1724101200;

    #[test]
    fn ledger_commits_only_what_the_probe_passed() {
        let mut l = OffsetLedger::new(2, Some(hourly(0)));
        l.record(0, 0, 4, Some(H), None, Some(H + 10));
        l.record(0, 1, 2, None, None, None);
        l.record(70, 0, 8, Some(H + 3600), Some(H + 10), Some(H + 3601));
        l.record(100, 1, 3, Some(H + 3600), None, Some(H + 3700));
        assert!(l.to_commit().is_empty());
        // Frontier at 70: time 0 is durable, 70 is not; hour H is not final before H + 3600.
        l.advance(Some(70));
        assert_eq!(
            l.to_commit(),
            vec![(0, (4, None), 5, 70), (1, (3, None), 3, 70)]
        );
        // Everything durable; hour H is final, hour H + 3600 is not: up to its first reading.
        l.advance(Some(H as u64 + 3600));
        assert_eq!(
            l.to_commit(),
            vec![
                (0, (8, Some(H + 10)), 9, H as u64 + 3600),
                (1, (3, None), 4, H as u64 + 3600)
            ]
        );
        assert_eq!(l.frontier, H as u64 + 3600);
        l.committed = vec![Some(8), Some(3)];
        assert!(l.to_commit().is_empty());
        // Drained: no hour becomes final by that alone.
        l.advance(None);
        assert!(l.to_commit().is_empty());
        l.advance(Some(H as u64 + 7200));
        assert_eq!(
            l.to_commit(),
            vec![
                (0, (9, Some(H + 3601)), 9, H as u64 + 7200),
                (1, (4, Some(H + 3700)), 4, H as u64 + 7200)
            ]
        );
        assert!(l.pending.is_empty());
        assert_eq!(l.frontier, H as u64 + 7200);
    }

    /// A restarted run's durable frontier starts below the frontier a partition resumed from
    /// when other partitions resumed from older commits. A commit past some of the skipped
    /// readings of an hour closed at the partition's frontier must still say that hour is
    /// closed, or the next restart rebuilds it from the rest of its readings.
    #[test]
    fn a_commit_never_carries_a_frontier_below_the_one_its_partition_resumed_from() {
        // One hour of lateness: hour H is final from H + 7200 on.
        let mut l = OffsetLedger::new(2, Some(hourly(3600)));
        let closed = H as u64 + 7200;
        // Partition 0 resumed from a commit at offset 10 whose frontier closed hour H; the
        // other partition resumed from an older commit, so the job's watermark starts at H + 60.
        l.resumed_frontier = vec![closed, H as u64 + 60];
        l.committed = vec![Some(10), Some(3)];
        // Offsets 10..20 are re-read readings of hour H, skipped (no hour), emitted at H + 60;
        // offset 20 is a reading of hour H + 7200.
        for offset in 10..20 {
            l.record(
                H as u64 + 60,
                0,
                offset,
                None,
                Some(H + 3599),
                Some(H + 3599),
            );
        }
        l.record(
            H as u64 + 60,
            0,
            20,
            Some(H + 7200),
            Some(H + 3599),
            Some(H + 7200),
        );
        l.advance(Some(H as u64 + 61));
        let ready = l.to_commit();
        // Committed up to the open hour's first reading, past the skipped ones of hour H, with
        // a frontier at which hour H stays closed.
        assert_eq!(ready, vec![(0, (20, Some(H + 3599)), 21, closed)]);
        assert!(l.window.unwrap().is_final(H as u64, ready[0].3));
        // Once the run's own frontier is newer, it is the one committed.
        l.committed = vec![Some(20), Some(3)];
        l.record(
            closed + 10,
            0,
            21,
            Some(H + 7200),
            Some(H + 7200),
            Some(H + 7300),
        );
        l.record(closed + 10, 1, 3, Some(H + 7200), None, Some(H + 7210));
        l.advance(Some(closed + 3600 * 3));
        let ready = l.to_commit();
        assert_eq!(
            ready.iter().map(|r| r.3).collect::<Vec<_>>(),
            vec![closed + 3600 * 3; 2]
        );
    }

    /// Without a window, a record is committed once the probe passed its emission time: the
    /// profile job's offsets do not wait for the watermark to pass the event times after them,
    /// and the final commit of a drained job covers every record read.
    #[test]
    fn without_a_window_what_is_durable_is_committed() {
        let mut l = OffsetLedger::new(1, None);
        l.record(H as u64, 0, 4, None, None, Some(H + 40));
        l.record(H as u64 + 10, 0, 5, None, Some(H + 40), Some(H + 41));
        l.advance(Some(H as u64 + 1));
        assert_eq!(l.to_commit(), vec![(0, (5, Some(H + 40)), 5, H as u64 + 1)]);
        l.committed = vec![Some(5)];
        l.advance(None);
        assert_eq!(l.to_commit(), vec![(0, (6, Some(H + 41)), 6, H as u64 + 1)]);
    }
}
