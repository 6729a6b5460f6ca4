//! A cached profile, `profile:{user}`'s value: the stored tags (or the core ones) and whether
//! they are the whole stored profile.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::CacheConfig;

/// The value of `profile:{user}`: `{"complete": bool, "newest_ms": N, "tags": {code: value}}`.
///
/// `tags` are the stored tags (`dimension` and `behavior`, newest values, typed), never the
/// short-term ones, which live in their own keys and are read with the entry. `complete` is
/// true when `tags` is the user's whole stored profile, false for a capped entry (only the
/// core tags the user has).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Whether `tags` holds every stored tag of the user.
    pub complete: bool,
    /// The newest cell timestamp of the row (ms), which decided that the user is active.
    pub newest_ms: i64,
    /// The cached tags, typed as the registry says.
    pub tags: Map<String, Value>,
}

impl Entry {
    /// The entry to cache for a user whose stored tags are `tags` (newest cell `newest_ms`):
    /// the core tags of `cfg` among them (complete when there is no other), or, without core
    /// tags, all of them; `None` when there are none to cache, or more than `cfg.max_tags`
    /// without core tags.
    pub fn of_profile(
        tags: &Map<String, Value>,
        newest_ms: i64,
        cfg: &CacheConfig,
    ) -> Option<Self> {
        if cfg.core_tags.is_empty() {
            return (!tags.is_empty() && tags.len() <= cfg.max_tags).then(|| Entry {
                complete: true,
                newest_ms,
                tags: tags.clone(),
            });
        }
        let core: Map<String, Value> = tags
            .iter()
            .filter(|(code, _)| cfg.core_tags.contains(*code))
            .map(|(c, v)| (c.clone(), v.clone()))
            .collect();
        Some(Entry {
            complete: core.len() == tags.len(),
            newest_ms,
            tags: core,
        })
    }

    /// Whether this entry answers a read of `stored` (the stored tag codes the request selects;
    /// `None`: every tag): always when complete; for a capped entry, only when every selected
    /// code is a core tag, since then a core tag missing from the entry is missing from the
    /// row. A capped entry never answers for the whole profile.
    pub fn answers(&self, stored: Option<&HashSet<String>>, core: &HashSet<String>) -> bool {
        self.complete || stored.is_some_and(|codes| codes.iter().all(|c| core.contains(c)))
    }

    /// The entry's JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The entry of a cached value; `None` for text that is not one (a foreign or older
    /// writer's), which is read as a miss.
    pub fn from_json(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tags(codes: &[&str]) -> Map<String, Value> {
        codes.iter().map(|c| ((*c).to_string(), json!(1))).collect()
    }

    #[test]
    fn without_core_tags_an_entry_is_whole_or_absent() {
        let mut cfg = CacheConfig {
            max_tags: 2,
            ..CacheConfig::default()
        };
        let e = Entry::of_profile(&tags(&["a", "b"]), 5, &cfg).unwrap();
        assert!(e.complete && e.answers(None, &cfg.core_tags));
        assert_eq!(Entry::of_profile(&tags(&["a", "b", "c"]), 5, &cfg), None);
        assert_eq!(Entry::of_profile(&tags(&[]), 5, &cfg), None);
        cfg.max_tags = 3;
        assert!(Entry::of_profile(&tags(&["a", "b", "c"]), 5, &cfg).is_some());
    }

    #[test]
    fn a_capped_entry_answers_only_for_core_tags() {
        let cfg = CacheConfig {
            core_tags: ["a", "b"].iter().map(|s| (*s).to_string()).collect(),
            ..CacheConfig::default()
        };
        let capped = Entry::of_profile(&tags(&["a", "x"]), 5, &cfg).unwrap();
        assert!(!capped.complete);
        assert_eq!(capped.tags, tags(&["a"]));
        let only = |c: &[&str]| c.iter().map(|s| (*s).to_string()).collect::<HashSet<_>>();
        assert!(
            !capped.answers(None, &cfg.core_tags),
            "never the whole profile"
        );
        assert!(capped.answers(Some(&only(&["a", "b"])), &cfg.core_tags));
        assert!(!capped.answers(Some(&only(&["a", "x"])), &cfg.core_tags));
        let whole = Entry::of_profile(&tags(&["b"]), 5, &cfg).unwrap();
        assert!(whole.complete && whole.answers(None, &cfg.core_tags));
        let back = Entry::from_json(&capped.to_json()).unwrap();
        assert_eq!(back, capped);
        assert_eq!(Entry::from_json("{\"tags\":1}"), None);
    }
}
