//! The device registry: a CSV file mapping device → room (and optional attributes).
//!
//! Format: a header line starting with `device,room`, then one `device,room[,more…]` per line;
//! blank lines and lines starting with `#` are skipped. Extra columns (e.g. `gateway`) are kept
//! as text but not used yet.

use std::collections::BTreeMap;
use std::path::Path;

use crate::rowkey::validate_device;
use crate::{Error, Result};

/// Device → room.
pub type Registry = BTreeMap<String, String>;

/// Checks a room id: the same alphabet as device ids, since it starts the room view's row keys.
///
/// # Errors
/// [`Error::Invalid`] naming the problem.
pub fn validate_room(room: &str) -> Result<()> {
    validate_device(room).map_err(|e| Error::Invalid(e.to_string().replace("device id", "room id")))
}

/// Parses registry CSV text.
///
/// # Errors
/// [`Error::Invalid`] naming the line and what is wrong with it.
pub fn parse(text: &str) -> Result<Registry> {
    let mut registry = Registry::new();
    let mut header_seen = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut cols = line.split(',').map(str::trim);
        let (device, room) = (
            cols.next().unwrap_or_default(),
            cols.next().unwrap_or_default(),
        );
        if !header_seen {
            header_seen = true;
            if device == "device" && room == "room" {
                continue;
            }
            return Err(Error::Invalid(format!(
                "registry line {}: expected the header `device,room[,…]`, got {line:?}",
                i + 1
            )));
        }
        validate_device(device)
            .map_err(|e| Error::Invalid(format!("registry line {}: {e}", i + 1)))?;
        validate_room(room).map_err(|e| Error::Invalid(format!("registry line {}: {e}", i + 1)))?;
        registry.insert(device.to_string(), room.to_string());
    }
    Ok(registry)
}

/// Reads and parses a registry file.
///
/// # Errors
/// [`Error::Io`] if unreadable, [`Error::Invalid`] if malformed.
pub fn load(path: &Path) -> Result<Registry> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
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
}
