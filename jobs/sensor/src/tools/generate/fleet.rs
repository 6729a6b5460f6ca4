//! The simulated fleet: rooms, devices and the readings they take.

use std::f64::consts::TAU;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::plan::{Plan, DEVICE_STREAMS, ROOM_STREAMS};

/// Firmware versions with their share of devices, in percent.
pub(super) const FIRMWARE: [(&str, u32); 4] = [
    ("2.4.1", 55),
    ("2.4.0", 25),
    ("2.3.7", 15),
    ("3.0.0-rc.1", 5),
];

impl Plan {
    fn room(&self, room: u32) -> Room {
        let mut rng = self.rng(ROOM_STREAMS | u64::from(room));
        Room {
            temp: rng.random_range(19.0..27.0),
            amplitude: rng.random_range(0.8..3.0),
            // Rooms warm up in the afternoon, the exact hour depending on the sun side.
            peak: rng.random_range(13.0 * 3600.0..17.0 * 3600.0),
        }
    }

    pub(super) fn device(&self, id: u32) -> Device {
        let mut rng = self.rng(DEVICE_STREAMS | u64::from(id));
        let room = rng.random_range(0..self.rooms);
        let r = self.room(room);
        let share = rng.random_range(0..100);
        let fw = FIRMWARE
            .iter()
            .scan(0, |sum, (_, pct)| {
                *sum += pct;
                Some(*sum)
            })
            .position(|sum| share < sum)
            .unwrap_or(0);
        Device {
            phase: rng.random_range(0..self.interval),
            room,
            temp: (r.temp + rng.random_range(-1.0..1.0)).clamp(18.0, 28.0),
            amplitude: r.amplitude * rng.random_range(0.8..1.2),
            peak: r.peak + rng.random_range(-900.0..900.0),
            humidity: rng.random_range(38.0..52.0),
            battery: rng.random_range(3.62..3.75),
            drain: rng.random_range(0.01..0.05) / 86_400.0,
            rssi: rng.random_range(-85..=-45),
            fw: fw as u8,
            next_seq: rng.random_range(0..50_000),
        }
    }

    /// The reading of `device` due at `second` (seconds after start, before jitter).
    pub(super) fn sample(
        &self,
        id: u32,
        device: &mut Device,
        second: u64,
        rng: &mut ChaCha8Rng,
    ) -> Sample {
        // Clocks drift, so readings come a second early or late; not with intervals under 3 s,
        // where that could give two readings of one device the same timestamp (one row key).
        let offset = if self.interval >= 3 {
            (second + rng.random_range(0..3))
                .saturating_sub(1)
                .min(self.duration - 1)
        } else {
            second
        };
        let ts = self.start + offset as i64;
        let daily = (TAU * ((ts % 86_400) as f64 - device.peak) / 86_400.0).cos();
        let noise = |rng: &mut ChaCha8Rng| rng.random::<f64>() - rng.random::<f64>();
        let temp = device.temp + device.amplitude * daily + 0.15 * noise(rng);
        // Relative humidity drops as the air warms.
        let humidity = device.humidity - 1.5 * device.amplitude * daily + 0.8 * noise(rng);
        let battery = (device.battery - device.drain * offset as f64).max(3.0);
        let rssi = (device.rssi + rng.random_range(-4..=4)).clamp(-90, -40);
        let seq = device.next_seq;
        device.next_seq += 1;
        Sample {
            offset,
            device: id,
            temp: (temp * 10.0).round() as i16,
            humidity: (humidity.clamp(30.0, 60.0) * 10.0).round() as u16,
            battery: (battery * 100.0).round() as u16,
            rssi: rssi as i8,
            fw: device.fw,
            seq,
        }
    }
}

/// Per-room climate.
#[derive(Debug)]
struct Room {
    temp: f64,
    amplitude: f64,
    /// Second of the UTC day when the room is warmest.
    peak: f64,
}

/// Per-device profile, and its sequence counter.
#[derive(Debug)]
pub(super) struct Device {
    /// Second within the interval at which the device reports.
    pub(super) phase: u64,
    pub(super) room: u32,
    /// Baseline temperature, °C.
    temp: f64,
    /// Half the daily temperature swing, °C.
    amplitude: f64,
    /// Second of the UTC day when the device reads warmest.
    peak: f64,
    /// Baseline humidity, %.
    humidity: f64,
    /// Battery voltage at the start of the recording.
    battery: f64,
    /// Battery drain, V/s.
    drain: f64,
    rssi: i32,
    /// Index into [`FIRMWARE`].
    fw: u8,
    next_seq: u64,
}

/// One reading, in fixed point so that queued lines stay small.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Sample {
    /// Event time, seconds after start.
    pub(super) offset: u64,
    pub(super) device: u32,
    /// Tenths of °C.
    pub(super) temp: i16,
    /// Tenths of %.
    pub(super) humidity: u16,
    /// Hundredths of V.
    pub(super) battery: u16,
    pub(super) rssi: i8,
    pub(super) fw: u8,
    pub(super) seq: u64,
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::tools::generate::testing::{args, generate, lines, reading, START};
    use crate::tools::generate::GenerateSummary;

    #[test]
    fn every_device_reports_the_right_readings() {
        let a = args(40, "95s");
        let (out, summary) = generate(&a);
        let lines = lines(&out);
        // 95 s at 10 s: 9 whole intervals per device.
        assert_eq!(lines.len(), 40 * 9);
        assert_eq!(
            summary,
            GenerateSummary {
                lines: 360,
                readings: 360,
                ..Default::default()
            }
        );

        let mut by_device: HashMap<String, Vec<(i64, i64, f64)>> = HashMap::new();
        for line in &lines {
            let fields = reading(line).unwrap_or_else(|| panic!("bad line {line:?}"));
            let f = |k: &str| {
                fields
                    .get(k)
                    .unwrap_or_else(|| panic!("no {k} in {fields:?}"))
            };
            let ts = f("ts").as_i64().unwrap();
            assert!(
                (START..START + 95).contains(&ts),
                "ts {ts} outside the recording"
            );
            let temp = f("temp").as_f64().unwrap();
            assert!((10.0..36.0).contains(&temp), "temp {temp}");
            let humidity = f("humidity").as_f64().unwrap();
            assert!((30.0..=60.0).contains(&humidity), "humidity {humidity}");
            let battery = f("battery").as_f64().unwrap();
            assert!((3.0..3.8).contains(&battery), "battery {battery}");
            let rssi = f("rssi").as_i64().unwrap();
            assert!((-90..=-40).contains(&rssi), "rssi {rssi}");
            let room = f("room").as_str().unwrap();
            assert!(room.len() == 7 && room.starts_with("room0"), "room {room}");
            assert!(FIRMWARE.iter().any(|(v, _)| Some(*v) == f("fw").as_str()));
            let device = f("device").as_str().unwrap().to_string();
            by_device
                .entry(device)
                .or_default()
                .push((f("seq").as_i64().unwrap(), ts, battery));
        }
        assert_eq!(by_device.len(), 40);
        for (device, mut readings) in by_device {
            assert_eq!(readings.len(), 9, "{device}");
            readings.sort_by_key(|r| r.0);
            for pair in readings.windows(2) {
                assert_eq!(pair[1].0, pair[0].0 + 1, "{device}: seq has a gap");
                let gap = pair[1].1 - pair[0].1;
                assert!(
                    (8..=12).contains(&gap),
                    "{device}: {gap} s between readings"
                );
                assert!(pair[1].2 <= pair[0].2, "{device}: battery went up");
            }
        }
    }
}
