//! The device registry: device → room (and optional attributes), from a CSV file or from the
//! records of a compacted Kafka topic.
//!
//! File format: a header line starting with `device,room`, then one `device,room[,more…]` per
//! line; blank lines and lines starting with `#` are skipped. Topic records: key = device id,
//! value = the file's columns after `device` (`room[,gateway,…]`, UTF-8), a null value
//! (tombstone) = the device leaves the registry. Extra columns (e.g. `gateway`) are kept as text
//! in the topic but not used yet.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::codec::key::validate_device;
use crate::{Error, Result};
use pipeline::config::SourceConfig;

/// Device → room.
pub type Registry = BTreeMap<String, String>;

/// Where the room view's registry comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistrySource {
    /// A CSV file, polled for changes.
    File(PathBuf),
    /// A compacted Kafka topic on the brokers (and with the librdkafka settings) of `source`,
    /// read whole from the beginning, then followed.
    Topic {
        /// Brokers and client settings (the readings' `source`; its topic and group are unused).
        source: SourceConfig,
        /// The registry topic.
        topic: String,
    },
}

/// Checks a room id: the same alphabet as device ids, since it starts the room view's row keys.
///
/// # Errors
/// [`pipeline::Error::Invalid`] naming the problem.
pub fn validate_room(room: &str) -> Result<()> {
    validate_device(room).map_err(|e| Error::invalid(e.to_string().replace("device id", "room id")))
}

/// Parses registry CSV text into its entries, in file order: the device and the columns after
/// it as written (`room[,more…]`, each column trimmed), i.e. exactly a registry topic record's
/// key and value.
///
/// # Errors
/// [`pipeline::Error::Invalid`] naming the line and what is wrong with it.
pub fn parse_entries(text: &str) -> Result<Vec<(String, String)>> {
    let mut entries = Vec::new();
    let mut header_seen = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut cols = line.split(',').map(str::trim);
        let device = cols.next().unwrap_or_default();
        let rest: Vec<&str> = cols.collect();
        let room = rest.first().copied().unwrap_or_default();
        if !header_seen {
            header_seen = true;
            if device == "device" && room == "room" {
                continue;
            }
            return Err(Error::invalid(format!(
                "registry line {}: expected the header `device,room[,…]`, got {line:?}",
                i + 1
            )));
        }
        validate_device(device)
            .map_err(|e| Error::invalid(format!("registry line {}: {e}", i + 1)))?;
        validate_room(room).map_err(|e| Error::invalid(format!("registry line {}: {e}", i + 1)))?;
        entries.push((device.to_string(), rest.join(",")));
    }
    Ok(entries)
}

/// Parses registry CSV text.
///
/// # Errors
/// [`pipeline::Error::Invalid`] naming the line and what is wrong with it.
pub fn parse(text: &str) -> Result<Registry> {
    Ok(parse_entries(text)?
        .into_iter()
        .map(|(device, value)| {
            let room = value.split(',').next().unwrap_or_default().to_string();
            (device, room)
        })
        .collect())
}

/// Why a registry topic record was refused. `Display` is the dead-letter reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The record has no key, or an empty one.
    #[error("record has no key: the key must be the device id")]
    NoKey,
    /// The key is not UTF-8.
    #[error("key is not valid UTF-8")]
    KeyNotUtf8,
    /// The key is not a valid device id.
    #[error("key: {0}")]
    BadDevice(String),
    /// The value is empty (a device leaves the registry with a null value, a tombstone).
    #[error("empty value: expected `room[,gateway,…]`, or a null value (tombstone) to remove the device")]
    EmptyValue,
    /// The value is not UTF-8.
    #[error("value is not valid UTF-8")]
    ValueNotUtf8,
    /// The value's first column is not a valid room id.
    #[error("value: {0}")]
    BadRoom(String),
}

