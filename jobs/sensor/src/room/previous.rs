//! The room view a previous run left in `ts_room_latest`, read when a job starts.

use std::sync::{Arc, Mutex};

use super::RoomRow;
use crate::codec::key::validate_device;
use crate::codec::room::{latest_of, own_room_of, parse_room_key};
use crate::reading::Reading;
use crate::tables::ROOM_TABLE;
use crate::{registry, Result};
use sinks::table::{ScanSpec, TableReader};

/// The room view a previous run left in `ts_room_latest`, read when a job starts.
///
/// The view's state (latest reading per device, the registry) lives in memory, so a new run
/// starts from the table: its rows are subtracted from the view's first output, and the valid
/// ones also seed the latest-per-device arrangement (with the reading's own room from `t:o`).
/// Rows the new run computes alike cancel out; a device the registry moved while no job ran has
/// its old row deleted, as if the move had happened while running, and one that left the
/// registry goes back to the room of its readings (the row's `t:o` cell); a row the view can
/// never produce (a room id with `_`, written before rooms were checked) is deleted.
#[derive(Debug, Clone, Default)]
pub struct PreviousView(Arc<Mutex<Vec<RoomRow>>>);

impl PreviousView {
    /// Reads every row of the room view in `store`. A row without `_` in its key or without a
    /// `t:v` cell is not one the view wrote: it is left alone, with a warning.
    ///
    /// # Errors
    /// A store error.
    pub fn read(store: &dyn TableReader) -> Result<Self> {
        let rows = store.scan(ROOM_TABLE, &ScanSpec::default())?;
        let mut view = Vec::with_capacity(rows.len());
        for row in rows {
            let key = String::from_utf8_lossy(&row.key);
            let parsed = parse_room_key(&key).zip(latest_of(&row));
            let Some(((room, device), (ts, value))) = parsed else {
                tracing::warn!(table = ROOM_TABLE, row = %key, "not a room-view row, left alone");
                continue;
            };
            view.push((
                room.to_string(),
                device.to_string(),
                ts,
                String::from_utf8_lossy(value).into_owned(),
                own_room_of(&row, room),
            ));
        }
        Ok(PreviousView(Arc::new(Mutex::new(view))))
    }

    /// Rows read.
    pub fn len(&self) -> usize {
        self.0.lock().map_or(0, |v| v.len())
    }

    /// Whether no row was read (or they were taken).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes the rows (once: the view is seeded by one worker).
    pub(super) fn take(&self) -> Vec<RoomRow> {
        self.0
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

/// The reading a stored row of the view stands for, if the view could have written the row.
pub(super) fn seed_reading((room, device, ts, value, own): &RoomRow) -> Option<Reading> {
    registry::validate_room(room).ok()?;
    validate_device(device).ok()?;
    if let Some(own) = own {
        registry::validate_room(own).ok()?;
    }
    let value = value.parse::<f64>().ok().filter(|v| v.is_finite())?;
    Some(Reading {
        device: device.clone(),
        ts: *ts,
        value,
        extra: match own {
            Some(own) => serde_json::json!({ "room": own }).to_string(),
            None => "{}".to_string(),
        },
        room: own.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::room::tests::row;

    #[test]
    fn only_rows_the_view_could_write_seed_it() {
        let seed = seed_reading(&row("lab1", "dev1", 10, "2.5")).expect("a view row");
        assert_eq!(
            (seed.device.as_str(), seed.ts, seed.value),
            ("dev1", 10, 2.5)
        );
        assert_eq!(seed.room().as_deref(), Some("lab1"));
        // A registry room: the seed carries the reading's own room, or none.
        let mut registered = row("lab1", "dev1", 10, "2.5");
        registered.4 = Some("own7".into());
        assert_eq!(
            seed_reading(&registered).unwrap().room().as_deref(),
            Some("own7")
        );
        registered.4 = None;
        assert_eq!(seed_reading(&registered).unwrap().room(), None);
        registered.4 = Some("a_b".into());
        assert!(seed_reading(&registered).is_none());
        // `a_b_dev1`, written before rooms were checked, read back either way round.
        assert!(seed_reading(&row("a_b", "dev1", 10, "2.5")).is_none());
        assert!(seed_reading(&row("a", "b_dev1", 10, "2.5")).is_none());
        assert!(seed_reading(&row("lab1", "dev1", 10, "warm")).is_none());
        assert!(seed_reading(&row("lab1", "dev1", 10, "NaN")).is_none());
    }
}
