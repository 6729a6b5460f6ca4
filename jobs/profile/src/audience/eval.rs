//! A checked query evaluated as set algebra on compressed bitmaps of users, each term a few
//! range scans of `user_tag_index`.
//!
//! User ids are text; a bitmap holds `u64`s ([`roaring::RoaringTreemap`]). [`UserIds`] maps
//! them: a canonical decimal id (no leading zero) below 2^63 is its own number, which is what
//! phone numbers and sequential ids are, so the common case needs no dictionary, costs no
//! memory per user and the numbers' dense high bits compress well; any other id gets a number
//! from 2^63 up in a dictionary that lives for one query. Both are exact: two ids share a
//! number only if they are the same text.

use roaring::RoaringTreemap;
use sinks::table::{ScanSpec, TableReader};

use super::check::{Plan, Term};
use super::index::{index_row_user, INDEX_TABLE};
use super::{Limits, QueryError};
use crate::key::parse_profile_row;
use crate::merge::FastMap;
use crate::tables::PROFILE_TABLE;
use crate::Result;

/// First number given to an id that is not its own number.
const DICTIONARY_BASE: u64 = 1 << 63;

/// The numbering of one query's user ids.
#[derive(Debug, Default)]
pub struct UserIds {
    names: Vec<String>,
    numbers: FastMap<String, u64>,
}

impl UserIds {
    /// The number of `user`, given one if it is new.
    pub fn number(&mut self, user: &str) -> u64 {
        if let Some(n) = own_number(user) {
            return n;
        }
        if let Some(n) = self.numbers.get(user) {
            return *n;
        }
        let n = DICTIONARY_BASE + self.names.len() as u64;
        self.names.push(user.to_string());
        self.numbers.insert(user.to_string(), n);
        n
    }

    /// The id numbered `n` (`None`: no id has it).
    pub fn name(&self, n: u64) -> Option<String> {
        if n < DICTIONARY_BASE {
            Some(n.to_string())
        } else {
            self.names
                .get(usize::try_from(n - DICTIONARY_BASE).ok()?)
                .cloned()
        }
    }
}

/// The number a canonical decimal id below 2^63 is.
fn own_number(user: &str) -> Option<u64> {
    let canonical = user.bytes().all(|b| b.is_ascii_digit())
        && !user.is_empty()
        && (user == "0" || !user.starts_with('0'));
    user.parse::<u64>()
        .ok()
        .filter(|n| canonical && *n < DICTIONARY_BASE)
}

/// What evaluation read, for the answer and `/metrics`-style reporting.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// Index rows read.
    pub index_rows: u64,
    /// Profile rows read for the universe (0 unless a `NOT` stood alone).
    pub universe_rows: u64,
}

/// Evaluates `plan`.
pub(super) struct Eval<'a> {
    pub(super) reader: &'a dyn TableReader,
    pub(super) limits: Limits,
    pub(super) ids: UserIds,
    pub(super) work: Work,
    universe: Option<RoaringTreemap>,
}

impl<'a> Eval<'a> {
    pub(super) fn new(reader: &'a dyn TableReader, limits: Limits) -> Self {
        Eval {
            reader,
            limits,
            ids: UserIds::default(),
            work: Work::default(),
            universe: None,
        }
    }

    /// The users `plan` selects.
    pub(super) fn eval(&mut self, plan: &Plan) -> Result<RoaringTreemap> {
        match plan {
            Plan::Term(t) => self.term(t),
            Plan::Or(items) => {
                let mut out = RoaringTreemap::new();
                for p in items {
                    out |= self.eval(p)?;
                }
                Ok(out)
            }
            // `a AND NOT b` is `a - b`: the universe is read only for a NOT with no positive
            // operand beside it.
            Plan::And(items) => {
                let (negated, positive): (Vec<&Plan>, Vec<&Plan>) =
                    items.iter().partition(|p| matches!(p, Plan::Not(_)));
                let mut out = match positive.split_first() {
                    Some((first, rest)) => {
                        let mut out = self.eval(first)?;
                        for p in rest {
                            if out.is_empty() {
                                return Ok(out);
                            }
                            out &= self.eval(p)?;
                        }
                        out
                    }
                    None => self.universe()?.clone(),
                };
                for p in negated {
                    if let Plan::Not(inner) = p {
                        if out.is_empty() {
                            break;
                        }
                        out -= self.eval(inner)?;
                    }
                }
                Ok(out)
            }
            Plan::Not(inner) => {
                let matched = self.eval(inner)?;
                Ok(self.universe()?.clone() - matched)
            }
        }
    }

