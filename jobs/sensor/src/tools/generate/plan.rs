//! The validated arguments of a run, and the RNG streams it draws from.

use crate::codec::hourly::hour_start;
use pipeline::time::HOUR_SECS;
use pipeline::Context;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::GenerateArgs;

/// RNG streams: one per purpose, so that the readings are the same whatever the fault rates,
/// and a device keeps its profile whatever the number of devices.
pub(super) const VALUE_STREAM: u64 = 0;
pub(super) const DELIVERY_STREAM: u64 = 1;
pub(super) const ROOM_STREAMS: u64 = 1 << 62;
pub(super) const DEVICE_STREAMS: u64 = 1 << 63;

/// Validated arguments.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) devices: u32,
    pub(super) rooms: u32,
    pub(super) start: i64,
    pub(super) duration: u64,
    pub(super) interval: u64,
    /// Seconds during which readings are due: the whole intervals within the duration.
    pub(super) ticks: u64,
    pub(super) seed: u64,
    pub(super) late_rate: f64,
    /// Expected extra lines per reading, so that the rates are fractions of all lines.
    pub(super) malformed_per_reading: f64,
    pub(super) duplicates_per_reading: f64,
    pub(super) device_width: usize,
    pub(super) room_width: usize,
}

impl Plan {
    pub(super) fn new(args: &GenerateArgs) -> crate::Result<Self> {
        ensure!(args.devices > 0, "--devices must be at least 1");
        ensure!(args.rooms > 0, "--rooms must be at least 1");
        ensure!(args.interval > 0, "--interval must be at least 1 second");
        let duration = parse_duration(&args.duration)?;
        let interval = u64::from(args.interval);
        ensure!(
            duration >= interval,
            "--duration {} is shorter than --interval {interval}s: no device would report; \
             lengthen the duration",
            args.duration
        );
        let start = parse_start(args.start.as_deref())?;
        ensure!(
            i64::try_from(duration).is_ok_and(|d| start.saturating_add(d) <= MAX_TS),
            "--start plus --duration go past year 2286; choose an earlier start"
        );
        for (name, rate) in [
            ("--late-rate", args.late_rate),
            ("--malformed-rate", args.malformed_rate),
            ("--duplicate-rate", args.duplicate_rate),
        ] {
            ensure!(
                (0.0..=1.0).contains(&rate),
                "{name} {rate} must be between 0 and 1"
            );
        }
        let good_share = 1.0 - args.malformed_rate - args.duplicate_rate;
        ensure!(
            good_share > 0.0,
            "--malformed-rate plus --duplicate-rate must stay below 1 (they are fractions of \
             all lines)"
        );
        let per_device = duration / interval;
        Ok(Self {
            devices: args.devices,
            rooms: args.rooms,
            start,
            duration,
            interval,
            ticks: per_device * interval,
            seed: args.seed,
            late_rate: args.late_rate,
            malformed_per_reading: args.malformed_rate / good_share,
            duplicates_per_reading: args.duplicate_rate / good_share,
            device_width: digits(u64::from(args.devices - 1)).max(5),
            room_width: digits(u64::from(args.rooms - 1)).max(3),
        })
    }

    pub(super) fn rng(&self, stream: u64) -> ChaCha8Rng {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        rng.set_stream(stream);
        rng
    }
}

/// Parses `90s`, `10m`, `1h`, `2d` (or sums such as `1h30m`) into seconds.
fn parse_duration(text: &str) -> crate::Result<u64> {
    let usage = "use a number with a unit s, m, h or d, such as 90s, 10m, 1h, 2d";
    let text = text.trim();
    ensure!(!text.is_empty(), "empty duration: {usage}");
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        ensure!(
            digits > 0,
            "duration {text:?}: expected a number at {rest:?}; {usage}"
        );
        let number: u64 = rest[..digits]
            .parse()
            .with_context(|| format!("duration {text:?}: number too large"))?;
        let mut chars = rest[digits..].chars();
        let unit = match chars.next() {
            Some('s') => 1,
            Some('m') => 60,
            Some('h') => 3600,
            Some('d') => 86_400,
            Some(c) => bail!("duration {text:?}: unknown unit {c:?}; {usage}"),
            None => bail!("duration {text:?}: missing unit after {number}; {usage}"),
        };
        total = number
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .with_context(|| format!("duration {text:?} is too long"))?;
        rest = chars.as_str();
    }
    ensure!(total > 0, "duration {text:?} is zero; {usage}");
    Ok(total)
}

