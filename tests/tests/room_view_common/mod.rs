//! The room-view scenarios, run over any backend through the `hourglass` binary: by
//! `room_view.rs` on the embedded store and by `hbase_live.rs` on the live HBase.
//!
//! Latest reading per device under its room, registry overrides and reloads, moves between rooms
//! (by a device's own readings and by the registry), out-of-order input, and the seed's fan-out
//! answer equal to the view's.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use e2e::{hourglass_command, ok_stdout, succeeded, KillOnDrop};

/// The recordings' first hour, 2024-08-19T21:00:00Z.
const H: i64 = 1724101200;

/// Where the scenarios run.
#[derive(Debug, Clone)]
pub struct Target {
    /// The backend flags of every command: `--store store` or `--hbase HOST:PORT`.
    pub backend: Vec<String>,
    /// `HOURGLASS_NOW` of every command.
    pub now: String,
    /// Replays with `--rebase-time` (HBase measures TTLs against the real clock); expected
    /// timestamps move by the shift the replay reports.
    pub rebase: bool,
    /// The tables can be read while a job writes them (HBase; the embedded store is locked).
    pub live_reads: bool,
}

impl Target {
    fn command(&self, dir: &Path, args: &[&str]) -> Command {
        let mut cmd = hourglass_command(dir, &self.now, args);
        cmd.args(&self.backend);
        cmd
    }

    /// Runs `hourglass args… <backend>` and returns its stdout, failing on a non-zero exit.
    fn run(&self, dir: &Path, args: &[&str]) -> String {
        let out = self.command(dir, args).output().expect("running hourglass");
        ok_stdout(args, out)
    }

    /// The replay command for `file`, with `--rebase-time` when the target needs it.
    fn replay_args<'a>(&self, file: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec!["replay", file];
        if self.rebase {
            args.push("--rebase-time");
        }
        args.extend_from_slice(extra);
        args
    }

    /// Replays `file`; returns the seconds `--rebase-time` shifted the readings by.
    fn replay(&self, dir: &Path, file: &str, extra: &[&str]) -> i64 {
        let args = self.replay_args(file, extra);
        let out = self
            .command(dir, &args)
            .output()
            .expect("running hourglass");
        shift(succeeded(&args, &out))
    }

    /// `hourglass query room --room <room> --format csv` with `extra` flags.
    fn room_csv(&self, dir: &Path, room: &str, extra: &[&str]) -> String {
        let mut args = vec!["query", "room", "--room", room, "--format", "csv"];
        args.extend_from_slice(extra);
        self.run(dir, &args)
    }
}

/// The shift a replay reported on stderr (`--rebase-time: shifting timestamps by N h`), or 0.
fn shift(out: &Output) -> i64 {
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("--rebase-time: shifting timestamps by "))
        .map_or(0, |rest| {
            let hours = rest.strip_suffix(" h").expect("shift in hours");
            hours.parse::<i64>().expect("whole hours") * 3600
        })
}