    /// One term: the union of its ranges' users, less those of its `minus` ranges.
    fn term(&mut self, t: &Term) -> Result<RoaringTreemap> {
        let mut out = self.users_of(t, &t.ranges)?;
        if !t.minus.is_empty() {
            out -= self.users_of(t, &t.minus)?;
        }
        Ok(out)
    }

    fn users_of(&mut self, t: &Term, ranges: &[(Vec<u8>, Vec<u8>)]) -> Result<RoaringTreemap> {
        let max = self.limits.max_term_users;
        // Index rows come in the order of their text, not of the users' numbers: inserting them
        // one by one into the bitmap shifts its containers at every step (a quarter of the
        // query's time at 1M users). Sorted first, each lands at the bitmap's end.
        let mut numbers: Vec<u64> = Vec::new();
        let mut read = 0usize;
        for (start, stop) in ranges {
            let spec = ScanSpec {
                start: start.clone(),
                stop: stop.clone(),
                // One more than allowed: reading it says the limit is passed.
                limit: Some(max.saturating_sub(read).saturating_add(1)),
                ..ScanSpec::default()
            };
            let ids = &mut self.ids;
            let rows = self.reader.scan_keys(INDEX_TABLE, &spec, &mut |key| {
                if let Some(user) = index_row_user(key) {
                    numbers.push(ids.number(user));
                }
            })?;
            read += rows;
            self.work.index_rows += rows as u64;
            if read > max {
                return Err(QueryError::at(
                    t.pos,
                    format!(
                        "'{}' matches more than {max} index entries (the per-term limit): \
                         narrow it, or raise [audience] max_term_users",
                        t.code
                    ),
                )
                .into());
            }
        }
        numbers.sort_unstable();
        Ok(numbers.into_iter().collect())
    }

    /// Every user with a row in `user_profile_tag`: one scan of the table, read once per
    /// query and only for a `NOT` that stands alone (or beside other `NOT`s).
    fn universe(&mut self) -> Result<&RoaringTreemap> {
        if self.universe.is_none() {
            let max = self.limits.max_universe_users;
            let spec = ScanSpec {
                limit: Some(max.saturating_add(1)),
                ..ScanSpec::default()
            };
            let rows = self.reader.scan(PROFILE_TABLE, &spec)?;
            self.work.universe_rows += rows.len() as u64;
            if rows.len() > max {
                return Err(QueryError::whole(format!(
                    "NOT without a positive condition beside it needs every user, and \
                     {PROFILE_TABLE} holds more than {max} ([audience] max_universe_users): \
                     add a condition, as `a = 1 AND NOT b = 2`"
                ))
                .into());
            }
            // Salted rows: in no order of the users' numbers (see `users_of`).
            let mut numbers: Vec<u64> = rows
                .iter()
                .filter_map(|row| parse_profile_row(&row.key))
                .map(|user| self.ids.number(user))
                .collect();
            numbers.sort_unstable();
            self.universe = Some(numbers.into_iter().collect());
        }
        Ok(self.universe.get_or_insert_with(RoaringTreemap::new))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decimal_ids_are_their_own_numbers_others_a_dictionary() {
        let mut ids = UserIds::default();
        assert_eq!(ids.number("13800138000"), 13_800_138_000);
        assert_eq!(ids.number("0"), 0);
        let a = ids.number("007");
        let b = ids.number("u-1");
        let c = ids.number("9223372036854775808");
        assert!(a >= DICTIONARY_BASE && b >= DICTIONARY_BASE && c >= DICTIONARY_BASE);
        assert_eq!(ids.number("007"), a);
        assert_eq!(ids.name(a).as_deref(), Some("007"));
        assert_eq!(ids.name(13_800_138_000).as_deref(), Some("13800138000"));
        assert_eq!(ids.name(DICTIONARY_BASE + 99), None);
    }

    proptest! {
        #[test]
        fn numbering_is_a_bijection(users in proptest::collection::vec("[0-9]{1,20}|[a-z0-9:.-]{1,8}", 1..40)) {
            let mut ids = UserIds::default();
            let numbers: Vec<u64> = users.iter().map(|u| ids.number(u)).collect();
            for (u, n) in users.iter().zip(&numbers) {
                prop_assert_eq!(ids.name(*n), Some(u.clone()));
            }
            for (i, a) in users.iter().enumerate() {
                for (j, b) in users.iter().enumerate() {
                    prop_assert_eq!(a == b, numbers[i] == numbers[j]);
                }
            }
        }
    }
}
