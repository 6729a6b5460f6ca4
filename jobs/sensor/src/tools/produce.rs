//! `hourglass produce`: publishes a recording to Kafka, one record per line, keyed by a field
//! of the line: `device` (the sensor job's readings) unless `--key FIELD` names another
//! (`--key user_id` for the profile job's tag events).
//!
//! The key keeps each device's (or user's) records in one partition, in order: a string value
//! as it is, a non-negative integer as its decimal text (a user id `10086` and `"10086"` are one
//! user, and one key). Lines whose key field cannot be read are published without a key (any
//! partition), so that the job's dead-letter output sees them as a replay would.
//!
//! `--registry FILE` publishes a device registry CSV to a compacted topic instead (key = device
//! id, value = the columns after `device`), `--delete DEVICE` a tombstone, and `--prune`
//! tombstones for the devices the topic holds but the file does not list; `hourglass run`
//! follows such a topic with `registry_topic`.

use std::io::BufRead;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::registry::Registry;
use crate::registry_topic::RegistryTopic;
use crate::Result;
use pipeline::config::SourceConfig;
use pipeline::live_bench::{create_topic, flush_all, send, Deliveries};
use pipeline::Context;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord};

/// Longest record published: longer lines are cut (the job rejects them as too long anyway;
/// brokers refuse records over 1 MB by default).
const MAX_RECORD_BYTES: usize = 900 * 1024;

/// How long `--prune` may take to read the registry topic to its end.
const PRUNE_READ_LIMIT: Duration = Duration::from_secs(120);

/// Arguments of `hourglass produce`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProduceArgs {
    /// Recorded traffic: JSON Lines, optionally `.gz` or `.zst`; `-` reads stdin.
    #[arg(required_unless_present_any = ["registry", "delete"])]
    pub file: Option<PathBuf>,
    /// Publish this device registry CSV (`device,room[,gateway,…]`) instead: one record per
    /// device, key = device id, value = the columns after `device`. The topic is created with
    /// `cleanup.policy=compact` (and `--partitions`, default 1) if missing; an existing topic
    /// must be compacted.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["file", "speed", "rate"])]
    pub registry: Option<PathBuf>,
    /// Remove this device from the registry topic: publish a tombstone (null value) for it
    /// (repeatable; with or without --registry).
    #[arg(long, value_name = "DEVICE", conflicts_with_all = ["file", "speed", "rate"])]
    pub delete: Vec<String>,
    /// With --registry: also publish a tombstone for every device the topic holds that the file
    /// does not list, so that the topic's registry becomes the file's (the topic is read to its
    /// end first).
    #[arg(long, requires = "registry")]
    pub prune: bool,
    /// Bootstrap brokers, `host:port[,host:port…]`.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub brokers: String,
    /// Topic to publish to.
    #[arg(long)]
    pub topic: String,
    /// `max` (as fast as possible) or a factor of recorded time: `1` real time, `60` one
    /// recorded minute per second.
    #[arg(long, default_value = "max")]
    pub speed: String,
    /// Publish at this many records per second instead (overrides --speed).
    #[arg(long, conflicts_with = "speed")]
    pub rate: Option<f64>,
    /// Create the topic with this many partitions if it does not exist (replication factor 1);
    /// otherwise the broker's auto-creation decides.
    #[arg(long)]
    pub partitions: Option<i32>,
    /// The top-level field whose value keys each record, so that one device's (or user's)
    /// records stay in one partition, in order: `device` for sensor readings, `user_id` for
    /// profile tag events. A string is the key as it is, a non-negative integer its decimal
    /// text; a line without such a value is published without a key.
    #[arg(long, value_name = "FIELD", default_value = "device", conflicts_with_all = ["registry", "delete"])]
    pub key: String,
    /// A librdkafka producer setting, `KEY=VALUE` (repeatable), e.g. security settings.
    #[arg(short = 'X', long = "set", value_name = "KEY=VALUE", value_parser = key_value)]
    pub settings: Vec<(String, String)>,
}

fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{s:?}: expected KEY=VALUE"))
}

