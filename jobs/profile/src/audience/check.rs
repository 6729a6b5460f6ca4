//! An audience query checked against the tag registry: every code known and indexed, every
//! operator valid for its tag's type, every literal a value of it.

use std::ops::Bound;

use super::index::{value_range, IndexValue};
use super::parse::{Expr, Literal, Op};
use super::QueryError;
use crate::tag::{DataType, TagDef, ValueType};

/// One predicate as scans of the index.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    /// The tag code.
    pub code: String,
    /// Byte offset of the predicate in the query, for errors.
    pub pos: usize,
    /// The key ranges whose users match (their union).
    pub ranges: Vec<(Vec<u8>, Vec<u8>)>,
    /// Users to take away from the union: `!=` is every user with a value of the code but
    /// this one.
    pub minus: Vec<(Vec<u8>, Vec<u8>)>,
}

/// A checked query.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Every operand holds.
    And(Vec<Plan>),
    /// Some operand holds.
    Or(Vec<Plan>),
    /// The operand does not hold.
    Not(Box<Plan>),
    /// One predicate.
    Term(Term),
}

/// Checks `expr` against the definitions `def_of` finds.
///
/// Short-term tags are refused: they live in Redis with a TTL and are not indexed (an index
/// entry would outlive its value).
///
/// # Errors
/// [`QueryError`] at the offending predicate or literal: unknown or short-term tag, operator
/// not valid for the type, literal not a value of it.
pub fn check(expr: &Expr, def_of: &dyn Fn(&str) -> Option<TagDef>) -> Result<Plan, QueryError> {
    Ok(match expr {
        Expr::And(v) => Plan::And(
            v.iter()
                .map(|e| check(e, def_of))
                .collect::<Result<_, _>>()?,
        ),
        Expr::Or(v) => Plan::Or(
            v.iter()
                .map(|e| check(e, def_of))
                .collect::<Result<_, _>>()?,
        ),
        Expr::Not(e) => Plan::Not(Box::new(check(e, def_of)?)),
        Expr::Pred {
            code,
            pos,
            op,
            values,
        } => Plan::Term(term(code, *pos, *op, values, def_of)?),
    })
}

fn term(
    code: &str,
    pos: usize,
    op: Op,
    values: &[Literal],
    def_of: &dyn Fn(&str) -> Option<TagDef>,
) -> Result<Term, QueryError> {
    let def = def_of(code).ok_or_else(|| {
        QueryError::at(
            pos,
            format!("unknown tag '{code}' (see `hourglass tags list`)"),
        )
    })?;
    if def.value_type == ValueType::ShortTerm {
        return Err(QueryError::at(
            pos,
            format!(
                "tag '{code}' is short_term: short-term tags expire in Redis and are not indexed"
            ),
        ));
    }
    let dt = def.data_type;
    let valid = match dt {
        DataType::Int | DataType::Float => op != Op::Contains,
        DataType::Boolean | DataType::String => matches!(op, Op::Eq | Op::Ne | Op::In),
        DataType::MultiValue => matches!(op, Op::Contains | Op::In),
    };
    if !valid {
        let allowed = match dt {
            DataType::Int | DataType::Float => "= != < <= > >= IN",
            DataType::Boolean | DataType::String => "= != IN",
            DataType::MultiValue => "CONTAINS, IN (any of)",
        };
        return Err(QueryError::at(
            pos,
            format!(
                "operator {} is not valid for '{code}', a {dt} tag: use {allowed}",
                op.as_str()
            ),
        ));
    }
    let values = values
        .iter()
        .map(|l| literal(code, dt, l))
        .collect::<Result<Vec<_>, _>>()?;
    let mark = IndexValue::mark_of(dt);
    let range = |lo: Bound<&IndexValue>, hi: Bound<&IndexValue>| value_range(code, mark, lo, hi);
    let eq = |v: &IndexValue| range(Bound::Included(v), Bound::Included(v));
    let v = &values[0];
    let (ranges, minus) = match op {
        Op::Eq | Op::Contains => (vec![eq(v)], vec![]),
        Op::In => (values.iter().map(eq).collect(), vec![]),
        Op::Ne => (vec![range(Bound::Unbounded, Bound::Unbounded)], vec![eq(v)]),
        Op::Lt => (vec![range(Bound::Unbounded, Bound::Excluded(v))], vec![]),
        Op::Le => (vec![range(Bound::Unbounded, Bound::Included(v))], vec![]),
        Op::Gt => (vec![range(Bound::Excluded(v), Bound::Unbounded)], vec![]),
        Op::Ge => (vec![range(Bound::Included(v), Bound::Unbounded)], vec![]),
    };
    Ok(Term {
        code: code.to_string(),
        pos,
        ranges,
        minus,
    })
}

