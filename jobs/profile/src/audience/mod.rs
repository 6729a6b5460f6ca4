//! Audience selection: the inverted index `user_tag_index` ([`index`]), the query language
//! ([`parse`]), its check against the registry ([`check`]) and its evaluation on roaring
//! bitmaps ([`eval`]).
//!
//! A query is parsed, checked against the tag definitions, and each predicate becomes range
//! scans of the index (`beh_buy_30d >= 3` is one scan from `beh_buy_30d_I8000000000000003_`
//! to the end of the code's INT rows); `AND`, `OR` and `NOT` are intersections, unions and
//! differences of the users' bitmaps.

pub mod build;
pub mod check;
pub mod eval;
pub mod index;
pub mod maintain;
pub mod parse;
pub mod reconcile;

use std::fmt;

use roaring::RoaringTreemap;
use serde::Deserialize;
use sinks::table::TableReader;

pub use check::{check, Plan, Term};
pub use eval::{UserIds, Work};
pub use index::{index_table, IndexValue, INDEX_TABLE};
pub use parse::{parse, Expr, Op};

use crate::tag::TagDef;
use crate::Result;

/// A query that cannot be answered as asked: where (a byte offset in the query, when one
/// place is at fault) and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryError {
    /// Byte offset in the query.
    pub pos: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl QueryError {
    /// An error at byte `pos`.
    pub fn at(pos: usize, message: impl Into<String>) -> Self {
        QueryError {
            pos: Some(pos),
            message: message.into(),
        }
    }

    /// An error of the query as a whole.
    pub fn whole(message: impl Into<String>) -> Self {
        QueryError {
            pos: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pos {
            Some(pos) => write!(f, "audience query, at position {pos}: {}", self.message),
            None => write!(f, "audience query: {}", self.message),
        }
    }
}

impl std::error::Error for QueryError {}

/// How much work one query may do (the query keys of `[index]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most predicates in a query (default 32).
    pub max_terms: usize,
    /// Most index entries one predicate may match (default 10,000,000): a predicate that
    /// matches more is refused, not read to the end.
    pub max_term_users: usize,
    /// Most users read for a `NOT` that stands alone (default 10,000,000).
    pub max_universe_users: usize,
}

/// `[index]`: whether the profile job maintains `user_tag_index`, and the audience queries'
/// limits.
///
/// Off by default, for now: on the embedded store a replay into an empty store, which builds
/// the index at its end ([`build`]), costs about 1.27× the CPU of one without it (300k events
/// of 1M users: 5.5 CPU s against 4.35, means of four rounds; 1.41× at 1M events; the issue
/// asks 1.2×), and the job's upkeep at each write (`profile run`, a replay into a store
/// holding profiles) about 1.5×, though a retraction reads nothing (the delete of its entry's
/// one version), each worker reads a user's row at most once, remembering its values
/// (`cache_mib`), and the entries reach the store as one batch of keys. Turn it on where
/// audience queries are needed, from the job's first run: one left off while the job writes
/// goes stale (`profile reconcile --repair` rebuilds it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexConfig {
    /// Whether the job writes and retracts index entries (default false).
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// [`Limits::max_terms`].
    #[serde(default = "default_max_terms")]
    pub max_terms: usize,
    /// [`Limits::max_term_users`].
    #[serde(default = "default_max_term_users")]
    pub max_term_users: usize,
    /// [`Limits::max_universe_users`].
    #[serde(default = "default_max_term_users")]
    pub max_universe_users: usize,
    /// MiB of users' values each worker of the job remembers, so that it reads a user's row
    /// once rather than at each write (default 32, at least 1).
    #[serde(default = "default_cache_mib")]
    pub cache_mib: u64,
}

const fn default_cache_mib() -> u64 {
    32
}

const fn default_enabled() -> bool {
    false
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            enabled: default_enabled(),
            max_terms: default_max_terms(),
            max_term_users: default_max_term_users(),
            max_universe_users: default_max_term_users(),
            cache_mib: default_cache_mib(),
        }
    }
}

impl IndexConfig {
    /// Bytes of users' values each worker of the job remembers.
    pub fn cache_bytes(&self) -> u64 {
        self.cache_mib.max(1).saturating_mul(1 << 20)
    }

    /// The query limits.
    pub fn limits(&self) -> Limits {
        Limits {
            max_terms: self.max_terms,
            max_term_users: self.max_term_users,
            max_universe_users: self.max_universe_users,
        }
    }
}

const fn default_max_terms() -> usize {
    32
}

const fn default_max_term_users() -> usize {
    10_000_000
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_terms: default_max_terms(),
            max_term_users: default_max_term_users(),
            max_universe_users: default_max_term_users(),
        }
    }
}

/// The users a query selected.
#[derive(Debug)]
pub struct Audience {
    /// Their numbers.
    pub users: RoaringTreemap,
    /// The numbering, to read ids back.
    pub ids: UserIds,
    /// What the evaluation read.
    pub work: Work,
}

impl Audience {
    /// How many users.
    pub fn len(&self) -> u64 {
        self.users.len()
    }

    /// Whether none.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// The user ids, at most `limit`: decimal ids in numeric order, then the others in key
    /// order of their first index entry.
    pub fn user_ids(&self, limit: Option<usize>) -> impl Iterator<Item = String> + '_ {
        self.users
            .iter()
            .take(limit.unwrap_or(usize::MAX))
            .filter_map(|n| self.ids.name(n))
    }
}

/// Parses and checks `query` against the definitions `defs`, within `limits`.
///
/// # Errors
/// [`crate::Error::Query`]: a bad expression, an unknown or short-term tag, a type mismatch,
/// more than `limits.max_terms` predicates.
pub fn plan(query: &str, defs: &[TagDef], limits: Limits) -> Result<Plan> {
    let expr = parse(query)?;
    let terms = expr.terms();
    if terms > limits.max_terms {
        return Err(QueryError::whole(format!(
            "{terms} predicates, more than the limit of {} ([audience] max_terms)",
            limits.max_terms
        ))
        .into());
    }
    let def_of = |code: &str| defs.iter().find(|d| d.tag_code == code).cloned();
    Ok(check(&expr, &def_of)?)
}

/// Selects the users of `query` from the index `reader` holds.
///
/// # Errors
/// As [`plan`]; [`crate::Error::Query`] when a predicate matches more than
/// `limits.max_term_users` entries; a store error.
pub fn select(
    reader: &dyn TableReader,
    query: &str,
    defs: &[TagDef],
    limits: Limits,
) -> Result<Audience> {
    let plan = plan(query, defs, limits)?;
    let mut eval = eval::Eval::new(reader, limits);
    let users = eval.eval(&plan)?;
    Ok(Audience {
        users,
        ids: eval.ids,
        work: eval.work,
    })
}

#[cfg(test)]
mod tests;