impl RecordError {
    /// A short machine-readable name (`kind` in the dead-letter record).
    pub fn kind(&self) -> &'static str {
        match self {
            RecordError::NoKey => "no_key",
            RecordError::KeyNotUtf8 => "key_not_utf8",
            RecordError::BadDevice(_) => "bad_device",
            RecordError::EmptyValue => "empty_value",
            RecordError::ValueNotUtf8 => "value_not_utf8",
            RecordError::BadRoom(_) => "bad_room",
        }
    }
}

/// The room of a registry topic record's value `room[,gateway,…]`: its first column, trimmed.
///
/// # Errors
/// [`RecordError::EmptyValue`] or [`RecordError::BadRoom`].
pub fn parse_value(value: &str) -> std::result::Result<String, RecordError> {
    if value.trim().is_empty() {
        return Err(RecordError::EmptyValue);
    }
    let room = value.split(',').next().unwrap_or_default().trim();
    validate_room(room).map_err(|e| RecordError::BadRoom(e.to_string()))?;
    Ok(room.to_string())
}

/// A registry topic record as an update: `(device, Some(room))`, or `(device, None)` for a
/// tombstone (null value).
///
/// # Errors
/// What is wrong with the key or the value.
pub fn parse_record(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> std::result::Result<(String, Option<String>), RecordError> {
    let key = key.filter(|k| !k.is_empty()).ok_or(RecordError::NoKey)?;
    let device = std::str::from_utf8(key).map_err(|_| RecordError::KeyNotUtf8)?;
    validate_device(device).map_err(|e| RecordError::BadDevice(e.to_string()))?;
    let room = match value {
        None => None,
        Some(v) => Some(parse_value(
            std::str::from_utf8(v).map_err(|_| RecordError::ValueNotUtf8)?,
        )?),
    };
    Ok((device.to_string(), room))
}

/// A registry topic record that was refused: where it is, why, and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedRecord {
    /// The registry topic.
    pub topic: String,
    /// The record's partition.
    pub partition: i32,
    /// The record's offset in its partition.
    pub offset: i64,
    /// Why it was refused.
    pub error: RecordError,
    /// The record's key, if any.
    pub key: Option<Vec<u8>>,
    /// The record's value, if any.
    pub value: Option<Vec<u8>>,
}

/// Reads and parses a registry file.
///
/// # Errors
/// [`pipeline::Error::Io`] if unreadable, [`pipeline::Error::Invalid`] if malformed.
pub fn load(path: &Path) -> Result<Registry> {
    let text = std::fs::read_to_string(path).map_err(|source| pipeline::Error::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text).map_err(|e| Error::invalid(format!("{}: {e}", path.display())))
}

/// The changes that turn `old` into `new`: `((device, room), +1 | -1)`.
pub fn diff(old: &Registry, new: &Registry) -> Vec<((String, String), isize)> {
    let mut changes = Vec::new();
    for (device, room) in old {
        if new.get(device) != Some(room) {
            changes.push(((device.clone(), room.clone()), -1));
        }
    }
    for (device, room) in new {
        if old.get(device) != Some(room) {
            changes.push(((device.clone(), room.clone()), 1));
        }
    }
    changes
}

