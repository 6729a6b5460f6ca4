//! `report --bench-fill`: hourly wide rows alone, for measuring the report (no narrow rows, no
//! replay).

use crate::codec::hourly::wide_put;
use crate::summary::HourSummary;
use crate::Result;
use pipeline::time::HOUR_SECS;

/// Puts per writer call.
const BATCH: usize = 10_000;

/// Writes `devices` devices (`bench00000`, …) × every hour of `[from, to)`: a point every
/// `interval` seconds with a smooth value, and the summary cells the window would write.
///
/// # Errors
/// A store error.
pub(super) fn fill(
    db: &sinks::Store,
    devices: u32,
    from: i64,
    to: i64,
    interval: i64,
) -> Result<()> {
    db.ensure_tables()?;
    let mut writer = db.writer();
    let mut batch = Vec::with_capacity(BATCH);
    let began = std::time::Instant::now();
    let mut rows = 0u64;
    for d in 0..devices {
        let device = format!("bench{d:05}");
        let mut hour = from;
        while hour < to {
            let points: Vec<(i64, f64)> = (0..HOUR_SECS / interval)
                .map(|k| {
                    let ts = hour + k * interval;
                    (
                        ts,
                        20.0 + ((ts / interval + i64::from(d)) % 100) as f64 / 10.0,
                    )
                })
                .collect();
            let summary = HourSummary::of_points(&points);
            batch.push(wide_put(&device, hour, &points, summary.as_ref()));
            rows += 1;
            if batch.len() == BATCH {
                writer.write(std::mem::take(&mut batch))?;
            }
            hour += HOUR_SECS;
        }
    }
    writer.write(batch)?;
    writer.flush()?;
    db.persist()?;
    eprintln!(
        "bench-fill: {rows} hourly rows of {devices} devices in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    Ok(())
}
