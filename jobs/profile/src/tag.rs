//! A tag definition, its enumerations and the rules every definition obeys.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Longest tag code, in bytes: it is an HBase qualifier and part of a Redis key on every write.
pub const MAX_CODE_LEN: usize = 64;
/// Longest `name`, `category` and `owner`, in characters (a `VARCHAR(255)` column in MySQL).
pub const MAX_TEXT_LEN: usize = 255;
/// Longest `update_frequency`, in characters.
pub const MAX_FREQUENCY_LEN: usize = 64;
/// Longest TTL of a short-term tag: 366 days. Short-term tags live hours to days; a longer
/// life is a statistic tag.
pub const MAX_TTL_SECS: u64 = 366 * 24 * 3600;

/// The type of a tag's values, as stored: `true`/`false`, a decimal, a float, UTF-8 text, or a
/// JSON array of strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DataType {
    /// `true` or `false`.
    Boolean,
    /// A 64-bit signed integer.
    Int,
    /// A finite 64-bit float.
    Float,
    /// UTF-8 text.
    String,
    /// A JSON array of strings.
    MultiValue,
}

/// How a tag's value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValueType {
    /// A stable identity tag (city, gender): one version kept.
    Dimension,
    /// A behaviour tag recomputed daily: the last versions kept.
    Statistic,
    /// A tag that lives hours to days, with a TTL (`ttl_secs`), kept in Redis only.
    ShortTerm,
}

/// Whether a tag is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TagStatus {
    /// Written for every user.
    Online,
    /// Written only for the users of a configured test list.
    Gray,
    /// No longer written; its stored values are kept until it is purged.
    Offline,
}

/// Implements `as_str`, `Display` and `FromStr` (exact spelling, the serde one) for an enum.
macro_rules! spelled {
    ($ty:ident, $what:literal, $($variant:ident => $text:literal),+ $(,)?) => {
        impl $ty {
            /// Every value, in declaration order.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            /// The spelling used in CSV files, JSON, the registry's tables and the CLI.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $text),+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = Error;

            fn from_str(s: &str) -> Result<Self> {
                match s {
                    $($text => Ok($ty::$variant),)+
                    _ => Err(Error::Invalid(format!(
                        "{} '{}' is not one of {}",
                        $what,
                        s,
                        [$($text),+].join(", ")
                    ))),
                }
            }
        }
    };
}

spelled!(DataType, "data_type",
    Boolean => "BOOLEAN", Int => "INT", Float => "FLOAT", String => "STRING",
    MultiValue => "MULTI_VALUE");
spelled!(ValueType, "value_type",
    Dimension => "dimension", Statistic => "statistic", ShortTerm => "short_term");
spelled!(TagStatus, "status", Online => "online", Gray => "gray", Offline => "offline");

/// One tag code's definition, a row of the registry.
///
/// `tag_code` is the identity: the registry keys every definition by it and has no rename, so a
/// code, once stored, keeps naming the same tag. What a code means (`data_type`, `value_type`)
/// cannot change once it has been online ([`TagDef::check_change`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TagDef {
    /// The code, `[a-z][a-z0-9_]*`, at most [`MAX_CODE_LEN`] bytes: the HBase qualifier and
    /// a field of the Redis hash `short-tags:{user}` (a part of the old layout's key
    /// `short:{user}:{code}`), so no separators or upper case.
    pub tag_code: String,
    /// Human-readable name (any UTF-8 without control characters, 1 to [`MAX_TEXT_LEN`]).
    pub name: String,
    /// Type of the values.
    pub data_type: DataType,
    /// How the values live.
    pub value_type: ValueType,
    /// Whether the tag is written.
    pub status: TagStatus,
    /// Time to live of a short-term tag's value, 1 to [`MAX_TTL_SECS`] seconds; `None` for the
    /// other value types, whose values live until overwritten or purged.
    pub ttl_secs: Option<u64>,
    /// Free-form category (may be empty).
    pub category: String,
    /// Owning team or person (may be empty).
    pub owner: String,
    /// How often producers recompute it, free-form: `realtime`, `daily`, … (may be empty).
    pub update_frequency: String,
}

