//! The PromQL target: the selector parser and the Prometheus time and duration parameters never
//! panic, accept only what they can answer, and say what is wrong with the rest.

use crate::serve::prom::params::{parse_duration, parse_prom_time};
use crate::serve::prom::promql::{parse_query, parse_selector, Expr, Op, Selector};

use super::{lines, run, Verdict};

/// The queries the serve tests, Grafana and the Prometheus client send.
pub(super) fn corpus() -> Vec<Vec<u8>> {
    lines(include_bytes!("../../../fuzz-corpus/promql.txt"))
}

/// A selector as PromQL text, every value double-quoted.
fn print(s: &Selector) -> String {
    let matchers: Vec<String> = s
        .matchers
        .iter()
        .map(|m| {
            let op = match m.op {
                Op::Eq => "=",
                Op::Ne => "!=",
                Op::Re => "=~",
                Op::Nre => "!~",
            };
            let value = m.value.replace('\\', "\\\\").replace('"', "\\\"");
            format!("{}{op}\"{value}\"", m.label)
        })
        .collect();
    format!(
        "{}{{{}}}",
        s.metric.as_deref().unwrap_or(""),
        matchers.join(",")
    )
}

/// What a selector means, for comparison: metric and each matcher's label, operator and value.
fn meaning(s: &Selector) -> (Option<&str>, Vec<(&str, Op, &str)>) {
    (
        s.metric.as_deref(),
        s.matchers
            .iter()
            .map(|m| (m.label.as_str(), m.op, m.value.as_str()))
            .collect(),
    )
}

fn check_query(q: &str) -> Verdict {
    match parse_query(q) {
        Ok(Expr::Scalar(_)) => Ok(()),
        Ok(Expr::Selector(s)) => {
            let printed = print(&s);
            match parse_selector(&printed) {
                Ok(again) if meaning(&again) == meaning(&s) => Ok(()),
                Ok(again) => Err(format!(
                    "selector printed as {printed:?} re-parses as {:?}, not {:?}",
                    meaning(&again),
                    meaning(&s)
                )),
                Err(e) => Err(format!(
                    "selector printed as {printed:?} does not re-parse: {e}"
                )),
            }
        }
        Err(e) if e.message.starts_with("unsupported PromQL: ") && e.message.len() > 20 => Ok(()),
        Err(e) => Err(format!(
            "rejection without a useful message: {:?}",
            e.message
        )),
    }
}

/// The same text as a `time` or `step` parameter: a finite number or a message.
fn check_params(p: &str) -> Verdict {
    match parse_duration(p) {
        Ok(d) if !d.is_finite() => return Err(format!("duration {p:?} accepted as {d}")),
        Err(e) if e.is_empty() => return Err("duration rejected without a message".into()),
        _ => {}
    }
    match parse_prom_time(p) {
        Ok(t) if !t.is_finite() => Err(format!("time {p:?} accepted as {t}")),
        Err(e) if e.is_empty() => Err("time rejected without a message".into()),
        _ => Ok(()),
    }
}

fn check(input: &[u8]) -> Verdict {
    let q = String::from_utf8_lossy(input);
    check_query(&q)?;
    check_params(&q)
}

#[test]
fn promql() {
    run("fuzz::prom::promql", &corpus(), check);
}

#[test]
fn the_printer_round_trips_escapes() {
    let s = parse_selector(r#"temp{device=~"dev\\.\"x'", room!="a\nb"}"#).expect("a selector");
    assert_eq!(
        meaning(&parse_selector(&print(&s)).expect("printed")),
        meaning(&s)
    );
    assert_eq!(check("temp{device=\"x\"}".as_bytes()), Ok(()));
    assert_eq!(check(b"rate(temp[5m])"), Ok(()));
}