/// The key of a JSON line, found without parsing the whole line: the value of its top-level
/// field `name` (quoted, e.g. `"device"`) if it is a string without escapes, or a non-negative
/// integer's digits (JSON has no leading zeros: they are its decimal text). `None` otherwise,
/// and for a string with escapes (which [`key_of`] parses).
fn quick_key<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let value = field_value(line, name)?;
    let Some(rest) = value.strip_prefix(b"\"") else {
        let digits = value.iter().take_while(|b| b.is_ascii_digit()).count();
        let after = trim_start(&value[digits..]);
        return (digits > 0 && matches!(after.first(), Some(b',' | b'}')))
            .then(|| &value[..digits]);
    };
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    if rest[end] == b'\\' {
        // An escaped id: rare, so parse properly. The key must equal the decoded id.
        return None;
    }
    Some(&rest[..end])
}

/// The event time (epoch seconds) of a JSON line, for pacing: integer `ts` or RFC 3339.
fn event_time(line: &[u8]) -> Option<i64> {
    let value = field_value(line, b"\"ts\"")?;
    if let Some(rest) = value.strip_prefix(b"\"") {
        let end = rest.iter().position(|&b| b == b'"')?;
        let text = std::str::from_utf8(&rest[..end]).ok()?;
        return chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.timestamp());
    }
    let end = value
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(value.len());
    std::str::from_utf8(&value[..end]).ok()?.parse().ok()
}

/// What follows `"name"` and its colon, when `"name"` is an object key (after `{` or `,`).
fn field_value<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let mut from = 0;
    while let Some(at) = find(&line[from..], name).map(|i| i + from) {
        from = at + name.len();
        let before = line[..at].iter().rev().find(|b| !b.is_ascii_whitespace());
        if !matches!(before, Some(b'{' | b',')) {
            continue;
        }
        let rest = trim_start(&line[from..]);
        if let Some(rest) = rest.strip_prefix(b":") {
            return Some(trim_start(rest));
        }
    }
    None
}

fn trim_start(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|c| c.is_ascii_whitespace()).count();
    &b[n..]
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The key of a line: the value of its top-level field `field` (see [`ProduceArgs::key`]), from
/// a cheap scan or, for escaped strings, a full parse.
fn key_of(line: &[u8], field: &str) -> Option<Vec<u8>> {
    let name = format!("\"{field}\"");
    if let Some(k) = quick_key(line, name.as_bytes()) {
        return Some(k.to_vec());
    }
    find(line, name.as_bytes())?;
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    match v.get(field)? {
        serde_json::Value::String(s) => Some(s.as_bytes().to_vec()),
        serde_json::Value::Number(n) => n.as_u64().map(|n| n.to_string().into_bytes()),
        _ => None,
    }
}

/// When the next record is due.
enum Pace {
    Max,
    /// Factor of recorded time: (factor, wall-clock start and first event time).
    Speed(f64, Option<(Instant, i64)>),
    /// Records per second since the start.
    Rate(f64, Instant),
}

impl Pace {
    fn due(&mut self, n: u64, newest: Option<i64>) -> Option<Instant> {
        match self {
            Pace::Max => None,
            Pace::Speed(factor, start) => {
                let ts = newest?;
                let (at, first) = *start.get_or_insert((Instant::now(), ts));
                Some(at + Duration::from_secs_f64((ts - first).max(0) as f64 / *factor))
            }
            Pace::Rate(rate, at) => Some(*at + Duration::from_secs_f64(n as f64 / *rate)),
        }
    }
}

fn parse_speed(s: &str) -> Result<Option<f64>> {
    if s == "max" {
        return Ok(None);
    }
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(Some(f)),
        _ => bail!("--speed {s:?}: use `max` or a positive factor such as 1 or 60"),
    }
}

