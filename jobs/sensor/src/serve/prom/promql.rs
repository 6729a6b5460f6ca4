//! The PromQL this API answers: vector selectors, and constant arithmetic.

use regex::Regex;

use super::{bad_data, PromError};

/// A label matcher operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Eq,
    Ne,
    Re,
    Nre,
}

/// One label matcher, its regex compiled (anchored, as Prometheus does).
#[derive(Debug, Clone)]
pub(crate) struct Matcher {
    pub(crate) label: String,
    pub(crate) op: Op,
    pub(crate) value: String,
    regex: Option<Regex>,
}

impl Matcher {
    fn new(label: String, op: Op, value: String) -> Result<Self, String> {
        let regex = match op {
            Op::Re | Op::Nre => Some(
                Regex::new(&format!("^(?s:{value})$"))
                    .map_err(|e| format!("invalid regular expression in {label} matcher: {e}"))?,
            ),
            Op::Eq | Op::Ne => None,
        };
        Ok(Matcher {
            label,
            op,
            value,
            regex,
        })
    }

    pub(super) fn matches(&self, v: &str) -> bool {
        match (self.op, &self.regex) {
            (Op::Eq, _) => v == self.value,
            (Op::Ne, _) => v != self.value,
            (Op::Re, Some(re)) => re.is_match(v),
            (Op::Nre, Some(re)) => !re.is_match(v),
            (Op::Re | Op::Nre, None) => false,
        }
    }
}

/// A vector selector: `metric{label op "value", …}`.
#[derive(Debug, Clone)]
pub(crate) struct Selector {
    pub(crate) metric: Option<String>,
    pub(crate) matchers: Vec<Matcher>,
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, token: &str) -> bool {
        if self.s[self.i..].starts_with(token.as_bytes()) {
            self.i += token.len();
            true
        } else {
            false
        }
    }

    /// `[a-zA-Z_][a-zA-Z0-9_]*`, plus `:` in metric names.
    fn ident(&mut self, colon: bool) -> Option<String> {
        let ok_first = |b: u8| b.is_ascii_alphabetic() || b == b'_' || (colon && b == b':');
        let ok = |b: u8| ok_first(b) || b.is_ascii_digit();
        if !self.peek().is_some_and(ok_first) {
            return None;
        }
        let start = self.i;
        while self.peek().is_some_and(ok) {
            self.i += 1;
        }
        Some(String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }

    /// A quoted string: `"…"` or `'…'` with Go escapes, or a raw `` `…` ``.
    fn string(&mut self) -> Result<String, String> {
        let quote = self.peek().filter(|q| matches!(q, b'"' | b'\'' | b'`'));
        let Some(quote) = quote else {
            return Err(self.unexpected("a quoted label value"));
        };
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return Err("unterminated string".to_string());
            };
            self.i += 1;
            match b {
                b if b == quote => break,
                b'\\' if quote != b'`' => {
                    let Some(e) = self.peek() else {
                        return Err("unterminated string".to_string());
                    };
                    self.i += 1;
                    match e {
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'\\' | b'"' | b'\'' => out.push(e),
                        // Regexes keep their escapes: `\.` stays `\.`.
                        other => out.extend([b'\\', other]),
                    }
                }
                b => out.push(b),
            }
        }
        String::from_utf8(out).map_err(|_| "label value is not UTF-8".to_string())
    }

    fn unexpected(&self, wanted: &str) -> String {
        match self.peek() {
            Some(b) => format!(
                "expected {wanted} at offset {}, found {:?}",
                self.i, b as char
            ),
            None => format!("expected {wanted}, found the end of the query"),
        }
    }

    /// Names what the text left after a selector is, for the error.
    fn unsupported_tail(&self) -> String {
        let what = match self.peek() {
            Some(b'(') => "functions and aggregations",
            Some(b'[') => "range vectors",
            Some(b'+' | b'-' | b'*' | b'/' | b'%' | b'^' | b'<' | b'>' | b'=' | b'!') => {
                "operators"
            }
            Some(_) if self.s[self.i..].starts_with(b"offset") => "offset modifiers",
            Some(b'@') => "@ modifiers",
            _ => "anything but a selector",
        };
        format!("{what} (at offset {})", self.i)
    }
}

/// Parses a vector selector, or says what in `q` is not one.
pub(crate) fn parse_selector(q: &str) -> Result<Selector, String> {
    let mut p = Parser {
        s: q.as_bytes(),
        i: 0,
    };
    p.ws();
    let metric = p.ident(true);
    p.ws();
    let mut matchers = Vec::new();
    if p.eat("{") {
        loop {
            p.ws();
            if p.eat("}") {
                break;
            }
            let label = p.ident(false).ok_or_else(|| p.unexpected("a label name"))?;
            p.ws();
            let op = if p.eat("=~") {
                Op::Re
            } else if p.eat("!~") {
                Op::Nre
            } else if p.eat("!=") {
                Op::Ne
            } else if p.eat("=") {
                Op::Eq
            } else {
                return Err(p.unexpected("=, !=, =~ or !~"));
            };
            p.ws();
            let value = p.string()?;
            matchers.push(Matcher::new(label, op, value)?);
            p.ws();
            if p.eat(",") {
                continue;
            }
            if p.eat("}") {
                break;
            }
            return Err(p.unexpected(", or }"));
        }
    } else if metric.is_none() {
        return Err(p.unsupported_tail());
    }
    p.ws();
    if p.peek().is_some() {
        return Err(p.unsupported_tail());
    }
    if metric.is_none() && matchers.iter().all(|m| m.matches("")) {
        return Err(
            "a selector needs a metric name or at least one matcher that does not match the empty string"
                .to_string(),
        );
    }
    Ok(Selector { metric, matchers })
}

