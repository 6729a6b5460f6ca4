//! Parsing time arguments: epoch seconds or RFC 3339.

use crate::{Error, Result};

/// Parses `s` as integer epoch seconds or an RFC 3339 timestamp (fractions truncated).
///
/// # Errors
/// [`Error::Invalid`] with the accepted forms.
pub fn parse_time(s: &str) -> Result<i64> {
    let s = s.trim();
    if let Ok(ts) = s.parse::<i64>() {
        return Ok(ts);
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
}
