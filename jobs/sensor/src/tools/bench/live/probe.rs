//! Asking the child job's dashboard API whether sampled readings are visible yet.

use crate::Result;
use pipeline::live_bench::{get_json, Produced};

/// A reading whose visibility is polled.
#[derive(Debug, Clone)]
pub(super) struct Sample {
    pub(super) device: String,
    pub(super) ts: i64,
    pub(super) produced_ms: i64,
}

impl Produced for Sample {
    fn produced_ms(&self) -> i64 {
        self.produced_ms
    }
}

pub(super) fn narrow_visible(addr: &str, s: &Sample) -> Result<bool> {
    let v = get_json(addr, &format!("/api/v1/latest?device={}", s.device))?;
    Ok(v["ts"].as_i64().is_some_and(|ts| ts >= s.ts))
}

pub(super) fn wide_visible(addr: &str, s: &Sample) -> Result<bool> {
    let v = get_json(
        addr,
        &format!("/api/v1/hour?device={}&hour={}", s.device, s.ts),
    )?;
    Ok(v["points"]
        .as_array()
        .is_some_and(|p| p.iter().any(|p| p[0].as_i64() == Some(s.ts))))
}
