//! The simulated fleet read at the wall clock: the readings `hourglass bench live` publishes,
//! the same devices and lines as a recording of `hourglass generate` (values that drift and
//! vary from one reading to the next, the extra fields), at the times the caller chooses.

use rand_chacha::ChaCha8Rng;

use super::delivery::Pending;
use super::fleet::Device;
use super::plan::{Plan, VALUE_STREAM};
use super::GenerateArgs;

/// `devices` simulated devices over `rooms` rooms, whose readings are asked for one at a time.
#[derive(Debug)]
pub struct LiveFleet {
    plan: Plan,
    devices: Vec<Device>,
    rooms: Vec<u32>,
    values: ChaCha8Rng,
    line: Vec<u8>,
}

impl LiveFleet {
    /// The fleet `hourglass generate --devices D --rooms R --start START` simulates, with its
    /// default seed.
    ///
    /// # Errors
    /// What `generate` refuses: no devices or rooms, a start past year 2286.
    pub fn new(devices: u32, rooms: u32, start: i64) -> crate::Result<Self> {
        let plan = Plan::new(&GenerateArgs {
            devices,
            rooms,
            start: Some(start.to_string()),
            // Only bounds the recording `generate` would write; readings are asked by time.
            duration: "30d".into(),
            seed: 42,
            out: None,
            interval: 10,
            late_rate: 0.0,
            malformed_rate: 0.0,
            duplicate_rate: 0.0,
        })?;
        let devices: Vec<Device> = (0..devices).map(|id| plan.device(id)).collect();
        let rooms = devices.iter().map(|d| d.room).collect();
        let values = plan.rng(VALUE_STREAM);
        Ok(LiveFleet {
            plan,
            devices,
            rooms,
            values,
            line: Vec::with_capacity(256),
        })
    }

    /// The id of device `id` (`dev00042`), as its readings name it.
    pub fn device_name(&self, id: u32) -> String {
        format!("dev{id:0width$}", width = self.plan.device_width)
    }

    /// Device `id`'s reading at `ts` (epoch seconds, not before the start), as one JSON line
    /// without its newline.
    ///
    /// # Panics
    /// If `id` is not below the fleet's device count.
    pub fn line(&mut self, id: u32, ts: i64) -> &[u8] {
        let second = u64::try_from(ts - self.plan.start).unwrap_or(0);
        let mut sample =
            self.plan
                .sample(id, &mut self.devices[id as usize], second, &mut self.values);
        // `sample` adds a device clock's drift; the caller's time is the reading's.
        sample.offset = second;
        self.plan
            .format(&Pending::well_formed(sample), &self.rooms, &mut self.line);
        self.line.pop();
        &self.line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::decode_line;

    #[test]
    fn readings_decode_at_the_asked_time_with_values_that_vary() {
        let mut fleet = LiveFleet::new(1000, 50, 1_700_000_000).unwrap();
        assert_eq!(fleet.device_name(7), "dev00007");
        let mut values = Vec::new();
        for k in 0..30 {
            let ts = 1_700_000_000 + 10 * k;
            let line = fleet.line(7, ts).to_vec();
            let r = decode_line(1, &line, "temp").expect("a well-formed reading");
            assert_eq!((r.device.as_str(), r.ts), ("dev00007", ts));
            assert!(r.room().is_some(), "{}", String::from_utf8_lossy(&line));
            values.push(r.value);
        }
        values.dedup();
        assert!(values.len() > 10, "values barely vary: {values:?}");
    }
}
