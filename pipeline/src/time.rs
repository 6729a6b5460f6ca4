//! Parsing time arguments: epoch seconds or RFC 3339.

use crate::{Context, Error, Result};

/// One hour, in seconds: the width of the sensor job's wide rows and of its window.
pub const HOUR_SECS: i64 = 3600;

/// Earliest time a user may name: 0000-01-01T00:00:00Z, the first instant RFC 3339 can write.
pub const MIN_TIME: i64 = -62_167_219_200;
/// Latest time a user may name: 9999-12-31T23:59:59Z, the last second RFC 3339 can write.
/// Bounding times here keeps every later `to - from`, hour rounding and key encoding far from
/// `i64` overflow.
pub const MAX_TIME: i64 = 253_402_300_799;

/// `ts` if it lies in [`MIN_TIME`]`..=`[`MAX_TIME`].
///
/// # Errors
/// [`Error::Invalid`] naming the bounds.
pub fn check_time(ts: i64) -> Result<i64> {
    if (MIN_TIME..=MAX_TIME).contains(&ts) {
        Ok(ts)
    } else {
        Err(out_of_range(&ts.to_string()))
    }
}

fn out_of_range(s: &str) -> Error {
    Error::Invalid(format!(
        "time {s} is out of range: use epoch seconds from {MIN_TIME} to {MAX_TIME} \
         (years 0000 to 9999)"
    ))
}

/// Parses `s` as integer epoch seconds or an RFC 3339 timestamp (fractions truncated), within
/// [`MIN_TIME`]`..=`[`MAX_TIME`].
///
/// # Errors
/// [`Error::Invalid`] with the accepted forms, or naming the bounds.
pub fn parse_time(s: &str) -> Result<i64> {
    let s = s.trim();
    if let Ok(ts) = s.parse::<i64>() {
        return check_time(ts);
    }
    if !s.is_empty()
        && s.bytes()
            .enumerate()
            .all(|(i, b)| b.is_ascii_digit() || (i == 0 && b == b'-'))
    {
        // Digits that do not fit an i64.
        return Err(out_of_range(s));
    }
    chrono::DateTime::parse_from_rfc3339(s).map(|t| t.timestamp()).map_err(|_| {
        Error::Invalid(format!(
            "cannot read {s:?} as a time: use epoch seconds (1724102400) or RFC 3339 (2024-08-19T21:20:00Z)"
        ))
    })
}

/// Formats epoch seconds as RFC 3339 UTC (`2024-08-19T21:20:00Z`).
pub fn format_time(ts: i64) -> String {
    chrono::DateTime::from_timestamp(ts, 0).map_or_else(
        || ts.to_string(),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
}

/// Environment variable that fixes "now" (epoch seconds) for TTLs and `--rebase-time`, so a
/// replay of old recordings can be evaluated as of a given day (tests use it for stable output).
pub const NOW_ENV: &str = "HOURGLASS_NOW";

/// Current time in epoch milliseconds: `HOURGLASS_NOW` if set, else the wall clock.
pub fn now_ms() -> i64 {
    std::env::var(NOW_ENV)
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .map_or_else(|| chrono::Utc::now().timestamp_millis(), |s| s * 1000)
}

/// Parses a duration flag: `500ms`, `5s`, `2m`, `1h`.
///
/// # Errors
/// [`Error::Invalid`] (or [`Error::Context`] for a number too long) naming the text and the
/// units.
pub fn parse_duration(text: &str) -> Result<std::time::Duration> {
    let usage = "use a number with a unit ms, s, m or h, such as 500ms, 5s, 2m";
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    if digits == 0 {
        return Err(Error::Invalid(format!("duration {text:?}: {usage}")));
    }
    let n: u64 = text[..digits]
        .parse()
        .with_context(|| format!("duration {text:?} is too long"))?;
    let ms = match &text[digits..] {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(Error::Invalid(format!("duration {text:?}: {usage}"))),
    };
    let total = n
        .checked_mul(ms)
        .ok_or_else(|| Error::Invalid(format!("duration {text:?} is too long")))?;
    if total == 0 {
        return Err(Error::Invalid(format!(
            "duration {text:?} is zero; {usage}"
        )));
    }
    Ok(std::time::Duration::from_millis(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms() {
        assert_eq!(parse_time("1724102400").unwrap(), 1724102400);
        assert_eq!(parse_time("2024-08-19T21:20:00Z").unwrap(), 1724102400);
        assert_eq!(parse_time("2024-08-19T23:20:00+02:00").unwrap(), 1724102400);
        assert!(parse_time("yesterday")
            .unwrap_err()
            .to_string()
            .contains("epoch seconds"));
        assert_eq!(format_time(1724102400), "2024-08-19T21:20:00Z");
    }

    #[test]
    fn times_beyond_rfc_3339_are_refused_with_the_bounds() {
        assert_eq!(parse_time(&MAX_TIME.to_string()).unwrap(), MAX_TIME);
        assert_eq!(parse_time("9999-12-31T23:59:59Z").unwrap(), MAX_TIME);
        assert_eq!(parse_time("0000-01-01T00:00:00Z").unwrap(), MIN_TIME);
        for s in [
            "9223372036854775807",
            "-9223372036854775808",
            "99999999999999999999999",
            &(MAX_TIME + 1).to_string(),
            &(MIN_TIME - 1).to_string(),
        ] {
            let e = parse_time(s).unwrap_err().to_string();
            assert!(e.contains(&MAX_TIME.to_string()), "{s}: {e}");
        }
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("5")
            .unwrap_err()
            .to_string()
            .contains("unit"));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("s").is_err());
    }
}
