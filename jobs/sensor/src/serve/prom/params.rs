//! The request parameters: query string and form body, Prometheus times and durations.

use axum::extract::{FromRequest, Query, Request};
use axum::http::Method;
use axum::Form;

use super::{bad_data, PromError};

/// Query string and, for POST, form body parameters, in order (Prometheus merges both).
#[derive(Debug)]
pub(crate) struct PromParams(Vec<(String, String)>);

impl<S: Send + Sync> FromRequest<S> for PromParams {
    type Rejection = PromError;

    async fn from_request(req: Request, state: &S) -> Result<Self, PromError> {
        let mut pairs = match req.uri().query() {
            Some(_) => {
                Query::<Vec<(String, String)>>::try_from_uri(req.uri())
                    .map_err(|e| bad_data(format!("cannot read the query string: {e}")))?
                    .0
            }
            None => Vec::new(),
        };
        if req.method() == Method::POST {
            let Form(body) = Form::<Vec<(String, String)>>::from_request(req, state)
                .await
                .map_err(|e| {
                    bad_data(format!(
                        "cannot read the form body ({e}); POST application/x-www-form-urlencoded"
                    ))
                })?;
            pairs.extend(body);
        }
        Ok(PromParams(pairs))
    }
}

impl PromParams {
    /// The last value of `name`, if present and non-empty.
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    pub(super) fn required(&self, name: &str) -> Result<&str, PromError> {
        self.get(name)
            .ok_or_else(|| bad_data(format!("missing parameter `{name}`")))
    }

    /// Every `match[]` selector.
    pub(super) fn matches(&self) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == "match[]")
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub(super) fn time(&self, name: &str) -> Result<Option<f64>, PromError> {
        self.get(name)
            .map(|s| parse_prom_time(s).map_err(|e| bad_data(format!("parameter `{name}`: {e}"))))
            .transpose()
    }

    pub(super) fn duration(&self, name: &str) -> Result<Option<f64>, PromError> {
        self.get(name)
            .map(|s| parse_duration(s).map_err(|e| bad_data(format!("parameter `{name}`: {e}"))))
            .transpose()
    }
}

/// A Prometheus time: float epoch seconds or RFC 3339, within the years 0000 to 9999.
pub(crate) fn parse_prom_time(s: &str) -> Result<f64, String> {
    use pipeline::time::{MAX_TIME, MIN_TIME};
    if let Ok(t) = s.trim().parse::<f64>() {
        // Also refuses NaN and the infinities.
        if !(MIN_TIME as f64..=MAX_TIME as f64).contains(&t) {
            return Err(format!(
                "time {s} is out of range: use epoch seconds from {MIN_TIME} to {MAX_TIME} \
                 (years 0000 to 9999)"
            ));
        }
        return Ok(t);
    }
    pipeline::time::parse_time(s)
        .map(|t| t as f64)
        .map_err(|e| e.to_string())
}

/// `d` if it lies in `(0, max]`, else a 400 naming `name` and the limit.
pub(super) fn check_duration(d: f64, name: &str, max: f64) -> Result<f64, PromError> {
    if d > 0.0 && d <= max {
        Ok(d)
    } else {
        Err(bad_data(format!(
            "parameter `{name}`: {d} s is out of range: use a positive duration of at most {max} s"
        )))
    }
}

/// A Prometheus duration: float seconds (`15`, `0.5`) or units (`1m30s`, `500ms`, `1h`, `7d`).
pub(crate) fn parse_duration(s: &str) -> Result<f64, String> {
    let bad = || format!("cannot read {s:?} as a duration: use seconds (60) or units (1m, 1h30m)");
    if let Ok(secs) = s.trim().parse::<f64>() {
        return if secs.is_finite() {
            Ok(secs)
        } else {
            Err(bad())
        };
    }
    let mut total = 0.0;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            "w" => 604_800.0,
            "y" => 31_536_000.0,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total += n * unit;
    }
    // Enough digits overflow to infinity.
    if total.is_finite() {
        Ok(total)
    } else {
        Err(bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_times() {
        assert_eq!(parse_duration("60").unwrap(), 60.0);
        assert_eq!(parse_duration("1m30s").unwrap(), 90.0);
        assert_eq!(parse_duration("500ms").unwrap(), 0.5);
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("1e400").is_err());
        assert!(parse_duration(&format!("{}y", "9".repeat(400))).is_err());
        for t in ["-1e300", "1e300", "NaN", "inf", "9223372036854775807"] {
            assert!(
                parse_prom_time(t).unwrap_err().contains("253402300799"),
                "{t}"
            );
        }
        assert_eq!(parse_prom_time("1724102400.5").unwrap(), 1724102400.5);
        assert_eq!(
            parse_prom_time("2024-08-19T21:20:00Z").unwrap(),
            1724102400.0
        );
    }
}