fn literal(code: &str, dt: DataType, l: &Literal) -> Result<IndexValue, QueryError> {
    let bad = |what: &str| {
        QueryError::at(
            l.pos,
            format!("'{}' is not {what}, as tag '{code}' ({dt}) needs", l.text),
        )
    };
    Ok(match dt {
        DataType::Boolean => match (l.quoted, l.text.as_str()) {
            (false, "true") => IndexValue::Bool(true),
            (false, "false") => IndexValue::Bool(false),
            _ => return Err(bad("true or false")),
        },
        DataType::Int => IndexValue::Int(
            l.text
                .parse()
                .ok()
                .filter(|_| !l.quoted)
                .ok_or_else(|| bad("an integer"))?,
        ),
        DataType::Float => IndexValue::Float(
            l.text
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite() && !l.quoted)
                .map(|f| if f == 0.0 { 0.0 } else { f })
                .ok_or_else(|| bad("a finite number"))?,
        ),
        DataType::String => IndexValue::Str(l.text.clone()),
        DataType::MultiValue => IndexValue::Elem(l.text.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audience::parse::parse;
    use crate::tag::TagStatus;

    pub(crate) fn def(code: &str, data_type: DataType, value_type: ValueType) -> TagDef {
        TagDef {
            tag_code: code.into(),
            name: code.into(),
            data_type,
            value_type,
            status: TagStatus::Online,
            ttl_secs: (value_type == ValueType::ShortTerm).then_some(3600),
            category: String::new(),
            owner: String::new(),
            update_frequency: String::new(),
        }
    }

    fn defs(code: &str) -> Option<TagDef> {
        use DataType::*;
        use ValueType::*;
        Some(match code {
            "dim_city" => def(code, String, Dimension),
            "beh_buy_30d" => def(code, Int, Statistic),
            "beh_score" => def(code, Float, Statistic),
            "vip" => def(code, Boolean, Dimension),
            "dim_interests" => def(code, MultiValue, Dimension),
            "st_cart" => def(code, Int, ShortTerm),
            _ => return None,
        })
    }

    fn check_str(q: &str) -> Result<Plan, QueryError> {
        check(&parse(q).unwrap(), &defs)
    }

    #[test]
    fn valid_queries_check() {
        for q in [
            "dim_city = hz AND beh_buy_30d >= 3 AND NOT vip = true",
            "beh_score < 0.5 OR beh_score > 1e3 OR beh_buy_30d IN (1, -2)",
            "dim_interests CONTAINS 'ball games' AND dim_city != '3'",
            "dim_interests IN (a, b)",
        ] {
            check_str(q).unwrap_or_else(|e| panic!("{q}: {e}"));
        }
    }

    #[test]
    fn errors_name_the_predicate_or_literal() {
        for (q, pos, text) in [
            ("dim_town = hz", 0, "unknown tag 'dim_town'"),
            ("vip = true AND st_cart > 1", 15, "short_term"),
            ("beh_buy_30d >= many", 15, "not an integer"),
            ("beh_buy_30d = '3'", 14, "not an integer"),
            ("beh_score = nan", 12, "not a finite number"),
            ("vip = yes", 6, "true or false"),
            (
                "dim_city > hz",
                0,
                "operator > is not valid for 'dim_city', a STRING tag",
            ),
            ("dim_interests = a", 0, "use CONTAINS"),
            ("beh_buy_30d CONTAINS 3", 0, "not valid"),
        ] {
            let e = check_str(q).unwrap_err();
            assert_eq!(e.pos, Some(pos), "{q}: {e}");
            assert!(e.message.contains(text), "{q}: {e}");
        }
    }
}
