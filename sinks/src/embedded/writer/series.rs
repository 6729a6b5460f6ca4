//! Series puts (issue 38): a put of one reading, checked against the table's series layout,
//! buffered as a point, and sealed with the writer's other writes as one run of chunks, one per
//! (time partition, series bucket), in the table's series keyspace.

use super::EmbeddedWriter;
use crate::embedded::series::{self, Point};
use crate::embedded::store::series::{bucket_of, partition_of, run_key, MergeContext, SealedRun};
use crate::embedded::store::Table;
use crate::schema::{SeriesLayout, SeriesPoints};
use crate::table::Cell;
use crate::{Error, Result};

/// What [`EmbeddedWriter::put_series`] made of a put's cells.
enum Taken {
    /// Its point cells are points, buffered; the others are the caller's.
    Points,
    /// Nothing: the put has no point cell, or its row is not a series row.
    None,
    /// Nothing: a point cell is not a point (the points pushed for the put are dropped).
    Refused,
}

/// Points a table's buffer holds before they are sealed into the batch (as chunks of about a
/// 64th of this each, [`crate::embedded::store::series::BUCKETS`]); a flush seals what there is.
/// The bound is the writer's memory: some 100 bytes a point before it is sealed, 2 after.
pub(crate) const SEAL_POINTS: usize = 1 << 18;

impl EmbeddedWriter {
    /// Buffers as series points the cells of a put of `family` (sorted by qualifier, no
    /// repeats) of `row` that are points exactly, and removes them from `cells`; the cells left
    /// are the caller's to store generic. Points are taken only if the table has series runs
    /// for this family, the row splits into `(series, row time)` and joins back to itself, and
    /// every *point cell* of the put (a cell the layout's [`SeriesPoints`] names a point: a
    /// narrow row's value or extra, a wide row's offset) is one: stamped as the row time says,
    /// a value whose bytes the layout renders back from their double, an extra that is
    /// non-empty UTF-8. The put's other cells (a wide row's summary) are left, and need no
    /// ordering against the points: they hold other qualifiers.
    ///
    /// If a point cell is not a point, every cell is left, and the buffered points are sealed
    /// first and the row's partition marked (see below).
    pub(super) fn put_series(
        &mut self,
        table_index: usize,
        table: &Table,
        row: &[u8],
        family: &str,
        cells: &mut Vec<&Cell>,
    ) -> Result<()> {
        let Some(runs) = &table.series else {
            return Ok(());
        };
        let layout = &runs.layout;
        if family != layout.family {
            return Ok(());
        }
        let start = self.series[table_index].len();
        match self.as_points(table_index, layout, row, cells) {
            Taken::Points => {}
            Taken::None => return Ok(()),
            Taken::Refused => {
                self.series[table_index].truncate(start);
                // A point cell of another shape is stored generic, under a seq given after
                // every point buffered so far: seal those first, so that the later put wins.
                // Its partition is marked before it takes that seq, so no merge reorders runs
                // around it.
                self.seal_series(table_index)?;
                runs.mark_row(row, &self.store.inner.db)
                    .map_err(|e| self.store.inner.fjall_error("mark a series partition", e))?;
                return Ok(());
            }
        }
        if self.series[table_index].len() >= SEAL_POINTS {
            self.seal_series(table_index)?;
        }
        Ok(())
    }

