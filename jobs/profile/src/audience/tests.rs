//! Audience queries on the embedded store, checked against a brute-force evaluation of the
//! same queries over the users' values.

use std::collections::{BTreeMap, BTreeSet};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sinks::config::StoreConfig;
use sinks::table::{Cell, Mutation};
use sinks::OpenOptions;

use super::index::{index_row, values_of, INDEX_CELL, INDEX_FAMILY, INDEX_QUALIFIER};
use super::parse::{parse, Expr, Literal, Op};
use super::*;
use crate::event::CellValue;
use crate::key::profile_row;
use crate::tables::{DIMENSION_FAMILY, PROFILE_TABLE};
use crate::tag::{DataType, TagStatus, ValueType};

/// An online tag of the dimension family.
pub(super) fn def(code: &str, data_type: DataType) -> TagDef {
    TagDef {
        tag_code: code.into(),
        name: code.into(),
        data_type,
        value_type: ValueType::Dimension,
        status: TagStatus::Online,
        ttl_secs: None,
        category: String::new(),
        owner: String::new(),
        update_frequency: String::new(),
    }
}

/// [`def`] of another value type (a behaviour or short-term tag).
pub(super) fn typed_def(code: &str, data_type: DataType, value_type: ValueType) -> TagDef {
    TagDef {
        value_type,
        ..def(code, data_type)
    }
}

fn defs() -> Vec<TagDef> {
    vec![
        def("dim_city", DataType::String),
        def("beh_buy_30d", DataType::Int),
        def("beh_score", DataType::Float),
        def("vip", DataType::Boolean),
        def("dim_interests", DataType::MultiValue),
    ]
}

type Users = BTreeMap<String, BTreeMap<&'static str, CellValue>>;

const CITIES: [&str; 4] = ["hz", "sh", "bj", "a_b c"];
const INTERESTS: [&str; 3] = ["ball", "books", "x_y"];

/// Users with random values of some of the tags; a third have ids that are not numbers.
fn users(rng: &mut ChaCha8Rng, n: usize) -> Users {
    let mut out = Users::new();
    for i in 0..n {
        let id = match i % 3 {
            0 => format!("u-{i}"),
            1 => format!("0{i}"),
            _ => format!("{}", 13_800_000_000u64 + i as u64),
        };
        let mut tags = BTreeMap::new();
        if rng.random_bool(0.8) {
            let city = CITIES[rng.random_range(0..CITIES.len())];
            tags.insert("dim_city", CellValue::String(city.into()));
        }
        if rng.random_bool(0.8) {
            tags.insert("beh_buy_30d", CellValue::Int(rng.random_range(-3..8)));
        }
        if rng.random_bool(0.7) {
            tags.insert(
                "beh_score",
                CellValue::Float(rng.random_range(-2..3) as f64 / 2.0),
            );
        }
        if rng.random_bool(0.7) {
            tags.insert("vip", CellValue::Boolean(rng.random_bool(0.3)));
        }
        if rng.random_bool(0.6) {
            let mut set: Vec<&str> = INTERESTS
                .iter()
                .copied()
                .filter(|_| rng.random_bool(0.5))
                .collect();
            set.sort_unstable();
            tags.insert(
                "dim_interests",
                CellValue::MultiValue(serde_json::to_string(&set).unwrap()),
            );
        }
        out.insert(id, tags);
    }
    out
}

/// Writes each user's profile row and index entries.
fn write(store: &sinks::Store, users: &Users) {
    let mut w = store.writer();
    let mut batch = Vec::new();
    for (user, tags) in users {
        // A user with no tag has a profile row all the same (it has some other tag).
        batch.push(Mutation::Put {
            table: PROFILE_TABLE,
            row: profile_row(user),
            cells: vec![Cell {
                family: DIMENSION_FAMILY.into(),
                qualifier: b"dim_other".to_vec(),
                ts_ms: 1,
                value: b"x".to_vec(),
            }],
        });
        for (code, value) in tags {
            for v in values_of(value) {
                batch.push(Mutation::Put {
                    table: INDEX_TABLE,
                    row: index_row(code, &v, user),
                    cells: vec![Cell {
                        family: INDEX_FAMILY.into(),
                        qualifier: INDEX_QUALIFIER.to_vec(),
                        ts_ms: 1,
                        value: INDEX_CELL.to_vec(),
                    }],
                });
            }
        }
    }
    w.write(batch).unwrap();
    w.flush().unwrap();
}

/// Whether `value` satisfies `op values`, as the query language defines it.
fn holds(value: Option<&CellValue>, op: Op, values: &[Literal]) -> bool {
    let Some(value) = value else { return false };
    let texts: Vec<&str> = values.iter().map(|l| l.text.as_str()).collect();
    let cmp = |ord: std::cmp::Ordering| match op {
        Op::Eq | Op::In => ord.is_eq(),
        Op::Ne => ord.is_ne(),
        Op::Lt => ord.is_lt(),
        Op::Le => ord.is_le(),
        Op::Gt => ord.is_gt(),
        Op::Ge => ord.is_ge(),
        Op::Contains => unreachable!(),
    };
    let any = |f: &dyn Fn(&str) -> bool| {
        if op == Op::In {
            texts.iter().any(|t| f(t))
        } else {
            f(texts[0])
        }
    };
    match value {
        CellValue::String(s) => any(&|t| cmp(s.as_str().cmp(t))),
        CellValue::Int(i) => any(&|t| cmp(i.cmp(&t.parse().unwrap()))),
        CellValue::Float(f) => any(&|t| cmp(f.total_cmp(&t.parse().unwrap()))),
        CellValue::Boolean(b) => any(&|t| cmp(b.cmp(&t.parse().unwrap()))),
        CellValue::MultiValue(json) => {
            let set: Vec<String> = serde_json::from_str(json).unwrap();
            texts.iter().any(|t| set.iter().any(|s| s == t))
        }
    }
}

