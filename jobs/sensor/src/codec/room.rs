//! The room view's table (`ts_room_latest`): one row per device under its room, its key, its
//! cells and their decoding.
//!
//! Row key `<room>_<device>`. Cells: `t:v` = the device's latest value as metric text, `t:o` =
//! the reading's own `room` field (empty: none), both stamped with the reading's event time in
//! milliseconds. A row is deleted with a row delete bounded by the retracted reading's time.

use super::cell;
use super::key::{id_prefix, SEPARATOR};
use crate::tables::{FAMILY, ROOM_TABLE};
use sinks::table::{Mutation, Row};

/// The qualifier of the view's value cell.
pub const VALUE_QUALIFIER: &[u8] = b"v";
/// The qualifier of the cell that keeps the reading's own `room` field (empty: none), so that a
/// job continuing from the table knows where a device goes if it leaves the registry.
pub const OWN_ROOM_QUALIFIER: &[u8] = b"o";

/// The row key of a device in the room view: `<room>_<device>`.
pub fn room_key(room: &str, device: &str) -> Vec<u8> {
    let mut key = room_prefix(room);
    key.extend_from_slice(device.as_bytes());
    key
}

/// The prefix of every row key of `room` in the room view: `<room>_`.
pub fn room_prefix(room: &str) -> Vec<u8> {
    id_prefix(room)
}

/// The room and device of a room-view row key, split at the first `_` (neither a valid room id
/// nor a valid device id contains one); `None` for a key without `_`.
pub fn parse_room_key(key: &str) -> Option<(&str, &str)> {
    key.split_once(char::from(SEPARATOR))
}

/// The put of `device`'s row in `room`: its latest reading at `ts` (epoch seconds), `value`
/// the metric text, `own` the room the reading itself reported.
pub fn room_put(room: &str, device: &str, ts: i64, value: String, own: Option<String>) -> Mutation {
    let ts_ms = ts * 1000;
    Mutation::Put {
        table: ROOM_TABLE,
        row: room_key(room, device),
        cells: vec![
            cell(VALUE_QUALIFIER.to_vec(), ts_ms, value.into_bytes()),
            cell(
                OWN_ROOM_QUALIFIER.to_vec(),
                ts_ms,
                own.unwrap_or_default().into_bytes(),
            ),
        ],
    }
}

/// The delete of `device`'s row in `room`, bounded by the retracted reading's time `ts` (epoch
/// seconds), so it can never remove a newer put.
pub fn room_delete(room: &str, device: &str, ts: i64) -> Mutation {
    Mutation::DeleteRow {
        table: ROOM_TABLE,
        row: room_key(room, device),
        ts_ms: ts * 1000,
    }
}

/// The latest reading a room-view row holds: its event time (epoch seconds, from the `t:v`
/// cell's timestamp) and the `t:v` bytes; `None` if the row has no `t:v` cell.
pub fn latest_of(row: &Row) -> Option<(i64, &[u8])> {
    let cell = row.cell(FAMILY, VALUE_QUALIFIER)?;
    Some((cell.ts_ms.div_euclid(1000), &cell.value))
}

/// The room the row's reading itself reported (`t:o`), for a row of `room`: `None` if the cell
/// is empty. Rows written before the own room was kept have no `t:o`: the row's room stands
/// for it.
pub fn own_room_of(row: &Row, room: &str) -> Option<String> {
    match row.cell(FAMILY, OWN_ROOM_QUALIFIER) {
        Some(c) if c.value.is_empty() => None,
        Some(c) => Some(String::from_utf8_lossy(&c.value).into_owned()),
        None => Some(room.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn put_row(m: Mutation) -> Row {
        let Mutation::Put { table, row, cells } = m else {
            panic!("room_put makes a put, got {m:?}")
        };
        assert_eq!(table, ROOM_TABLE);
        Row { key: row, cells }
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

    #[test]
    fn a_put_holds_the_value_and_the_own_room_at_the_readings_time() {
        let row = put_row(room_put(
            "lab1",
            "dev1",
            10,
            "2.5".into(),
            Some("own7".into()),
        ));
        assert_eq!(row.key, b"lab1_dev1");
        let cells = crate::codec::cell_parts(&row);
        assert_eq!(
            cells,
            [
                (&b"v"[..], 10_000, &b"2.5"[..]),
                (&b"o"[..], 10_000, &b"own7"[..])
            ]
        );
        assert_eq!(latest_of(&row), Some((10, &b"2.5"[..])));
        assert_eq!(own_room_of(&row, "lab1").as_deref(), Some("own7"));
        // No own room: an empty `t:o`, read back as none.
        let row = put_row(room_put("lab1", "dev1", 10, "2.5".into(), None));
        assert_eq!(own_room_of(&row, "lab1"), None);
        // A row written before `t:o` existed: its room stands for the own room.
        let old = Row {
            key: row.key.clone(),
            cells: row.cells[..1].to_vec(),
        };
        assert_eq!(own_room_of(&old, "lab1").as_deref(), Some("lab1"));
        assert_eq!(
            latest_of(&Row {
                key: row.key,
                cells: Vec::new()
            }),
            None
        );
    }

    #[test]
    fn a_delete_is_bounded_by_the_retracted_readings_time() {
        assert!(matches!(
            room_delete("a", "d1", 10),
            Mutation::DeleteRow { table: ROOM_TABLE, row, ts_ms: 10_000 } if row == b"a_d1"
        ));
    }

    proptest! {
        #[test]
        fn key_round_trips_and_its_room_prefix_holds_exactly_the_rooms_keys(
            room in "[A-Za-z0-9.:-]{1,12}", other in "[A-Za-z0-9.:-]{1,12}",
            device in "[A-Za-z0-9.:-]{1,12}",
        ) {
            let key = room_key(&room, &device);
            let text = String::from_utf8(key.clone()).expect("ascii");
            prop_assert_eq!(parse_room_key(&text), Some((room.as_str(), device.as_str())));
            prop_assert!(key.starts_with(&room_prefix(&room)));
            prop_assert_eq!(
                room_key(&other, &device).starts_with(&room_prefix(&room)),
                other == room
            );
        }
    }
}
