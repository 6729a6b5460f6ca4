//! Helpers shared by the tests of `generate`.

use serde_json::Value;

use super::plan::{Plan, MAX_TS};
use super::{GenerateArgs, GenerateSummary};

pub(super) const START: i64 = 1_724_101_200;

pub(super) fn args(devices: u32, duration: &str) -> GenerateArgs {
    GenerateArgs {
        devices,
        duration: duration.into(),
        start: Some(START.to_string()),
        seed: 7,
        out: None,
        interval: 10,
        late_rate: 0.0,
        malformed_rate: 0.0,
        duplicate_rate: 0.0,
        rooms: 10,
    }
}

pub(super) fn generate(args: &GenerateArgs) -> (Vec<u8>, GenerateSummary) {
    let mut out = Vec::new();
    let summary = Plan::new(args).unwrap().write(&mut out, None).unwrap();
    (out, summary)
}

pub(super) fn lines(out: &[u8]) -> Vec<&[u8]> {
    assert_eq!(out.last(), Some(&b'\n'), "output ends with a newline");
    out[..out.len() - 1].split(|&b| b == b'\n').collect()
}

/// A well-formed line's fields, or `None` if the pipeline's decoder would reject it
/// (its rules: UTF-8 JSON object, `device` of `[A-Za-z0-9.:-]{1,64}`, integer `ts` in
/// `0..=MAX_TS`, finite number `temp`).
pub(super) fn reading(line: &[u8]) -> Option<serde_json::Map<String, Value>> {
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(line) else {
        return None;
    };
    let device = fields.get("device")?.as_str()?;
    let device_ok = (1..=64).contains(&device.len())
        && device
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '-'));
    let ts = fields.get("ts")?.as_i64()?;
    let temp = fields.get("temp")?.as_f64()?;
    (device_ok && (0..=MAX_TS).contains(&ts) && temp.is_finite()).then_some(fields)
}

pub(super) fn ts(line: &[u8]) -> Option<i64> {
    reading(line)?.get("ts")?.as_i64()
}
