//! Reading a user's profile back: the stored tags of `user_profile_tag` and the live short-term
//! tags, as `hourglass profile get` prints them.

use serde_json::{Map, Value};
use sinks::table::TableReader;

use crate::event::CellValue;
use crate::key::{profile_row, validate_user_id};
use crate::short_term::ShortTermStore;
use crate::tables::{family_of, PROFILE_TABLE};
use crate::tag::{TagDef, ValueType};
use crate::{Error, Result};

/// The profile of `user`: `{"user_id": user, "tags": {code: value}}`, the values typed by the
/// registry's `defs` (a number, a boolean, a string, an array of strings), the short-term tags
/// included from `short_term` (those live at `now`, epoch seconds). `None` when the user has no
/// stored tag at all.
///
/// A stored cell whose tag the registry no longer defines, or whose text does not read as its
/// type, is given as its text: what is stored is shown, never dropped.
///
/// # Errors
/// [`Error::Invalid`] for a user id that cannot be stored; the table or the short-term store
/// cannot be read.
pub fn profile_of(
    reader: &dyn TableReader,
    short_term: &mut dyn ShortTermStore,
    defs: &[TagDef],
    user: &str,
    now: i64,
) -> Result<Option<Value>> {
    validate_user_id(user).map_err(|e| Error::Invalid(e.to_string()))?;
    let mut tags = Map::new();
    if let Some(row) = reader.get(PROFILE_TABLE, &profile_row(user), None)? {
        for cell in &row.cells {
            let code = String::from_utf8_lossy(&cell.qualifier).into_owned();
            let def = defs
                .iter()
                .find(|d| d.tag_code == code && family_of(d.value_type) == Some(&cell.family));
            let value = def
                .and_then(|d| CellValue::from_cell(d.data_type, &cell.value))
                .and_then(|v| serde_json::from_str(&v.to_json()).ok())
                .unwrap_or_else(|| Value::String(String::from_utf8_lossy(&cell.value).into()));
            tags.insert(code, value);
        }
    }
    let codes: Vec<&str> = defs
        .iter()
        .filter(|d| d.value_type == ValueType::ShortTerm)
        .map(|d| d.tag_code.as_str())
        .collect();
    if !codes.is_empty() {
        for (code, json) in short_term.read_user(user, &codes, now)? {
            let value = serde_json::from_str(&json).unwrap_or(Value::String(json));
            tags.insert(code, value);
        }
    }
    if tags.is_empty() {
        return Ok(None);
    }
    let mut profile = Map::new();
    profile.insert("user_id".into(), Value::String(user.to_string()));
    profile.insert("tags".into(), Value::Object(tags));
    Ok(Some(Value::Object(profile)))
}