    /// Pushes onto table `index`'s buffer the points a put's `cells` are and removes them from
    /// `cells` (see [`EmbeddedWriter::put_series`]); or, refused, leaves `cells` as they were.
    fn as_points(
        &mut self,
        index: usize,
        layout: &SeriesLayout,
        row: &[u8],
        cells: &mut Vec<&Cell>,
    ) -> Taken {
        let Some((series, time)) = layout.split_exact(row, &mut self.key) else {
            // Not a series row: its cells cannot meet any point.
            return Taken::None;
        };
        let Some(stamp) = (layout.stamp)(time) else {
            return Taken::None;
        };
        match layout.points {
            SeriesPoints::Row { value, extra } => {
                if !cells
                    .iter()
                    .any(|c| c.qualifier == value || c.qualifier == extra)
                {
                    return Taken::None;
                }
                let (v, x) = match cells[..] {
                    [v] if v.qualifier == value => (v, None),
                    [a, b] if a.qualifier == value && b.qualifier == extra => (a, Some(b)),
                    [a, b] if b.qualifier == value && a.qualifier == extra => (b, Some(a)),
                    _ => return Taken::Refused,
                };
                if v.ts_ms != stamp || x.is_some_and(|x| x.ts_ms != stamp) {
                    return Taken::Refused;
                }
                let Some(number) = self.exact_value(layout, &v.value) else {
                    return Taken::Refused;
                };
                let extra = match x {
                    None => String::new(),
                    Some(x) if x.value.is_empty() => return Taken::Refused,
                    Some(x) => match std::str::from_utf8(&x.value) {
                        Ok(text) => text.to_owned(),
                        Err(_) => return Taken::Refused,
                    },
                };
                self.series[index].push(Point {
                    series: series.to_owned(),
                    ts: time,
                    value: number,
                    extra,
                });
                cells.clear();
                Taken::Points
            }
            SeriesPoints::Cells {
                time: point_time,
                row_time,
                qualifier,
            } => {
                let mut taken = false;
                for c in cells.iter() {
                    let Some(at) = point_time(time, &c.qualifier) else {
                        continue;
                    };
                    // The point's cell must be where the layout puts the point back.
                    self.key.clear();
                    qualifier(time, at, &mut self.key);
                    if row_time(at) != time || self.key != c.qualifier || c.ts_ms != stamp {
                        return Taken::Refused;
                    }
                    let Some(number) = self.exact_value(layout, &c.value) else {
                        return Taken::Refused;
                    };
                    self.series[index].push(Point {
                        series: series.to_owned(),
                        ts: at,
                        value: number,
                        extra: String::new(),
                    });
                    taken = true;
                }
                if !taken {
                    return Taken::None;
                }
                cells.retain(|c| point_time(time, &c.qualifier).is_none());
                Taken::Points
            }
        }
    }

    /// The double of a point cell's `bytes`, if the layout renders them back exactly.
    fn exact_value(&mut self, layout: &SeriesLayout, bytes: &[u8]) -> Option<f64> {
        let number = (layout.parse)(bytes)?;
        self.value.clear();
        (layout.render)(number, &mut self.value);
        (self.value == bytes).then_some(number)
    }