/// Largest timestamp the pipeline accepts (year 2286); larger values look like milliseconds.
pub(super) const MAX_TS: i64 = 9_999_999_999;

fn parse_start(text: Option<&str>) -> crate::Result<i64> {
    let Some(text) = text else {
        // The replay's "now" (HOURGLASS_NOW fixes it): a recording generated and replayed under
        // the same fixed now must not land in the replay's future.
        let hour = hour_start(pipeline::time::now_ms().div_euclid(1000));
        return Ok(hour - HOUR_SECS);
    };
    let start = match text.trim().parse::<i64>() {
        Ok(secs) => secs,
        Err(_) => chrono::DateTime::parse_from_rfc3339(text.trim())
            .with_context(|| {
                format!(
                    "--start {text:?}: expected epoch seconds (1724102400) \
                     or RFC 3339 (2024-08-19T21:20:00Z)"
                )
            })?
            .timestamp(),
    };
    ensure!(
        start >= 0,
        "--start {text:?} is before 1970; the pipeline rejects negative timestamps"
    );
    Ok(start)
}

pub(super) fn digits(mut n: u64) -> usize {
    let mut count = 1;
    while n >= 10 {
        n /= 10;
        count += 1;
    }
    count
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use super::*;
    use crate::tools::generate::testing::args;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s").unwrap(), 90);
        assert_eq!(parse_duration("10m").unwrap(), 600);
        assert_eq!(parse_duration("1h").unwrap(), 3600);
        assert_eq!(parse_duration("2d").unwrap(), 172_800);
        assert_eq!(parse_duration(" 1h30m ").unwrap(), 5400);
        for (bad, why) in [
            ("", "empty duration"),
            ("90", "missing unit"),
            ("10x", "unknown unit 'x'"),
            ("h", "expected a number"),
            ("1.5h", "unknown unit '.'"),
            ("0s", "is zero"),
            ("99999999999999999999s", "too large"),
            ("9999999999999999d", "too long"),
        ] {
            let err = parse_duration(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad:?}: {err:?} lacks {why:?}");
        }
    }

    #[test]
    fn start_times() {
        assert_eq!(parse_start(Some("1724102400")).unwrap(), 1_724_102_400);
        assert_eq!(
            parse_start(Some("2024-08-19T21:20:00Z")).unwrap(),
            1_724_102_400
        );
        assert_eq!(
            parse_start(Some("2024-08-19T23:20:00+02:00")).unwrap(),
            1_724_102_400
        );
        let recent = parse_start(None).unwrap();
        assert_eq!(recent % 3600, 0);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!(
            (now - 7200..=now - 3600).contains(&recent),
            "{recent} is not the previous hour"
        );
        assert!(parse_start(Some("yesterday"))
            .unwrap_err()
            .to_string()
            .contains("RFC 3339"));
        assert!(parse_start(Some("-5")).is_err());
    }

    #[test]
    fn bad_arguments_say_what_to_change() {
        let check = |change: &dyn Fn(&mut GenerateArgs), want: &str| {
            let mut a = args(10, "1m");
            change(&mut a);
            let err = Plan::new(&a).unwrap_err().to_string();
            assert!(err.contains(want), "{err:?} lacks {want:?}");
        };
        check(&|a| a.devices = 0, "--devices");
        check(&|a| a.interval = 0, "--interval");
        check(&|a| a.duration = "5s".into(), "shorter than --interval");
        check(&|a| a.late_rate = 1.5, "--late-rate");
        check(&|a| a.malformed_rate = -0.1, "--malformed-rate");
        check(
            &|a| (a.malformed_rate, a.duplicate_rate) = (0.5, 0.5),
            "below 1",
        );
    }
}
