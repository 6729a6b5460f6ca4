//! The room view: every device's latest reading under its room, maintained incrementally with
//! differential dataflow, and the dashboard queries that read it.
//!
//! Latest per device is an upsert arrangement (one entry per device; a reading replaces it only
//! if its event time is newer, so out-of-order input never moves it backwards). It is joined
//! with the device registry (device → room); devices without an entry use the `room` field of
//! their own reading. Every change of the joined collection becomes a put of `<room>_<device>`
//! in `ts_room_latest`, and a device that leaves a room has its row there deleted (the table's
//! key and cells: [`crate::codec::room`]).
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A row of the view whose reading reported the row's room.
    pub(crate) fn row(room: &str, dev: &str, ts: i64, v: &str) -> RoomRow {
        (room.into(), dev.into(), ts, v.into(), Some(room.into()))
    }
}