/// Applies topic updates (`(device, Some(room))` or a tombstone `(device, None)`, in order) to
/// `current` and returns the changes they make, as [`diff`] of the touched devices before and
/// after (a device updated several times yields only its net change).
pub fn apply(
    current: &mut Registry,
    updates: impl IntoIterator<Item = (String, Option<String>)>,
) -> Vec<((String, String), isize)> {
    let mut before = Registry::new();
    let mut touched = std::collections::BTreeSet::new();
    for (device, room) in updates {
        if touched.insert(device.clone()) {
            if let Some(r) = current.get(&device) {
                before.insert(device.clone(), r.clone());
            }
        }
        match room {
            Some(room) => current.insert(device, room),
            None => current.remove(&device),
        };
    }
    let after: Registry = touched
        .into_iter()
        .filter_map(|d| current.get(&d).cloned().map(|r| (d, r)))
        .collect();
    diff(&before, &after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_diffs() {
        let a = parse("device,room,gateway\n# comment\ndev1,room1,gw\n\ndev2,room2\n").unwrap();
        let b = parse("device,room\ndev1,room9\ndev3,room3\n").unwrap();
        let mut d = diff(&a, &b);
        d.sort();
        assert_eq!(
            d,
            vec![
                (("dev1".into(), "room1".into()), -1),
                (("dev1".into(), "room9".into()), 1),
                (("dev2".into(), "room2".into()), -1),
                (("dev3".into(), "room3".into()), 1),
            ]
        );
        assert!(parse("dev1,room1\n")
            .unwrap_err()
            .to_string()
            .contains("header"));
        assert!(parse("device,room\nbad_id,room1\n")
            .unwrap_err()
            .to_string()
            .contains("line 2"));
        assert!(parse("device,room\nd,room_1\n")
            .unwrap_err()
            .to_string()
            .contains("room id"));
    }

    #[test]
    fn entries_keep_the_columns_after_the_device() {
        let entries =
            parse_entries("device, room ,gateway\ndev1, room1 , gw1\ndev2,room2\n").unwrap();
        assert_eq!(
            entries,
            vec![
                ("dev1".to_string(), "room1,gw1".to_string()),
                ("dev2".to_string(), "room2".to_string())
            ]
        );
    }

    #[test]
    fn topic_records_parse_or_say_why_not() {
        let ok = |k: &[u8], v: Option<&[u8]>| parse_record(Some(k), v).unwrap();
        assert_eq!(
            ok(b"dev1", Some(b"room1")),
            ("dev1".into(), Some("room1".into()))
        );
        assert_eq!(
            ok(b"gateway-7:temp.sensor-000123", Some(b" lab1 ,gw2,extra")),
            ("gateway-7:temp.sensor-000123".into(), Some("lab1".into()))
        );
        assert_eq!(ok(b"dev1", None), ("dev1".into(), None));
        let err = |k: Option<&[u8]>, v: Option<&[u8]>| parse_record(k, v).unwrap_err();
        assert_eq!(err(None, Some(b"room1")), RecordError::NoKey);
        assert_eq!(err(Some(b""), Some(b"room1")), RecordError::NoKey);
        assert_eq!(err(Some(b"d\xff"), Some(b"room1")), RecordError::KeyNotUtf8);
        assert!(matches!(
            err(Some(b"bad_id"), Some(b"r")),
            RecordError::BadDevice(_)
        ));
        assert_eq!(err(Some(b"dev1"), Some(b"")), RecordError::EmptyValue);
        assert!(matches!(
            err(Some(b"dev1"), Some(b" ,gw1")),
            RecordError::BadRoom(_)
        ));
        assert_eq!(
            err(Some(b"dev1"), Some(b"r\xff")),
            RecordError::ValueNotUtf8
        );
        let bad_room = err(Some(b"dev1"), Some(b"room_1,gw"));
        assert_eq!(bad_room.kind(), "bad_room");
        assert!(bad_room.to_string().contains("room id"), "{bad_room}");
    }

    #[test]
    fn applied_updates_give_net_changes() {
        let mut reg = parse("device,room\ndev1,a\ndev2,b\n").unwrap();
        let mut changes = apply(
            &mut reg,
            [
                ("dev1".to_string(), Some("c".to_string())),
                ("dev2".to_string(), None),
                ("dev3".to_string(), Some("x".to_string())),
                ("dev3".to_string(), None),
                ("dev4".to_string(), None),
                ("dev1".to_string(), Some("d".to_string())),
            ],
        );
        changes.sort();
        assert_eq!(
            changes,
            vec![
                (("dev1".into(), "a".into()), -1),
                (("dev1".into(), "d".into()), 1),
                (("dev2".into(), "b".into()), -1),
            ]
        );
        assert_eq!(reg, parse("device,room\ndev1,d\n").unwrap());
        assert!(apply(&mut reg, [("dev1".to_string(), Some("d".to_string()))]).is_empty());
    }
}