fn brute(e: &Expr, users: &Users) -> BTreeSet<String> {
    let all: BTreeSet<String> = users.keys().cloned().collect();
    match e {
        Expr::And(v) => v.iter().fold(all, |acc, e| &acc & &brute(e, users)),
        Expr::Or(v) => v
            .iter()
            .fold(BTreeSet::new(), |acc, e| &acc | &brute(e, users)),
        Expr::Not(e) => &all - &brute(e, users),
        Expr::Pred {
            code, op, values, ..
        } => users
            .iter()
            .filter(|(_, tags)| holds(tags.get(code.as_str()), *op, values))
            .map(|(u, _)| u.clone())
            .collect(),
    }
}

/// A random predicate valid for the registry.
fn predicate(rng: &mut ChaCha8Rng) -> String {
    let num_op = ["=", "!=", "<", "<=", ">", ">="][rng.random_range(0..6)];
    match rng.random_range(0..6) {
        0 => format!("dim_city = '{}'", CITIES[rng.random_range(0..4)]),
        1 => format!("dim_city != '{}'", CITIES[rng.random_range(0..4)]),
        2 => format!("beh_buy_30d {num_op} {}", rng.random_range(-4..9)),
        3 => format!(
            "beh_score {num_op} {}",
            rng.random_range(-3..4) as f64 / 2.0
        ),
        4 => format!("vip = {}", rng.random_bool(0.5)),
        _ => match rng.random_range(0..3) {
            0 => "beh_buy_30d IN (1, 3, -2)".into(),
            1 => format!(
                "dim_interests CONTAINS '{}'",
                INTERESTS[rng.random_range(0..3)]
            ),
            _ => "dim_interests IN (ball, 'x_y')".into(),
        },
    }
}

fn query(rng: &mut ChaCha8Rng, depth: u32) -> String {
    if depth == 0 || rng.random_bool(0.3) {
        return predicate(rng);
    }
    match rng.random_range(0..3) {
        0 => format!("({} AND {})", query(rng, depth - 1), query(rng, depth - 1)),
        1 => format!("({} OR {})", query(rng, depth - 1), query(rng, depth - 1)),
        _ => format!("NOT {}", query(rng, depth - 1)),
    }
}

fn store(dir: &tempfile::TempDir) -> sinks::Store {
    let cfg = StoreConfig {
        dir: dir.path().join("store"),
        ..StoreConfig::default()
    };
    sinks::open(&cfg, &crate::tables::tables(), &OpenOptions::default()).unwrap()
}

#[test]
fn random_queries_select_what_brute_force_selects() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let mut rng = ChaCha8Rng::seed_from_u64(37);
    let users = users(&mut rng, 300);
    write(&store, &users);
    let reader = store.reader();
    let defs = defs();
    for _ in 0..300 {
        let q = query(&mut rng, 3);
        let want = brute(&parse(&q).unwrap(), &users);
        let got =
            select(&reader, &q, &defs, Limits::default()).unwrap_or_else(|e| panic!("{q}: {e}"));
        let got_ids: BTreeSet<String> = got.user_ids(None).collect();
        assert_eq!(got_ids, want, "{q}");
        assert_eq!(got.len(), want.len() as u64);
    }
    // The example, and a limit on the ids.
    let q = "dim_city = hz AND beh_buy_30d >= 3 AND NOT vip = true";
    let want = brute(&parse(q).unwrap(), &users);
    assert!(!want.is_empty());
    let got = select(&reader, q, &defs, Limits::default()).unwrap();
    assert_eq!(got.user_ids(None).collect::<BTreeSet<_>>(), want);
    assert_eq!(got.work.universe_rows, 0, "A AND NOT B reads no universe");
    assert_eq!(got.user_ids(Some(2)).count(), 2.min(want.len()));
}

#[test]
fn limits_are_errors_naming_the_term() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir);
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let users = users(&mut rng, 60);
    write(&store, &users);
    let reader = store.reader();
    let limits = Limits {
        max_terms: 2,
        max_term_users: 5,
        max_universe_users: 10,
    };
    let err = |q: &str| match select(&reader, q, &defs(), limits) {
        Err(crate::Error::Query(e)) => e,
        other => panic!("{q}: {other:?}"),
    };
    let e = err("vip = true OR vip = false OR vip = true");
    assert!(
        e.message.contains("3 predicates, more than the limit of 2"),
        "{e}"
    );
    let e = err("dim_city = nowhere OR beh_buy_30d >= -100");
    assert_eq!(e.pos, Some(22), "{e}");
    assert!(
        e.message.contains("'beh_buy_30d' matches more than 5"),
        "{e}"
    );
    let e = err("NOT dim_city = nowhere");
    assert!(e.message.contains("more than 10"), "{e}");
    // Within the limits: answered.
    let ok = select(&reader, "dim_city = nowhere", &defs(), limits).unwrap();
    assert!(ok.is_empty());
}