impl TagDef {
    /// Checks the definition's own rules.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] naming the first field that breaks a rule and what it should be.
    pub fn validate(&self) -> Result<()> {
        validate_code(&self.tag_code)?;
        text_field("name", &self.name, MAX_TEXT_LEN, false)?;
        text_field("category", &self.category, MAX_TEXT_LEN, true)?;
        text_field("owner", &self.owner, MAX_TEXT_LEN, true)?;
        text_field(
            "update_frequency",
            &self.update_frequency,
            MAX_FREQUENCY_LEN,
            true,
        )?;
        match (self.value_type, self.ttl_secs) {
            (ValueType::ShortTerm, None | Some(0)) => Err(Error::Invalid(format!(
                "a short_term tag needs ttl_secs between 1 and {MAX_TTL_SECS} (366 days)"
            ))),
            (ValueType::ShortTerm, Some(ttl)) if ttl > MAX_TTL_SECS => {
                Err(Error::Invalid(format!(
                    "ttl_secs {ttl} is longer than {MAX_TTL_SECS} (366 days): a tag that lives \
                     that long is a statistic tag"
                )))
            }
            (ValueType::Dimension | ValueType::Statistic, Some(_)) => Err(Error::Invalid(format!(
                "only short_term tags have a ttl_secs; a {} tag lives until overwritten or \
                     purged: leave ttl_secs empty",
                self.value_type
            ))),
            _ => Ok(()),
        }
    }

    /// Whether `self`, stored, may be replaced by `new` (same code).
    ///
    /// A tag that has been online (status `online`, or `offline` with its history kept) keeps
    /// its `data_type` and `value_type`: values already written under the code mean what they
    /// meant, so a new meaning takes a new code. `offline` counts too, or setting a tag offline
    /// and back would change its meaning under its stored values. A `gray` tag may still change.
    ///
    /// # Errors
    ///
    /// [`Error::Refused`] saying which property would change.
    pub fn check_change(&self, new: &TagDef) -> Result<()> {
        if self.status == TagStatus::Gray {
            return Ok(());
        }
        let mut changes = Vec::new();
        if self.data_type != new.data_type {
            changes.push(format!("data_type {} -> {}", self.data_type, new.data_type));
        }
        if self.value_type != new.value_type {
            changes.push(format!(
                "value_type {} -> {}",
                self.value_type, new.value_type
            ));
        }
        if changes.is_empty() {
            return Ok(());
        }
        Err(Error::Refused {
            code: self.tag_code.clone(),
            reason: format!(
                "the tag is {} and its {} cannot change: a new meaning is a new code \
                 (define a new tag_code, and set this one offline)",
                self.status,
                changes.join(" and ")
            ),
        })
    }
}

/// Checks a tag code: `[a-z][a-z0-9_]*`, 1 to [`MAX_CODE_LEN`] bytes.
///
/// # Errors
///
/// [`Error::Invalid`] saying what is wrong with it.
pub fn validate_code(code: &str) -> Result<()> {
    if code.is_empty() {
        return Err(Error::Invalid("tag_code is empty".into()));
    }
    if code.len() > MAX_CODE_LEN {
        return Err(Error::Invalid(format!(
            "tag_code '{code}' is {} bytes long; at most {MAX_CODE_LEN}",
            code.len()
        )));
    }
    let first_ok = code.as_bytes()[0].is_ascii_lowercase();
    let rest_ok = code
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !first_ok || !rest_ok {
        return Err(Error::Invalid(format!(
            "tag_code '{code}' must be a lowercase letter followed by lowercase letters, digits \
             and '_' ([a-z][a-z0-9_]*)"
        )));
    }
    Ok(())
}

