//! The room view: every device's latest reading under its room, maintained incrementally with
//! differential dataflow, and the dashboard queries that read it.
//!
//! Latest per device is an upsert arrangement (one entry per device; a reading replaces it only
//! if its event time is newer, so out-of-order input never moves it backwards). It is joined
//! with the device registry (device → room); devices without an entry use the `room` field of
//! their own reading. Every change of the joined collection becomes a put of `<room>_<device>`
//! in `ts_room_latest`, and a device that leaves a room has its row there deleted.
//!
//! `view` builds the dataflow, `previous` reads what a previous run left in the table,
//! `registry_source` feeds the registry into it and `query` answers from the table.

mod previous;
mod query;
mod registry_source;
mod view;

pub use previous::PreviousView;
pub use query::{room, room_fanout, RoomEntry};
pub use registry_source::RegistryInput;
pub use view::room_view;

/// A row of the view: room, device, event time, metric text, the reading's own `room` field.
type RoomRow = (String, String, i64, String, Option<String>);

/// The qualifier of the view's value cell.
const VALUE_QUALIFIER: &[u8] = b"v";
/// The qualifier of the cell that keeps the reading's own `room` field (empty: none), so that a
/// job continuing from the table knows where a device goes if it leaves the registry.
const OWN_ROOM_QUALIFIER: &[u8] = b"o";

/// The row key of a device in the room view: `<room>_<device>`.
pub fn room_key(room: &str, device: &str) -> Vec<u8> {
    let mut key = room_prefix(room);
    key.extend_from_slice(device.as_bytes());
    key
}

/// The prefix of every row key of `room` in the room view: `<room>_`.
pub fn room_prefix(room: &str) -> Vec<u8> {
    format!("{room}_").into_bytes()
}

/// The room and device of a room-view row key, split at the first `_` (neither a valid room id
/// nor a valid device id contains one); `None` for a key without `_`.
pub fn parse_room_key(key: &str) -> Option<(&str, &str)> {
    key.split_once('_')
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A row of the view whose reading reported the row's room.
    pub(crate) fn row(room: &str, dev: &str, ts: i64, v: &str) -> RoomRow {
        (room.into(), dev.into(), ts, v.into(), Some(room.into()))
    }

    #[test]
    fn a_room_key_parses_back_and_starts_with_its_room_prefix() {
        let key = room_key("room031", "dev00786");
        assert_eq!(key, b"room031_dev00786");
        assert!(key.starts_with(&room_prefix("room031")));
        let text = String::from_utf8(key).expect("ascii");
        assert_eq!(parse_room_key(&text), Some(("room031", "dev00786")));
        assert_eq!(parse_room_key("no-separator"), None);
        // Written before room ids were checked: the part after the first `_` is no device id.
        assert_eq!(parse_room_key("a_b_dev1"), Some(("a", "b_dev1")));
    }
}
