//! The room view: latest reading per device under its room, registry overrides and reloads,
//! moves between rooms, out-of-order input, and the seed's fan-out answer.

use std::path::Path;

use e2e::{hourglass_ok, NOW};

const H: i64 = 1724101200;

fn line(device: &str, ts: i64, temp: f64, room: Option<&str>) -> String {
    match room {
        Some(r) => format!(r#"{{"device":"{device}","ts":{ts},"temp":{temp},"room":"{r}"}}"#),
        None => format!(r#"{{"device":"{device}","ts":{ts},"temp":{temp}}}"#),
    }
}

fn room_csv(dir: &Path, room: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "query", "room", "--room", room, "--store", "store", "--format", "csv",
    ];
    args.extend_from_slice(extra);
    hourglass_ok(dir, &args)
}

#[test]
fn devices_follow_their_newest_reading_between_rooms() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lines = [
        line("mover", H, 20.0, Some("roomA")),
        line("stay", H + 5, 30.0, Some("roomA")),
        line("mover", H + 60, 21.0, Some("roomB")),
        // Out of order: older than mover's newest, says roomA: must not move it back.
        line("mover", H + 30, 99.0, Some("roomA")),
        line("stay", H + 65, 31.0, Some("roomA")),
        line("noroom", H + 70, 5.0, None),
    ];
    std::fs::write(dir.path().join("in.jsonl"), lines.join("\n") + "\n").expect("write");
    hourglass_ok(
        dir.path(),
        &["replay", "in.jsonl", "--store", "store", "--workers", "2"],
    );
    assert_eq!(
        room_csv(dir.path(), "roomA", &[]),
        format!("device,ts,value\nstay,{},31\n", H + 65)
    );
    assert_eq!(
        room_csv(dir.path(), "roomB", &[]),
        format!("device,ts,value\nmover,{},21\n", H + 60)
    );
}

#[test]
fn the_registry_overrides_rooms_and_fanout_gives_the_same_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = e2e::data("scenario.jsonl");
    std::fs::write(
        dir.path().join("devices.csv"),
        "device,room,gateway\nsensor-1,lab1,gw1\ndev00786,room031,gw1\ngateway-7:temp.sensor-000123,lab1,gw2\n",
    )
    .expect("write registry");
    hourglass_ok(
        dir.path(),
        &[
            "replay",
            input.to_str().expect("utf-8"),
            "--store",
            "store",
            "--registry",
            "devices.csv",
        ],
    );
    let lab = room_csv(dir.path(), "lab1", &[]);
    assert_eq!(
        lab,
        format!(
            "device,ts,value\ngateway-7:temp.sensor-000123,{},26.7\nsensor-1,{},25.7\n",
            H + 47 * 300 + 14,
            H + 47 * 300 + 7
        )
    );
    // sensor-1 reports room031 itself, but the registry moved it to lab1.
    assert_eq!(
        room_csv(dir.path(), "room031", &[]),
        format!("device,ts,value\ndev00786,{},24.7\n", H + 47 * 300)
    );
    assert_eq!(room_csv(dir.path(), "room007", &[]), "device,ts,value\n");
    for room in ["lab1", "room031", "room007"] {
        assert_eq!(
            room_csv(
                dir.path(),
                room,
                &["--strategy", "fanout", "--registry", "devices.csv"]
            ),
            room_csv(dir.path(), room, &[]),
            "fanout vs view for {room}"
        );
    }
}

#[test]
fn a_registry_change_while_running_moves_the_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 40 readings 10 s apart, replayed at 100x: the job runs for about 4 s.
    let lines: Vec<String> = (0..40)
        .map(|i| line("dev1", H + i * 10, f64::from(i as i32), Some("own")))
        .collect();
    std::fs::write(dir.path().join("in.jsonl"), lines.join("\n") + "\n").expect("write");
    std::fs::write(dir.path().join("devices.csv"), "device,room\ndev1,before\n").expect("write");
    let mut child = std::process::Command::new(e2e::hourglass_bin())
        .args([
            "replay",
            "in.jsonl",
            "--store",
            "store",
            "--registry",
            "devices.csv",
            "--speed",
            "100",
        ])
        .current_dir(dir.path())
        .env("HOURGLASS_NOW", NOW)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // Write then rename, as editors and config management do, so the job never reads half a file.
    std::fs::write(
        dir.path().join("devices.csv.new"),
        "device,room\ndev1,after\n",
    )
    .expect("write");
    std::fs::rename(
        dir.path().join("devices.csv.new"),
        dir.path().join("devices.csv"),
    )
    .expect("rename");
    assert!(child.wait().expect("wait").success());
    assert_eq!(room_csv(dir.path(), "before", &[]), "device,ts,value\n");
    assert_eq!(
        room_csv(dir.path(), "after", &[]),
        format!("device,ts,value\ndev1,{},39\n", H + 390)
    );
}
