//! Where `ts_metric_hourly` and `ts_room_latest` are split: the `--split-from` and `--regions`
//! flags, and the fleet (device ids, their hours and rooms) read from a registry or a recording.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::codec::hourly::hour_start;
use crate::config::JobConfig;
use crate::decode::decode_line;
use crate::tables::{IdSplits, DEFAULT_ID_REGIONS};
use crate::Result;
use pipeline::source::replay::input::{self, LineReader};
use pipeline::Context;

/// Most regions `--regions` accepts: HBase handles more, but a pre-split finer than a fleet's
/// servers only multiplies the regions to balance.
const MAX_REGIONS: u32 = 1000;

/// How `ts_metric_hourly` (keys `<device>_<hour>`) and `ts_room_latest` (`<room>_<device>`)
/// are pre-split. `ts_metric` has one region per salt bucket whatever these say.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SplitArgs {
    /// Split ts_metric_hourly and ts_room_latest at the quantiles of the device and room ids in
    /// FILE: a registry CSV (`device,room[,…]`) or a recording (JSON Lines, `.gz`/`.zst`)
    /// [default: the config's `registry` file, else `hourglass generate`'s id ranges
    /// dev00000..dev99999 and room000..room999 cut evenly].
    #[arg(long, value_name = "FILE")]
    pub split_from: Option<PathBuf>,
    /// Regions of ts_metric_hourly and ts_room_latest [default: 16, as ts_metric's salt
    /// buckets].
    #[arg(long, value_name = "N")]
    pub regions: Option<u32>,
}

/// The split keys, and where they come from (for the commands to say).
#[derive(Debug, Clone)]
pub struct Splits {
    /// The split keys.
    pub ids: IdSplits,
    /// `registry FILE (N devices, M rooms)`, `recording FILE (…)` or `default (…)`.
    pub origin: String,
}

impl SplitArgs {
    /// The split these flags (and `cfg.registry`) ask for.
    ///
    /// # Errors
    /// `--regions` out of range; an unreadable or empty file.
    pub fn resolve(&self, cfg: &JobConfig) -> Result<Splits> {
        let regions = self.regions.unwrap_or(DEFAULT_ID_REGIONS);
        ensure!(
            (1..=MAX_REGIONS).contains(&regions),
            "--regions must be 1..={MAX_REGIONS}, got {regions}"
        );
        let Some(path) = self.split_from.as_ref().or(cfg.registry.as_ref()) else {
            return Ok(Splits {
                ids: IdSplits::generator_default(regions),
                origin: format!(
                    "default: {regions} even ranges of `hourglass generate`'s ids \
                     dev00000..dev99999 and room000..room999; pass --split-from with your \
                     registry or a recording for your fleet's ids"
                ),
            });
        };
        let fleet = Fleet::read(path, &cfg.metric)?;
        ensure!(
            !fleet.devices.is_empty(),
            "{}: no device ids to split on; give a registry CSV (`device,room`) or a recording \
             with readings",
            path.display()
        );
        let rooms = fleet.rooms();
        let ids = IdSplits::from_weights(
            fleet
                .devices
                .iter()
                .map(|(d, rows)| (d.as_str(), rows.wide_rows())),
            rooms.iter().map(|(r, n)| (r.as_str(), *n)),
            regions,
        );
        Ok(Splits {
            origin: format!(
                "{} {} ({} devices, {} rooms): {} regions of ts_metric_hourly, {} of \
                 ts_room_latest at the quantiles of their ids",
                fleet.kind,
                path.display(),
                fleet.devices.len(),
                rooms.len(),
                ids.devices.len() + 1,
                ids.rooms.len() + 1,
            ),
            ids,
        })
    }
}

/// What a device adds to the id-keyed tables.
#[derive(Debug, Clone, Default)]
pub struct DeviceRows {
    /// The hours it has readings in (start, epoch seconds): its wide rows. Empty from a
    /// registry.
    pub hours: BTreeSet<i64>,
    /// Its room, with the event time it was seen at: the newest reading's (as the room view
    /// keeps it), or the registry's (time 0).
    pub room: Option<(i64, String)>,
}

impl DeviceRows {
    /// Its rows in `ts_metric_hourly` as the split weighs them: one per hour, one from a
    /// registry (which knows no hours; every device counts the same).
    pub fn wide_rows(&self) -> u64 {
        (self.hours.len() as u64).max(1)
    }
}

/// The devices of a registry or a recording.
#[derive(Debug, Default)]
pub struct Fleet {
    /// `registry` or `recording`.
    pub kind: &'static str,
    /// Per device id.
    pub devices: BTreeMap<String, DeviceRows>,
    /// Lines of a recording that are no reading, by reason kind.
    pub rejected: BTreeMap<String, u64>,
}