/// Constant arithmetic (`1+1`, `2 * 3 - 1`), left to right with `*` `/` before `+` `-`.
fn parse_scalar(q: &str) -> Option<f64> {
    let mut terms: Vec<f64> = Vec::new();
    let mut ops: Vec<u8> = Vec::new();
    let mut product: Option<f64> = None;
    let mut pending: Option<u8> = None;
    let mut rest = q.trim();
    loop {
        let len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..len].parse().ok()?;
        rest = rest[len..].trim_start();
        product = Some(match (product, pending) {
            (Some(p), Some(b'*')) => p * n,
            (Some(p), Some(b'/')) => p / n,
            _ => n,
        });
        let Some(op) = rest.bytes().next() else {
            terms.push(product?);
            break;
        };
        // Only an ASCII operator may follow: slicing past any other first byte could split a
        // multi-byte character (found by the promql fuzz target: `1\u{2c1}1`).
        if !matches!(op, b'*' | b'/' | b'+' | b'-') {
            return None;
        }
        rest = rest[1..].trim_start();
        match op {
            b'*' | b'/' => pending = Some(op),
            b'+' | b'-' => {
                terms.push(product.take()?);
                ops.push(op);
                pending = None;
            }
            _ => return None,
        }
    }
    let mut total = terms[0];
    for (op, t) in ops.iter().zip(&terms[1..]) {
        total = if *op == b'+' { total + t } else { total - t };
    }
    Some(total)
}

/// What a `query` parameter asks for.
pub(crate) enum Expr {
    Scalar(f64),
    Selector(Selector),
}

pub(crate) fn parse_query(q: &str) -> Result<Expr, PromError> {
    if let Some(v) = parse_scalar(q) {
        return Ok(Expr::Scalar(v));
    }
    parse_selector(q).map(Expr::Selector).map_err(|detail| {
        bad_data(format!(
            "unsupported PromQL: {detail} in {q:?}; hourglass answers selectors such as \
             temp{{device=\"dev00786\"}}, temp{{room=\"room031\"}} or temp{{device=~\"dev0078.*\"}}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(q: &str) -> Selector {
        parse_selector(q).unwrap_or_else(|e| panic!("{q}: {e}"))
    }

    #[test]
    fn parses_the_selectors_grafana_sends() {
        let s = sel(r#"temp{device="dev00786"}"#);
        assert_eq!(s.metric.as_deref(), Some("temp"));
        assert_eq!(s.matchers.len(), 1);
        assert_eq!(
            (s.matchers[0].label.as_str(), s.matchers[0].op),
            ("device", Op::Eq)
        );
        let s = sel(r#" temp { room = 'room031' , device !~ "dev0078\\..*", } "#);
        assert_eq!(s.matchers[0].value, "room031");
        assert_eq!(s.matchers[1].op, Op::Nre);
        assert!(s.matchers[1].matches("dev00786"));
        assert!(!s.matchers[1].matches("dev0078.x"));
        let s = sel(r#"{device=~"dev0078.*"}"#);
        assert!(s.metric.is_none());
        assert!(s.matchers[0].matches("dev00786"));
        assert!(!s.matchers[0].matches("xdev00786"), "regexes are anchored");
        let s = sel("temp{device=~`(dev1|dev2)`}");
        assert!(s.matchers[0].matches("dev2"));
        assert!(sel("temp").matchers.is_empty());
    }

    #[test]
    fn names_what_is_unsupported() {
        for (q, what) in [
            ("rate(temp[5m])", "functions"),
            ("sum by (device) (temp)", "anything but a selector"),
            ("temp[5m]", "range vectors"),
            ("temp > 20", "operators"),
            ("temp offset 5m", "offset"),
            (r#"{device=~".*"}"#, "empty string"),
            (r#"temp{device="x""#, "expected , or }"),
            (r#"temp{device=~"("}"#, "invalid regular expression"),
            ("", "anything but a selector"),
        ] {
            let err = parse_selector(q).unwrap_err();
            assert!(err.contains(what), "{q}: {err}");
        }
        let e = parse_query("avg(temp)").err().expect("unsupported");
        assert_eq!(e.error_type, "bad_data");
        assert!(
            e.message.starts_with("unsupported PromQL: functions"),
            "{}",
            e.message
        );
    }

    #[test]
    fn constants_for_grafanas_health_check() {
        assert_eq!(parse_scalar("1+1"), Some(2.0));
        assert_eq!(parse_scalar(" 2 * 3 - 1 / 2 "), Some(5.5));
        assert_eq!(parse_scalar("temp"), None);
        assert_eq!(parse_scalar("1 +"), None);
        // A number followed by a multi-byte character is no scalar, not a panic.
        assert_eq!(parse_scalar("1\u{2c1}1"), None);
    }
}
