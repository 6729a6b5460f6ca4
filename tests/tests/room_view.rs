//! The room view on the embedded store: latest reading per device under its room, registry
//! overrides and reloads, moves between rooms, out-of-order input, and the seed's fan-out answer.
//! `hbase_live.rs` runs the same scenarios (`room_view_common`) against HBase.

mod room_view_common;

use room_view_common::Target;

/// The embedded store `store/` in the test's directory, "now" two days after the recordings.
fn embedded() -> Target {
    Target {
        backend: vec!["--store".into(), "store".into()],
        now: e2e::NOW.into(),
        rebase: false,
        live_reads: false,
    }
}

#[test]
fn devices_follow_their_newest_reading_between_rooms() {
    let dir = tempfile::tempdir().expect("tempdir");
    room_view_common::devices_follow_their_newest_reading_between_rooms(&embedded(), dir.path());
}

#[test]
fn the_registry_overrides_rooms_and_fanout_gives_the_same_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    room_view_common::the_registry_overrides_rooms_and_fanout_gives_the_same_answer(
        &embedded(),
        dir.path(),
    );
}

#[test]
fn a_registry_change_while_running_moves_the_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    room_view_common::a_registry_change_while_running_moves_the_device(&embedded(), dir.path());
}

#[test]
fn a_registry_change_between_runs_moves_the_device_at_the_next_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    room_view_common::a_registry_change_between_runs_moves_the_device_at_the_next_run(
        &embedded(),
        dir.path(),
    );
}
