//! A profile as it was at a past time, from `user_tag_history`.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use sinks::table::{ScanSpec, TableReader, TimeRange};

use super::{ProfileReader, Source};
use crate::key::{parse_history_row, user_history_prefix, validate_user_id};
use crate::tables::{HISTORY_FAMILY, HISTORY_QUALIFIER, HISTORY_TABLE};
use crate::{Error, Result};

impl ProfileReader {
    /// `user`'s stored tags as they were at `at_ms` (epoch ms): per tag, the value of its
    /// newest change at or before that time, from one prefix scan of the user's history rows
    /// (bounded to cells stamped up to `at_ms`, so stores skip newer files), as
    /// `{"user_id", "tags", "source": "history", "at_ms"}`; `None` when no change is that old.
    ///
    /// Short-term tags have no history and are not given; the history keeps 180 days.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a user id that cannot be stored; the store cannot be read.
    pub fn at(&self, store: &dyn TableReader, user: &str, at_ms: i64) -> Result<Option<Value>> {
        validate_user_id(user).map_err(|e| Error::Invalid(format!("user {user:?}: {e}")))?;
        let spec = ScanSpec {
            time_range: Some(TimeRange::new(i64::MIN, at_ms.saturating_add(1))),
            ..ScanSpec::prefix(&user_history_prefix(user))
        };
        // Per code, the newest change at or before `at_ms`: (its time, its value).
        let mut newest: BTreeMap<String, (i64, Vec<u8>)> = BTreeMap::new();
        for row in store.scan(HISTORY_TABLE, &spec)? {
            let Some((row_user, code, ts_ms)) = parse_history_row(&row.key) else {
                continue;
            };
            let Some(cell) = row.cell(HISTORY_FAMILY, HISTORY_QUALIFIER) else {
                continue;
            };
            if row_user != user || ts_ms > at_ms {
                continue;
            }
            let slot = newest
                .entry(code.to_string())
                .or_insert((i64::MIN, Vec::new()));
            if ts_ms > slot.0 {
                *slot = (ts_ms, cell.value.clone());
            }
        }
        if newest.is_empty() {
            return Ok(None);
        }
        let defs = self.defs();
        let tags: Map<String, Value> = newest
            .into_iter()
            .map(|(code, (_, value))| {
                let typed = super::typed(&defs, &code, None, &value);
                (code, typed)
            })
            .collect();
        Ok(Some(json!({
            "user_id": user, "tags": tags, "source": Source::History.as_str(), "at_ms": at_ms,
        })))
    }
}
