//! Which tags a read returns: every tag, or named tags and whole families.

use std::collections::HashSet;

use crate::tables::{BEHAVIOR_FAMILY, DIMENSION_FAMILY};
use crate::tag::{TagDef, ValueType};
use crate::{Error, Result};

/// The family name that selects the short-term tags (they are in no table family).
pub const SHORT_TERM_FAMILY: &str = "short_term";

/// The tags a read returns: all of them, or a set of codes (named tags and the registry's tags
/// of named families).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    codes: Option<HashSet<String>>,
}

impl Selection {
    /// Every tag.
    pub fn all() -> Self {
        Selection { codes: None }
    }

    /// The tags named in `tags` and those of `families` (`dimension`, `behavior`,
    /// `short_term`), as `defs` define them; both empty: every tag.
    ///
    /// # Errors
    /// [`Error::UnknownTag`] for a code `defs` do not define; [`Error::Invalid`] for an unknown
    /// family.
    pub fn new(defs: &[TagDef], tags: &[String], families: &[String]) -> Result<Self> {
        if tags.is_empty() && families.is_empty() {
            return Ok(Selection::all());
        }
        let mut codes = HashSet::new();
        for code in tags {
            if !defs.iter().any(|d| &d.tag_code == code) {
                return Err(Error::UnknownTag(code.clone()));
            }
            codes.insert(code.clone());
        }
        for family in families {
            let value_type = match family.as_str() {
                DIMENSION_FAMILY => ValueType::Dimension,
                BEHAVIOR_FAMILY => ValueType::Statistic,
                SHORT_TERM_FAMILY => ValueType::ShortTerm,
                other => {
                    return Err(Error::Invalid(format!(
                        "unknown family {other:?}: use {DIMENSION_FAMILY}, {BEHAVIOR_FAMILY} or \
                         {SHORT_TERM_FAMILY}"
                    )))
                }
            };
            codes.extend(
                defs.iter()
                    .filter(|d| d.value_type == value_type)
                    .map(|d| d.tag_code.clone()),
            );
        }
        Ok(Selection { codes: Some(codes) })
    }

    /// Whether the tag `code` is selected.
    pub fn wants(&self, code: &str) -> bool {
        self.codes.as_ref().is_none_or(|c| c.contains(code))
    }

    /// The selected short-term codes of `defs`.
    pub fn short_term_codes<'a>(&self, defs: &'a [TagDef]) -> Vec<&'a str> {
        defs.iter()
            .filter(|d| d.value_type == ValueType::ShortTerm && self.wants(&d.tag_code))
            .map(|d| d.tag_code.as_str())
            .collect()
    }

    /// The selected stored (not short-term) codes; `None` when every tag is selected.
    pub fn stored_codes(&self, defs: &[TagDef]) -> Option<HashSet<String>> {
        let codes = self.codes.as_ref()?;
        Some(
            codes
                .iter()
                .filter(|c| {
                    !defs
                        .iter()
                        .any(|d| &d.tag_code == *c && d.value_type == ValueType::ShortTerm)
                })
                .cloned()
                .collect(),
        )
    }
}
