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

/// Replays `devices` devices × `per_device` readings 10 s apart from 2024-08-19T21:00:00Z with
/// every change of the view written (`room_write_interval_secs = 0`), the wall clock at `now`,
/// and returns the room rows the replay reports written.
fn room_rows_written(now: &str, devices: u32, per_device: i64, extra: &[&str]) -> u64 {
    const H: i64 = 1724101200;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut lines = Vec::new();
    for i in 0..per_device {
        for d in 0..devices {
            lines.push(format!(
                r#"{{"device":"d{d}","ts":{},"temp":{i},"room":"r{}"}}"#,
                H + i * 10,
                d % 3
            ));
        }
    }
    std::fs::write(dir.path().join("in.jsonl"), lines.join("\n") + "\n").expect("write");
    std::fs::write(
        dir.path().join("job.toml"),
        "room_write_interval_secs = 0\n",
    )
    .expect("write");
    let mut args = vec![
        "replay",
        "in.jsonl",
        "--store",
        "store",
        "--config",
        "job.toml",
        "--stats-json",
        "stats.json",
    ];
    args.extend_from_slice(extra);
    let out = e2e::hourglass_command(dir.path(), now, &args)
        .output()
        .expect("running hourglass");
    e2e::succeeded(&args, &out);
    let stats: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("stats.json")).expect("stats"))
            .expect("stats json");
    // Every device still ends under its room with its newest reading.
    for room in 0..3 {
        let csv = e2e::hourglass_ok(
            dir.path(),
            &[
                "query",
                "room",
                "--room",
                &format!("r{room}"),
                "--store",
                "store",
                "--format",
                "csv",
            ],
        );
        let expected = (0..devices).filter(|d| d % 3 == room).count();
        assert_eq!(csv.lines().count(), expected + 1, "room r{room}: {csv}");
        assert!(
            csv.lines()
                .skip(1)
                .all(|l| l.ends_with(&format!(",{}", per_device - 1))),
            "room r{room} shows an older reading: {csv}"
        );
    }
    stats["room_rows"].as_u64().expect("room_rows in the stats")
}

#[test]
fn a_replay_of_past_hours_writes_each_devices_room_row_once() {
    // "Now" is two days later: the hours are past. Paced at 200x, readings of a device come
    // 50 ms apart, each past the (zero) write interval; each device's row is still written
    // once, at the end.
    assert_eq!(
        room_rows_written(e2e::NOW, 30, 40, &["--workers", "2", "--speed", "200"]),
        30
    );
}

#[test]
fn a_replay_of_the_current_hour_updates_the_room_view_as_it_goes() {
    // "Now" is the end of the recording's hour: a dashboard may be watching it, so readings go
    // out as they come (100 ms apart at 100x) instead of waiting for the end.
    let written = room_rows_written("1724104800", 2, 20, &["--speed", "100"]);
    assert!(written > 2, "the view was written only {written} times");
}
