//! Shared by `profile_audience.rs`: audience conditions as query text and as predicates over
//! a user's tags (as `hourglass profile get` prints them), for the brute-force comparison.

use std::collections::BTreeMap;
use std::rc::Rc;

use profile::{DataType, TagDef, ValueType};
use serde_json::{json, Map, Value};

/// A user's tags, `code -> value`.
pub type Tags = Map<String, Value>;

/// A condition as query text and as a predicate over a user's tags.
#[derive(Clone)]
pub struct Cond {
    pub text: String,
    pub holds: Rc<dyn Fn(&Tags) -> bool>,
}

impl Cond {
    fn pred(text: String, code: &str, f: impl Fn(&Value) -> bool + 'static) -> Self {
        let code = code.to_string();
        Cond {
            text,
            holds: Rc::new(move |tags| tags.get(&code).is_some_and(&f)),
        }
    }

    fn and(&self, other: &Cond) -> Self {
        let (a, b) = (self.holds.clone(), other.holds.clone());
        Cond {
            text: format!("({} AND {})", self.text, other.text),
            holds: Rc::new(move |t| a(t) && b(t)),
        }
    }

    fn or(&self, other: &Cond) -> Self {
        let (a, b) = (self.holds.clone(), other.holds.clone());
        Cond {
            text: format!("({} OR {})", self.text, other.text),
            holds: Rc::new(move |t| a(t) || b(t)),
        }
    }

    fn not(&self) -> Self {
        let a = self.holds.clone();
        Cond {
            text: format!("NOT {}", self.text),
            holds: Rc::new(move |t| !a(t)),
        }
    }
}

/// The code of `data_type` (dimension or statistic) most users hold, and its values.
fn busiest<'a>(
    defs: &'a [TagDef],
    users: &BTreeMap<String, Tags>,
    data_type: DataType,
) -> (&'a str, Vec<Value>) {
    defs.iter()
        .filter(|d| d.data_type == data_type && d.value_type != ValueType::ShortTerm)
        .map(|d| {
            let values: Vec<Value> = users
                .values()
                .filter_map(|t| t.get(&d.tag_code).cloned())
                .collect();
            (d.tag_code.as_str(), values)
        })
        .max_by_key(|(_, v)| v.len())
        .expect("a code of the type")
}

/// The conditions to check: each type's operators on its busiest code, and their combinations.
pub fn conditions(defs: &[TagDef], users: &BTreeMap<String, Tags>) -> Vec<Cond> {
    let mut preds = Vec::new();
    let (s, values) = busiest(defs, users, DataType::String);
    let mut texts: Vec<String> = values
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .filter(|v| !v.contains('\''))
        .collect();
    texts.sort();
    texts.dedup();
    let (v, w) = (texts[0].clone(), texts[texts.len() - 1].clone());
    let (v1, v2, w2) = (v.clone(), v.clone(), w.clone());
    preds.push(Cond::pred(format!("{s} = '{v}'"), s, move |x| {
        x == &json!(v1)
    }));
    preds.push(Cond::pred(format!("{s} != '{v}'"), s, move |x| {
        x != &json!(v2)
    }));
    let (v3, w3) = (v.clone(), w.clone());
    preds.push(Cond::pred(format!("{s} IN ('{v}', '{w2}')"), s, move |x| {
        x == &json!(v3) || x == &json!(w3)
    }));

    let (i, values) = busiest(defs, users, DataType::Int);
    let mut ints: Vec<i64> = values.iter().filter_map(Value::as_i64).collect();
    ints.sort_unstable();
    let m = ints[ints.len() / 2];
    preds.push(Cond::pred(format!("{i} >= {m}"), i, move |x| {
        x.as_i64().unwrap() >= m
    }));
    preds.push(Cond::pred(format!("{i} < {m}"), i, move |x| {
        x.as_i64().unwrap() < m
    }));
    preds.push(Cond::pred(format!("{i} = {m}"), i, move |x| {
        x.as_i64() == Some(m)
    }));

    let (f, values) = busiest(defs, users, DataType::Float);
    let mut floats: Vec<f64> = values.iter().filter_map(Value::as_f64).collect();
    floats.sort_by(f64::total_cmp);
    let fm = floats[floats.len() / 2];
    preds.push(Cond::pred(format!("{f} > {fm:?}"), f, move |x| {
        x.as_f64().unwrap() > fm
    }));
    preds.push(Cond::pred(format!("{f} <= {fm:?}"), f, move |x| {
        x.as_f64().unwrap() <= fm
    }));

    let (b, _) = busiest(defs, users, DataType::Boolean);
    preds.push(Cond::pred(format!("{b} = true"), b, |x| x == &json!(true)));
    preds.push(Cond::pred(format!("{b} != true"), b, |x| {
        x == &json!(false)
    }));

    let (mv, values) = busiest(defs, users, DataType::MultiValue);
    let mut elems: Vec<String> = values
        .iter()
        .flat_map(|v| v.as_array().cloned().unwrap_or_default())
        .filter_map(|e| e.as_str().map(str::to_string))
        .filter(|e| !e.contains('\''))
        .collect();
    elems.sort();
    elems.dedup();
    let e = elems[0].clone();
    let e1 = e.clone();
    preds.push(Cond::pred(format!("{mv} CONTAINS '{e}'"), mv, move |x| {
        x.as_array().unwrap().contains(&json!(e1))
    }));

    let mut all = preds.clone();
    for (n, p) in preds.iter().enumerate() {
        let q = &preds[(n + 3) % preds.len()];
        let r = &preds[(n + 7) % preds.len()];
        all.push(p.and(q));
        all.push(p.or(&r.not()));
        all.push(p.and(q).not());
        all.push(p.and(&q.not()).or(&r.and(p)));
    }
    all
}