    /// Seals table `index`'s buffered points into the batch as one run under a new seq: one
    /// chunk per (partition, bucket), the last put of a (series, time) kept. Also queues the
    /// removal of the partitions the table's TTL has passed.
    pub(super) fn seal_series(&mut self, index: usize) -> Result<()> {
        if self.series[index].is_empty() {
            return Ok(());
        }
        let mut points = std::mem::take(&mut self.series[index]);
        let inner = &self.store.inner;
        let table = &inner.tables[index];
        let Some(runs) = &table.series else {
            return Ok(());
        };
        let seq = inner.next_series_seq()?;
        self.sealed_seqs.push(seq);
        let layout = runs.layout;
        let group = |p: &Point| (partition_of(layout.point_stamp(p.ts)), bucket_of(&p.series));
        // Stable: of a (series, time), the last put comes last.
        let mut order: Vec<(i64, u16, u32)> = points
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let (partition, bucket) = group(p);
                (partition, bucket, u32::try_from(i).unwrap_or(u32::MAX))
            })
            .collect();
        order.sort_unstable();
        let mut chunk: Vec<Point> = Vec::new();
        let mut at = 0;
        while at < order.len() {
            let (partition, bucket, _) = order[at];
            let end = at
                + order[at..]
                    .iter()
                    .take_while(|o| o.0 == partition && o.1 == bucket)
                    .count();
            chunk.clear();
            chunk.extend(order[at..end].iter().map(|o| {
                std::mem::replace(
                    &mut points[o.2 as usize],
                    Point {
                        series: String::new(),
                        ts: 0,
                        value: 0.0,
                        extra: String::new(),
                    },
                )
            }));
            // By (series, time), put order kept; then the last of each.
            chunk.sort_by(|a, b| a.series.cmp(&b.series).then(a.ts.cmp(&b.ts)));
            chunk.reverse();
            chunk.dedup_by(|later, kept| later.series == kept.series && later.ts == kept.ts);
            // Reversed, each (series, time)'s last put came first and was kept.
            let bytes = series::encode(&chunk).map_err(|e| Error::Invalid(e.to_string()))?;
            self.batch
                .insert(&runs.keyspace, run_key(partition, bucket, seq), bytes);
            runs.add_partition(partition);
            self.sealed.push((
                index,
                SealedRun {
                    partition,
                    bucket,
                    seq,
                },
            ));
            at = end;
        }
        if let Some((_, Some(ttl))) = table.family(runs.layout.family.as_bytes()) {
            runs.drop_expired(ttl, (inner.now_ms)(), &mut self.batch)
                .map_err(|e| inner.fjall_error("drop expired series partitions", e))?;
        }
        Ok(())
    }

    /// After the writer's batch was committed (`committed`) or failed: registers the runs it
    /// sealed for merges, then gives up their seqs, in that order (see
    /// [`crate::embedded::store::series::SeriesTable::register`]); then, if committed, merges
    /// the runs of each (partition, bucket) it wrote to that make a full group, and closes the
    /// partitions its newest run makes old. Merges run here, on the writer's thread, between
    /// its flushes.
    pub(super) fn settle_series(&mut self, committed: bool) -> Result<()> {
        let sealed = std::mem::take(&mut self.sealed);
        let seqs = std::mem::take(&mut self.sealed_seqs);
        let inner = &self.store.inner;
        let registered = if committed {
            self.register(&sealed)
        } else {
            Ok(())
        };
        inner.settle_series_seqs(&seqs);
        registered?;
        if !committed || sealed.is_empty() {
            return Ok(());
        }
        let watermark = || inner.merge_watermark();
        let mut touched: Vec<(usize, i64, u16)> = sealed
            .iter()
            .map(|(t, r)| (*t, r.partition, r.bucket))
            .collect();
        touched.sort_unstable();
        touched.dedup();
        let now_ms = (inner.now_ms)();
        for index in 0..inner.tables.len() {
            let table = &inner.tables[index];
            let Some(runs) = &table.series else {
                continue;
            };
            let cx = MergeContext {
                db: &inner.db,
                watermark: &watermark,
                ttl_ms: table
                    .family(runs.layout.family.as_bytes())
                    .and_then(|(_, ttl)| ttl),
                now_ms,
            };
            let fail = |e| inner.fjall_error("merge series runs", e);
            for &(_, partition, bucket) in touched.iter().filter(|t| t.0 == index) {
                runs.merge(&cx, partition, bucket, false).map_err(fail)?;
            }
            if let Some(newest) = touched.iter().filter(|t| t.0 == index).map(|t| t.1).max() {
                runs.close_before(&cx, newest).map_err(fail)?;
            }
        }
        Ok(())
    }

    /// Registers committed runs with their tables.
    fn register(&self, sealed: &[(usize, SealedRun)]) -> Result<()> {
        let inner = &self.store.inner;
        for (index, table) in inner.tables.iter().enumerate() {
            let Some(runs) = &table.series else {
                continue;
            };
            let of_table: Vec<SealedRun> = sealed
                .iter()
                .filter(|(t, _)| *t == index)
                .map(|(_, r)| *r)
                .collect();
            if !of_table.is_empty() {
                runs.register(&of_table)
                    .map_err(|e| inner.fjall_error("register series runs", e))?;
            }
        }
        Ok(())
    }

    /// Seals every table's buffered points (see [`EmbeddedWriter::seal_series`]).
    pub(super) fn seal_all_series(&mut self) -> Result<()> {
        for index in 0..self.series.len() {
            self.seal_series(index)?;
        }
        Ok(())
    }
}