/// Runs `hourglass produce`.
pub fn run(args: &ProduceArgs) -> Result<()> {
    if args.registry.is_some() || !args.delete.is_empty() {
        return produce_registry(args);
    }
    let mut pace = match (args.rate, parse_speed(&args.speed)?) {
        (Some(r), _) if r.is_finite() && r > 0.0 => Pace::Rate(r, Instant::now()),
        (Some(r), _) => bail!("--rate {r}: use a positive number of records per second"),
        (None, Some(f)) => Pace::Speed(f, None),
        (None, None) => Pace::Max,
    };
    let mut cfg = ClientConfig::new();
    cfg.set("linger.ms", "5")
        .set("enable.idempotence", "true")
        .set("message.max.bytes", "1000000");
    for (k, v) in &args.settings {
        cfg.set(k, v);
    }
    cfg.set("bootstrap.servers", &args.brokers);
    if let Some(n) = args.partitions {
        ensure!(n > 0, "--partitions {n}: use at least 1");
        create_topic(&cfg, &args.topic, n, false)?;
    }
    let producer: BaseProducer<Deliveries> = cfg
        .create_with_context(Deliveries::default())
        .context("creating the Kafka producer (check -X settings)")?;

    let file = args
        .file
        .as_ref()
        .context("a recording to publish is required (or --registry FILE / --delete DEVICE)")?;
    let mut input = pipeline::source::replay::input::open(file, None)?;
    let started = Instant::now();
    if let Pace::Rate(_, at) = &mut pace {
        *at = started;
    }
    let (mut sent, mut keyless) = (0u64, 0u64);
    let mut newest: Option<i64> = None;
    let mut buf = Vec::with_capacity(1024);
    loop {
        buf.clear();
        let n = input
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("reading {}", file.display()))?;
        if n == 0 {
            break;
        }
        while let [rest @ .., b'\n' | b'\r'] = buf.as_slice() {
            buf.truncate(rest.len());
        }
        buf.truncate(MAX_RECORD_BYTES);
        // Implausible times (milliseconds, year 2286+) would stall the pacing; the job rejects
        // those lines anyway.
        if let Some(ts) = event_time(&buf).filter(|&ts| ts <= pipeline::json::MAX_TS) {
            newest = Some(newest.map_or(ts, |m| m.max(ts)));
        }
        if let Some(due) = pace.due(sent, newest) {
            while Instant::now() < due {
                producer.poll(
                    due.saturating_duration_since(Instant::now())
                        .min(Duration::from_millis(50)),
                );
            }
        }
        let key = key_of(&buf, &args.key);
        if key.is_none() {
            keyless += 1;
        }
        let mut record = BaseRecord::<[u8], [u8]>::to(&args.topic).payload(buf.as_slice());
        if let Some(k) = &key {
            record = record.key(k.as_slice());
        }
        send(&producer, record, &args.topic)?;
        sent += 1;
        if sent % 1024 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    flush_all(&producer, sent, "records", &args.topic)?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "produced {sent} records ({keyless} without a {} key) to {} in {secs:.1}s ({:.0}/s)",
        args.key,
        args.topic,
        sent as f64 / secs.max(1e-9)
    );
    Ok(())
}

/// `hourglass produce --registry FILE [--delete DEVICE…]`: publishes a registry to a compacted
/// topic.
fn produce_registry(args: &ProduceArgs) -> Result<()> {
    let entries = match &args.registry {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            crate::registry::parse_entries(&text)
                .with_context(|| format!("registry {}", path.display()))?
        }
        None => Vec::new(),
    };
    for device in &args.delete {
        crate::codec::key::validate_device(device).with_context(|| format!("--delete {device}"))?;
    }
    let mut cfg = ClientConfig::new();
    cfg.set("enable.idempotence", "true");
    for (k, v) in &args.settings {
        cfg.set(k, v);
    }
    cfg.set("bootstrap.servers", &args.brokers);
    let partitions = args.partitions.unwrap_or(1);
    ensure!(partitions > 0, "--partitions {partitions}: use at least 1");
    let created = create_topic(&cfg, &args.topic, partitions, true)?;
    if !created {
        let policy = crate::registry_topic::cleanup_policy(&cfg, &args.topic)?;
        if !policy
            .as_deref()
            .is_some_and(|p| p.split(',').any(|p| p.trim() == "compact"))
        {
            bail!(
                "topic {} exists with cleanup.policy={}: a registry topic must be compacted, or \
                 its entries expire; alter it (kafka-configs.sh --alter --add-config \
                 cleanup.policy=compact) or pick a new topic",
                args.topic,
                policy.as_deref().unwrap_or("unknown")
            );
        }
    }
    let mut tombstones: Vec<String> = args.delete.clone();
    // A topic just created holds nothing to prune.
    if args.prune && !created {
        let listed: std::collections::BTreeSet<&str> =
            entries.iter().map(|(device, _)| device.as_str()).collect();
        let stale: Vec<String> = registry_in_topic(args)?
            .into_keys()
            .filter(|device| !listed.contains(device.as_str()) && !tombstones.contains(device))
            .collect();
        eprintln!(
            "--prune: {} devices in {} are not in the file",
            stale.len(),
            args.topic
        );
        tombstones.extend(stale);
    }
    let producer: BaseProducer<Deliveries> = cfg
        .create_with_context(Deliveries::default())
        .context("creating the Kafka producer (check -X settings)")?;
    let records = entries
        .iter()
        .map(|(device, value)| (device.as_str(), Some(value.as_bytes())))
        .chain(tombstones.iter().map(|device| (device.as_str(), None)));
    let mut sent = 0u64;
    for (device, value) in records {
        let mut record = BaseRecord::<[u8], [u8]>::to(&args.topic).key(device.as_bytes());
        if let Some(v) = value {
            record = record.payload(v);
        }
        send(&producer, record, &args.topic)?;
        sent += 1;
    }
    flush_all(&producer, sent, "registry records", &args.topic)?;
    eprintln!(
        "published {} registry entries and {} tombstones to {}",
        entries.len(),
        tombstones.len(),
        args.topic
    );
    Ok(())
}

