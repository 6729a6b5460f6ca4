//! The dashboard's room queries: one prefix scan of the view, or the seed's fan-out.

use serde::Serialize;

use crate::codec::key::salt_bucket;
use crate::codec::key::SALT_BUCKETS;
use crate::codec::narrow::KeyScheme;
use crate::codec::room::{latest_of, parse_room_key, room_prefix};
use crate::tables::ROOM_TABLE;
use crate::{query, registry, Result};
use sinks::table::{ScanSpec, TableReader};

/// One device's current value in a room.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoomEntry {
    /// Device id.
    pub device: String,
    /// Event time of its latest reading, epoch seconds.
    pub ts: i64,
    /// Its latest value.
    pub value: f64,
}

/// Every device's current value in `room`, from one prefix scan of the room view.
///
/// # Errors
/// A store error or a malformed row.
pub fn room(store: &dyn TableReader, room: &str) -> Result<Vec<RoomEntry>> {
    registry::validate_room(room)?;
    let rows = store.scan(ROOM_TABLE, &ScanSpec::prefix(&room_prefix(room)))?;
    rows.iter()
        .filter_map(|row| {
            let (in_room, device) = parse_room_key(std::str::from_utf8(&row.key).ok()?)?;
            let device = (in_room == room).then(|| device.to_string())?;
            let (ts, value) = latest_of(row)?;
            let value = std::str::from_utf8(value).ok()?.parse().ok()?;
            Some(Ok(RoomEntry { device, ts, value }))
        })
        .collect()
}

/// The same answer the seed's way: the latest narrow row of each of the room's devices (from
/// the registry), with one thread per salt bucket scanning its devices' prefixes in parallel.
///
/// # Errors
/// A store error or a malformed row.
pub fn room_fanout(
    store: &dyn TableReader,
    scheme: KeyScheme,
    devices: &[String],
) -> Result<Vec<RoomEntry>> {
    let mut buckets: Vec<Vec<&String>> = vec![Vec::new(); SALT_BUCKETS as usize];
    for d in devices {
        buckets[salt_bucket(d) as usize].push(d);
    }
    let results: Vec<Result<Vec<RoomEntry>>> = std::thread::scope(|s| {
        let handles: Vec<_> = buckets
            .iter()
            .filter(|b| !b.is_empty())
            .map(|bucket| {
                s.spawn(move || {
                    let mut out = Vec::new();
                    for device in bucket {
                        if let Some(r) = query::latest(store, scheme, device)? {
                            out.push(RoomEntry {
                                device: r.device,
                                ts: r.ts,
                                value: r.value,
                            });
                        }
                    }
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(crate::Error::invalid("fan-out scan panicked")))
            })
            .collect()
    });
    let mut all = Vec::new();
    for r in results {
        all.extend(r?);
    }
    all.sort_by(|a, b| a.device.cmp(&b.device));
    Ok(all)
}