impl Fleet {
    /// Reads a registry CSV (its first line that is neither blank nor a `#` comment starts with
    /// `device,room`) or a recording (`metric` names the value field).
    ///
    /// # Errors
    /// An unreadable file; a registry line that is not `device,room[,…]`.
    pub fn read(path: &Path, metric: &str) -> Result<Self> {
        let mut lines = LineReader::new(input::open(path, None)?);
        let mut buf = Vec::new();
        let context = |n: u64| format!("reading {} at line {n}", path.display());
        let mut first = None;
        while let Some(line) = lines
            .next_line(&mut buf)
            .with_context(|| context(lines.lines_read() + 1))?
        {
            let text = String::from_utf8_lossy(&line.bytes);
            let text = text.trim();
            if !text.is_empty() && !text.starts_with('#') {
                first = Some(text.replace(' ', ""));
                break;
            }
        }
        if first
            .as_deref()
            .is_some_and(|l| l.starts_with("device,room"))
        {
            return Self::from_registry(path);
        }
        Self::from_recording(path, metric)
    }

    fn from_registry(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the registry {}", path.display()))?;
        let entries = crate::registry::parse_entries(&text)
            .with_context(|| format!("reading the registry {}", path.display()))?;
        let mut fleet = Fleet {
            kind: "registry",
            ..Fleet::default()
        };
        for (device, columns) in entries {
            let room = columns.split(',').next().unwrap_or_default().to_string();
            fleet.devices.entry(device).or_default().room = Some((0, room));
        }
        Ok(fleet)
    }

    fn from_recording(path: &Path, metric: &str) -> Result<Self> {
        let mut lines = LineReader::new(input::open(path, None)?);
        let mut buf = Vec::new();
        let mut fleet = Fleet {
            kind: "recording",
            ..Fleet::default()
        };
        while let Some(line) = lines.next_line(&mut buf).with_context(|| {
            format!(
                "reading {} at line {}",
                path.display(),
                lines.lines_read() + 1
            )
        })? {
            match decode_line(line.number, &line.bytes, metric) {
                Ok(r) => {
                    let rows = match fleet.devices.get_mut(&r.device) {
                        Some(rows) => rows,
                        None => fleet.devices.entry(r.device.clone()).or_default(),
                    };
                    rows.hours.insert(hour_start(r.ts));
                    if let Some(room) = r.room() {
                        if rows.room.as_ref().is_none_or(|(ts, _)| r.ts >= *ts) {
                            rows.room = Some((r.ts, room));
                        }
                    }
                }
                Err(rejected) => {
                    *fleet
                        .rejected
                        .entry(rejected.reason.kind().to_string())
                        .or_default() += 1;
                }
            }
        }
        Ok(fleet)
    }

    /// Rooms with their devices (a device counts in its room, [`DeviceRows::room`]).
    pub fn rooms(&self) -> BTreeMap<String, u64> {
        let mut rooms = BTreeMap::new();
        for rows in self.devices.values() {
            if let Some((_, room)) = &rows.room {
                *rooms.entry(room.clone()).or_default() += 1;
            }
        }
        rooms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_and_a_recording_give_the_same_split() {
        let dir = tempfile::tempdir().unwrap();
        let registry = dir.path().join("registry.csv");
        let recording = dir.path().join("fleet.jsonl");
        let mut csv = String::from("# fleet\ndevice,room,gateway\n");
        let mut jsonl = String::new();
        for d in 0..320 {
            let room = format!("room{:03}", d / 10);
            csv.push_str(&format!("s{d:04},{room},gw1\n"));
            for k in 0..2 {
                jsonl.push_str(&format!(
                    "{{\"device\":\"s{d:04}\",\"ts\":{},\"temp\":1.5,\"room\":\"{room}\"}}\n",
                    1_724_101_200 + 1800 * k
                ));
            }
        }
        jsonl.push_str("not json\n");
        std::fs::write(&registry, csv).unwrap();
        std::fs::write(&recording, jsonl).unwrap();
        let cfg = JobConfig::default();
        let split = |path: &Path| {
            SplitArgs {
                split_from: Some(path.to_path_buf()),
                regions: Some(4),
            }
            .resolve(&cfg)
            .unwrap()
        };
        let (a, b) = (split(&registry), split(&recording));
        assert_eq!(a.ids, b.ids);
        assert_eq!(a.ids.devices, [b"s0080_", b"s0160_", b"s0240_"]);
        assert_eq!(a.ids.rooms, [b"room008_", b"room016_", b"room024_"]);
        assert!(a.origin.starts_with("registry "), "{}", a.origin);
        assert!(b.origin.contains("320 devices, 32 rooms"), "{}", b.origin);

        let fleet = Fleet::read(&recording, "temp").unwrap();
        assert_eq!(fleet.devices["s0000"].hours.len(), 1);
        assert_eq!(fleet.rejected["invalid_json"], 1);

        let default = SplitArgs::default().resolve(&cfg).unwrap();
        assert_eq!(default.ids, IdSplits::default());
        let err = SplitArgs {
            split_from: None,
            regions: Some(0),
        }
        .resolve(&cfg)
        .unwrap_err();
        assert!(err.to_string().contains("--regions"), "{err}");
    }
}