fn line(device: &str, ts: i64, temp: f64, room: Option<&str>) -> String {
    match room {
        Some(r) => format!(r#"{{"device":"{device}","ts":{ts},"temp":{temp},"room":"{r}"}}"#),
        None => format!(r#"{{"device":"{device}","ts":{ts},"temp":{temp}}}"#),
    }
}

/// A device moves to the room of its newest reading; an older reading never moves it back.
pub fn devices_follow_their_newest_reading_between_rooms(target: &Target, dir: &Path) {
    let lines = [
        line("mover", H, 20.0, Some("roomA")),
        line("stay", H + 5, 30.0, Some("roomA")),
        line("mover", H + 60, 21.0, Some("roomB")),
        // Out of order: older than mover's newest, says roomA: must not move it back.
        line("mover", H + 30, 99.0, Some("roomA")),
        line("stay", H + 65, 31.0, Some("roomA")),
        line("noroom", H + 70, 5.0, None),
    ];
    std::fs::write(dir.join("in.jsonl"), lines.join("\n") + "\n").expect("write");
    let s = target.replay(dir, "in.jsonl", &["--workers", "2"]);
    assert_eq!(
        target.room_csv(dir, "roomA", &[]),
        format!("device,ts,value\nstay,{},31\n", H + s + 65)
    );
    assert_eq!(
        target.room_csv(dir, "roomB", &[]),
        format!("device,ts,value\nmover,{},21\n", H + s + 60)
    );
}

/// The registry overrides the rooms readings report, and `--strategy fanout` (the seed's 16
/// salted scans of the narrow table) answers what the view does.
pub fn the_registry_overrides_rooms_and_fanout_gives_the_same_answer(target: &Target, dir: &Path) {
    let input = e2e::data("scenario.jsonl");
    std::fs::write(
        dir.join("devices.csv"),
        "device,room,gateway\nsensor-1,lab1,gw1\ndev00786,room031,gw1\ngateway-7:temp.sensor-000123,lab1,gw2\n",
    )
    .expect("write registry");
    let s = target.replay(
        dir,
        input.to_str().expect("utf-8"),
        &["--registry", "devices.csv"],
    );
    let lab = target.room_csv(dir, "lab1", &[]);
    assert_eq!(
        lab,
        format!(
            "device,ts,value\ngateway-7:temp.sensor-000123,{},26.7\nsensor-1,{},25.7\n",
            H + s + 47 * 300 + 14,
            H + s + 47 * 300 + 7
        )
    );
    // sensor-1 reports room031 itself, but the registry moved it to lab1.
    assert_eq!(
        target.room_csv(dir, "room031", &[]),
        format!("device,ts,value\ndev00786,{},24.7\n", H + s + 47 * 300)
    );
    assert_eq!(target.room_csv(dir, "room007", &[]), "device,ts,value\n");
    for room in ["lab1", "room031", "room007"] {
        assert_eq!(
            target.room_csv(
                dir,
                room,
                &["--strategy", "fanout", "--registry", "devices.csv"]
            ),
            target.room_csv(dir, room, &[]),
            "fanout vs view for {room}"
        );
    }
}

/// Changing the registry while a job runs moves the device: it is listed only under its new
/// room, its old room's row deleted.
pub fn a_registry_change_while_running_moves_the_device(target: &Target, dir: &Path) {
    // 60 readings 10 s apart, replayed at 100x: the job runs for about 6 s.
    let n = 60;
    let lines: Vec<String> = (0..n)
        .map(|i| line("dev1", H + i * 10, f64::from(i as i32), Some("own")))
        .collect();
    std::fs::write(dir.join("in.jsonl"), lines.join("\n") + "\n").expect("write");
    std::fs::write(dir.join("devices.csv"), "device,room\ndev1,before\n").expect("write");
    let args = target.replay_args("in.jsonl", &["--registry", "devices.csv", "--speed", "100"]);
    let mut child = KillOnDrop(Some(
        target
            .command(dir, &args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    ));
    if target.live_reads {
        // The device is first listed under the registry's room...
        let start = Instant::now();
        while !target.room_csv(dir, "before", &[]).contains("\ndev1,") {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "dev1 never appeared under its registry room while the job ran"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    } else {
        std::thread::sleep(Duration::from_millis(1500));
    }
    assert!(
        child
            .0
            .as_mut()
            .expect("running")
            .try_wait()
            .expect("status")
            .is_none(),
        "the job ended before the registry changed"
    );
    // ...then the registry moves it. Write then rename, as editors and config management do,
    // so the job never reads half a file.
    std::fs::write(dir.join("devices.csv.new"), "device,room\ndev1,after\n").expect("write");
    std::fs::rename(dir.join("devices.csv.new"), dir.join("devices.csv")).expect("rename");
    let out = child
        .0
        .take()
        .expect("running")
        .wait_with_output()
        .expect("wait");
    let s = shift(succeeded(&args, &out));
    assert_eq!(target.room_csv(dir, "before", &[]), "device,ts,value\n");
    assert_eq!(
        target.room_csv(dir, "after", &[]),
        format!("device,ts,value\ndev1,{},{}\n", H + s + (n - 1) * 10, n - 1)
    );
    assert_eq!(target.room_csv(dir, "own", &[]), "device,ts,value\n");
}

/// A registry change made while no job runs moves the device at the next run, even without a
/// new reading of it: the next run continues from the stored view, so the device's row under
/// its old room is deleted. Rows the new run has no news about stay as they were.
pub fn a_registry_change_between_runs_moves_the_device_at_the_next_run(
    target: &Target,
    dir: &Path,
) {
    std::fs::write(
        dir.join("first.jsonl"),
        [
            line("mover", H, 20.0, Some("own")),
            line("stay", H + 5, 30.0, Some("own")),
            line("unregistered", H + 10, 40.0, Some("roomA")),
            line("leaver", H + 15, 50.0, Some("ownL")),
            line("noown", H + 20, 60.0, None),
        ]
        .join("\n")
            + "\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("devices.csv"),
        "device,room\nmover,roomA\nstay,roomA\nleaver,roomA\nnoown,roomA\n",
    )
    .expect("write");
    let s = target.replay(dir, "first.jsonl", &["--registry", "devices.csv"]);
    assert_eq!(
        target.room_csv(dir, "roomA", &[]),
        format!(
            "device,ts,value\nleaver,{},50\nmover,{},20\nnoown,{},60\nstay,{},30\n\
             unregistered,{},40\n",
            H + s + 15,
            H + s,
            H + s + 20,
            H + s + 5,
            H + s + 10
        )
    );

    // While no job runs, the registry moves `mover` and drops `leaver` (back to the room its
    // readings report) and `noown` (whose readings report none: out of the view); the next run
    // reads only `stay` (in the same hour, so that `--rebase-time` shifts it alike).
    std::fs::write(
        dir.join("devices.csv"),
        "device,room\nmover,roomB\nstay,roomA\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("second.jsonl"),
        line("stay", H + 100, 31.0, Some("own")) + "\n",
    )
    .expect("write");
    assert_eq!(
        target.replay(dir, "second.jsonl", &["--registry", "devices.csv"]),
        s
    );
    assert_eq!(
        target.room_csv(dir, "roomA", &[]),
        format!(
            "device,ts,value\nstay,{},31\nunregistered,{},40\n",
            H + s + 100,
            H + s + 10
        )
    );
    assert_eq!(
        target.room_csv(dir, "roomB", &[]),
        format!("device,ts,value\nmover,{},20\n", H + s)
    );
    assert_eq!(
        target.room_csv(dir, "ownL", &[]),
        format!("device,ts,value\nleaver,{},50\n", H + s + 15)
    );
    assert_eq!(
        target.room_csv(
            dir,
            "roomB",
            &["--strategy", "fanout", "--registry", "devices.csv"]
        ),
        target.room_csv(dir, "roomB", &[]),
        "fanout vs view"
    );
}