/// The registry the topic `args.topic` holds now, read to where it ends (as `hourglass run`
/// reads it at start; refused records change nothing).
fn registry_in_topic(args: &ProduceArgs) -> Result<Registry> {
    let source = SourceConfig {
        brokers: args.brokers.clone(),
        group_id: "hourglass-produce".into(),
        rdkafka: args.settings.iter().cloned().collect(),
        ..SourceConfig::default()
    };
    Ok(RegistryTopic::open(&source, &args.topic)?
        .read_to_end(PRUNE_READ_LIMIT)
        .context("--prune: nothing was published")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_device_ids() {
        let key = |line: &[u8]| key_of(line, "device");
        assert_eq!(
            key(br#"{"device":"dev00786","ts":1724102400,"temp":25.5}"#).as_deref(),
            Some(&b"dev00786"[..])
        );
        assert_eq!(
            key(br#"{ "ts":1, "device" : "gateway-7:temp.sensor-000123" }"#).as_deref(),
            Some(&b"gateway-7:temp.sensor-000123"[..])
        );
        // A "device" inside a value is not the field.
        assert_eq!(
            key(br#"{"note":"\"device\":\"x\"","device":"d1"}"#).as_deref(),
            Some(&b"d1"[..])
        );
        assert_eq!(
            key(br#"{"device":"caf\u00e9","ts":1}"#).as_deref(),
            Some("café".as_bytes())
        );
        assert_eq!(key(br#"{"device":null,"ts":1}"#), None);
        assert_eq!(key(br#"{"device":"dev0"#), None);
        assert_eq!(key(b"not json at all"), None);
        assert_eq!(key(b""), None);
    }

    /// `--key user_id`: a profile tag event is keyed by its user, an integer id by its decimal
    /// text, so that `10086` and `"10086"` (one user to the job) go to one partition.
    #[test]
    fn tag_events_are_keyed_by_user_id() {
        let key = |line: &[u8]| key_of(line, "user_id");
        let tags = r#""ts":1796500000,"tags":{"dim_city":"hz"}"#;
        for line in [
            format!(r#"{{"user_id":"10086",{tags}}}"#),
            format!(r#"{{"user_id":10086,{tags}}}"#),
            format!(r#"{{{tags}, "user_id" : 10086 }}"#),
            format!(r#"{{"user_id":"100\u00386",{tags}}}"#),
        ] {
            assert_eq!(
                key(line.as_bytes()).as_deref(),
                Some(&b"10086"[..]),
                "{line}"
            );
        }
        // Not a user id the job accepts: no key, as a line without one.
        for line in [
            r#"{"user_id":-1,"ts":1}"#,
            r#"{"user_id":1.5,"ts":1}"#,
            r#"{"user_id":1e3,"ts":1}"#,
            r#"{"user_id":true,"ts":1}"#,
            r#"{"device":"dev0","ts":1}"#,
        ] {
            assert_eq!(key(line.as_bytes()), None, "{line}");
        }
        // The sensor job's key is not the profile job's.
        assert_eq!(key_of(br#"{"user_id":"u1","ts":1}"#, "device"), None);
    }

    #[test]
    fn event_times_for_pacing() {
        assert_eq!(
            event_time(br#"{"device":"d","ts":1724102400,"temp":1}"#),
            Some(1724102400)
        );
        assert_eq!(
            event_time(br#"{"device":"d","ts":"2024-08-19T21:20:00.900Z"}"#),
            Some(1724102400)
        );
        assert_eq!(event_time(br#"{"device":"d","temp":1}"#), None);
    }

    #[test]
    fn settings_are_key_value() {
        assert_eq!(
            key_value("security.protocol=SSL").unwrap(),
            ("security.protocol".to_string(), "SSL".to_string())
        );
        assert!(key_value("oops").is_err());
    }
}