fn text_field(field: &str, value: &str, max: usize, may_be_empty: bool) -> Result<()> {
    if value.is_empty() && !may_be_empty {
        return Err(Error::Invalid(format!("{field} is empty")));
    }
    let chars = value.chars().count();
    if chars > max {
        return Err(Error::Invalid(format!(
            "{field} is {chars} characters long; at most {max}"
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::Invalid(format!(
            "{field} {value:?} contains a control character (a line break, a tab, ...)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn tag(code: &str, data_type: DataType, value_type: ValueType) -> TagDef {
        TagDef {
            tag_code: code.into(),
            name: format!("name of {code}"),
            data_type,
            value_type,
            status: TagStatus::Online,
            ttl_secs: (value_type == ValueType::ShortTerm).then_some(3600),
            category: "test".into(),
            owner: "team".into(),
            update_frequency: "daily".into(),
        }
    }

    fn invalid(t: &TagDef) -> String {
        match t.validate() {
            Err(Error::Invalid(reason)) => reason,
            other => panic!("expected Invalid, got {other:?} for {t:?}"),
        }
    }

    #[test]
    fn codes() {
        for ok in ["a", "dim_city", "beh_buy_30d", &"x".repeat(MAX_CODE_LEN)] {
            assert!(validate_code(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Dim",
            "1abc",
            "_a",
            "a-b",
            "a:b",
            "a b",
            "é",
            &"x".repeat(MAX_CODE_LEN + 1),
        ] {
            assert!(
                matches!(validate_code(bad), Err(Error::Invalid(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn ttl_only_and_always_on_short_term() {
        let mut t = tag("rt_cat", DataType::String, ValueType::ShortTerm);
        assert!(t.validate().is_ok());
        t.ttl_secs = None;
        assert!(invalid(&t).contains("needs ttl_secs"));
        t.ttl_secs = Some(0);
        assert!(invalid(&t).contains("needs ttl_secs"));
        t.ttl_secs = Some(MAX_TTL_SECS + 1);
        assert!(invalid(&t).contains("statistic tag"));
        let mut d = tag("dim_city", DataType::String, ValueType::Dimension);
        assert!(d.validate().is_ok());
        d.ttl_secs = Some(60);
        assert!(invalid(&d).contains("only short_term tags have a ttl_secs"));
    }

    #[test]
    fn text_fields() {
        let mut t = tag("dim_city", DataType::String, ValueType::Dimension);
        t.name = "城市".into();
        assert!(t.validate().is_ok());
        t.name = String::new();
        assert_eq!(invalid(&t), "name is empty");
        t.name = "a\nb".into();
        assert!(invalid(&t).contains("control character"));
        t.name = "n".into();
        t.owner = "o".repeat(MAX_TEXT_LEN + 1);
        assert!(invalid(&t).starts_with("owner is 256 characters long"));
    }

    #[test]
    fn spellings_round_trip() {
        for d in DataType::ALL {
            assert_eq!(d.as_str().parse::<DataType>().unwrap(), *d);
            assert_eq!(serde_json::to_value(d).unwrap(), d.as_str());
        }
        for v in ValueType::ALL {
            assert_eq!(v.as_str().parse::<ValueType>().unwrap(), *v);
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str());
        }
        for s in TagStatus::ALL {
            assert_eq!(s.as_str().parse::<TagStatus>().unwrap(), *s);
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        let e = "DOUBLE".parse::<DataType>().unwrap_err().to_string();
        assert_eq!(
            e,
            "data_type 'DOUBLE' is not one of BOOLEAN, INT, FLOAT, STRING, MULTI_VALUE"
        );
        assert!("Online".parse::<TagStatus>().is_err());
    }

    #[test]
    fn a_new_meaning_is_a_new_code() {
        let old = tag("beh_buy_30d", DataType::Int, ValueType::Statistic);
        let mut new = old.clone();
        new.name = "renamed".into();
        new.status = TagStatus::Offline;
        assert!(old.check_change(&new).is_ok(), "other fields may change");
        new.data_type = DataType::Float;
        let e = old.check_change(&new).unwrap_err().to_string();
        assert!(e.contains("a new meaning is a new code"), "{e}");
        assert!(e.contains("data_type INT -> FLOAT"), "{e}");
        let mut offline = old.clone();
        offline.status = TagStatus::Offline;
        let mut v = old.clone();
        v.value_type = ValueType::Dimension;
        assert!(matches!(
            offline.check_change(&v),
            Err(Error::Refused { .. })
        ));
        let mut gray = old.clone();
        gray.status = TagStatus::Gray;
        assert!(gray.check_change(&new).is_ok(), "a gray tag may change");
    }
}
