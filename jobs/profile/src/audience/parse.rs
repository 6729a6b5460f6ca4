//! The audience query language, parsed by recursive descent into an [`Expr`] whose every
//! position is the byte offset in the query text, for error messages.
//!
//! ```text
//! expr      := or
//! or        := and ("OR" and)*
//! and       := unary ("AND" unary)*
//! unary     := "NOT" unary | "(" expr ")" | predicate
//! predicate := CODE ("=" | "!=" | "<" | "<=" | ">" | ">=") literal
//!            | CODE "IN" "(" literal ("," literal)* ")"
//!            | CODE "CONTAINS" literal
//! literal   := 'text' | "text" | a bare word of A-Z a-z 0-9 _ . : + -
//! ```
//!
//! Keywords are case-insensitive; `NOT` binds tighter than `AND`, which binds tighter than
//! `OR`. Nesting is bounded ([`MAX_DEPTH`]), so no query overflows the stack.

use super::QueryError;

/// Deepest nesting of parentheses and `NOT`s.
pub const MAX_DEPTH: usize = 64;

/// A comparison of a predicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `=`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `IN (…)`
    In,
    /// `CONTAINS`
    Contains,
}

impl Op {
    /// The operator as written in a query.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "=",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::In => "IN",
            Op::Contains => "CONTAINS",
        }
    }
}

/// A literal of a predicate: its text (unquoted) and where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Literal {
    /// The text, quotes removed.
    pub text: String,
    /// Whether it was quoted (a quoted `true` or `3` is text, never a boolean or number).
    pub quoted: bool,
    /// Byte offset in the query.
    pub pos: usize,
}

/// A parsed query, not yet checked against the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// Every operand holds.
    And(Vec<Expr>),
    /// Some operand holds.
    Or(Vec<Expr>),
    /// The operand does not hold.
    Not(Box<Expr>),
    /// `code op literals`.
    Pred {
        /// The tag code.
        code: String,
        /// Byte offset of the code.
        pos: usize,
        /// The comparison.
        op: Op,
        /// One literal, or the list of `IN`.
        values: Vec<Literal>,
    },
}

impl Expr {
    /// The number of predicates.
    pub fn terms(&self) -> usize {
        match self {
            Expr::And(v) | Expr::Or(v) => v.iter().map(Expr::terms).sum(),
            Expr::Not(e) => e.terms(),
            Expr::Pred { .. } => 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(String),
    Quoted(String),
    Op(Op),
    Open,
    Close,
    Comma,
}

/// Parses a query.
///
/// # Errors
/// [`QueryError`] naming the byte offset of what is wrong and what was expected.
pub fn parse(query: &str) -> Result<Expr, QueryError> {
    let toks = lex(query)?;
    let mut p = Parser {
        toks,
        at: 0,
        end: query.len(),
        depth: 0,
    };
    let expr = p.or()?;
    if let Some((_, pos)) = p.toks.get(p.at) {
        return Err(QueryError::at(
            *pos,
            "expected AND, OR or the end of the query",
        ));
    }
    Ok(expr)
}

fn lex(q: &str) -> Result<Vec<(Tok, usize)>, QueryError> {
    let bytes = q.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        let tok = match c {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            b'(' => Tok::Open,
            b')' => Tok::Close,
            b',' => Tok::Comma,
            b'=' => Tok::Op(Op::Eq),
            b'!' if bytes.get(i + 1) == Some(&b'=') => {
                i += 1;
                Tok::Op(Op::Ne)
            }
            b'<' | b'>' => {
                let eq = bytes.get(i + 1) == Some(&b'=');
                if eq {
                    i += 1;
                }
                Tok::Op(match (c, eq) {
                    (b'<', false) => Op::Lt,
                    (b'<', true) => Op::Le,
                    (_, false) => Op::Gt,
                    _ => Op::Ge,
                })
            }
            b'\'' | b'"' => {
                let close = q[i + 1..]
                    .find(c as char)
                    .ok_or_else(|| QueryError::at(i, "unterminated quoted text"))?;
                let text = q[i + 1..i + 1 + close].to_string();
                i += close + 2;
                out.push((Tok::Quoted(text), start));
                continue;
            }
            c if is_word(c) => {
                while i < bytes.len() && is_word(bytes[i]) {
                    i += 1;
                }
                out.push((Tok::Word(q[start..i].to_string()), start));
                continue;
            }
            _ => {
                let ch = q[i..].chars().next().unwrap_or('?');
                return Err(QueryError::at(i, format!("unexpected {ch:?}")));
            }
        };
        i += 1;
        out.push((tok, start));
    }
    Ok(out)
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b':' | b'+' | b'-')
}

fn keyword(tok: &Tok, kw: &str) -> bool {
    matches!(tok, Tok::Word(w) if w.eq_ignore_ascii_case(kw))
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    at: usize,
    end: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at).map(|(t, _)| t)
    }

    fn pos(&self) -> usize {
        self.toks.get(self.at).map_or(self.end, |(_, p)| *p)
    }

    fn eat_keyword(&mut self, kw: &str) -> bool {
        let hit = self.peek().is_some_and(|t| keyword(t, kw));
        if hit {
            self.at += 1;
        }
        hit
    }

    fn or(&mut self) -> Result<Expr, QueryError> {
        let mut items = vec![self.and()?];
        while self.eat_keyword("OR") {
            items.push(self.and()?);
        }
        Ok(if items.len() == 1 {
            items.remove(0)
        } else {
            Expr::Or(items)
        })
    }

    fn and(&mut self) -> Result<Expr, QueryError> {
        let mut items = vec![self.unary()?];
        while self.eat_keyword("AND") {
            items.push(self.unary()?);
        }
        Ok(if items.len() == 1 {
            items.remove(0)
        } else {
            Expr::And(items)
        })
    }

    fn unary(&mut self) -> Result<Expr, QueryError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(QueryError::at(
                self.pos(),
                format!("nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        let expr = if self.eat_keyword("NOT") {
            Expr::Not(Box::new(self.unary()?))
        } else if self.peek() == Some(&Tok::Open) {
            self.at += 1;
            let inner = self.or()?;
            if self.peek() != Some(&Tok::Close) {
                return Err(QueryError::at(self.pos(), "expected ')'"));
            }
            self.at += 1;
            inner
        } else {
            self.predicate()?
        };
        self.depth -= 1;
        Ok(expr)
    }

    fn predicate(&mut self) -> Result<Expr, QueryError> {
        let pos = self.pos();
        let code = match self.peek() {
            Some(Tok::Word(w)) if !is_keyword(w) => w.clone(),
            _ => return Err(QueryError::at(pos, "expected a tag code, NOT or '('")),
        };
        self.at += 1;
        let op_pos = self.pos();
        let op = match self.peek() {
            Some(Tok::Op(op)) => *op,
            Some(t) if keyword(t, "IN") => Op::In,
            Some(t) if keyword(t, "CONTAINS") => Op::Contains,
            _ => {
                return Err(QueryError::at(
                    op_pos,
                    format!("expected an operator after '{code}': = != < <= > >= IN CONTAINS"),
                ))
            }
        };
        self.at += 1;
        let values = if op == Op::In {
            if self.peek() != Some(&Tok::Open) {
                return Err(QueryError::at(self.pos(), "expected '(' after IN"));
            }
            self.at += 1;
            let mut values = vec![self.literal()?];
            loop {
                match self.peek() {
                    Some(Tok::Comma) => {
                        self.at += 1;
                        values.push(self.literal()?);
                    }
                    Some(Tok::Close) => {
                        self.at += 1;
                        break;
                    }
                    _ => return Err(QueryError::at(self.pos(), "expected ',' or ')' in IN (…)")),
                }
            }
            values
        } else {
            vec![self.literal()?]
        };
        Ok(Expr::Pred {
            code,
            pos,
            op,
            values,
        })
    }

    fn literal(&mut self) -> Result<Literal, QueryError> {
        let pos = self.pos();
        let lit = match self.peek() {
            Some(Tok::Word(w)) if !is_keyword(w) => Literal {
                text: w.clone(),
                quoted: false,
                pos,
            },
            Some(Tok::Quoted(q)) => Literal {
                text: q.clone(),
                quoted: true,
                pos,
            },
            _ => {
                return Err(QueryError::at(
                    pos,
                    "expected a value (quote text that is a keyword)",
                ))
            }
        };
        self.at += 1;
        Ok(lit)
    }
}

fn is_keyword(w: &str) -> bool {
    ["AND", "OR", "NOT", "IN", "CONTAINS"]
        .iter()
        .any(|k| w.eq_ignore_ascii_case(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pred(code: &str, op: Op, values: &[&str]) -> String {
        format!("{code} {} {values:?}", op.as_str())
    }

    /// The tree as text, positions left out.
    fn show(e: &Expr) -> String {
        match e {
            Expr::And(v) => format!("(and {})", v.iter().map(show).collect::<Vec<_>>().join(" ")),
            Expr::Or(v) => format!("(or {})", v.iter().map(show).collect::<Vec<_>>().join(" ")),
            Expr::Not(e) => format!("(not {})", show(e)),
            Expr::Pred {
                code, op, values, ..
            } => {
                let v: Vec<&str> = values.iter().map(|l| l.text.as_str()).collect();
                pred(code, *op, &v)
            }
        }
    }

    #[test]
    fn parses_the_issues_example_with_precedence() {
        let e = parse("dim_city = hz AND beh_buy_30d >= 3 AND NOT vip = true").unwrap();
        assert_eq!(
            show(&e),
            r#"(and dim_city = ["hz"] beh_buy_30d >= ["3"] (not vip = ["true"]))"#
        );
        assert_eq!(e.terms(), 3);
        let e = parse("a=1 or b != 'x y' and not (c in (1, 2,'3') OR d contains z)").unwrap();
        assert_eq!(
            show(&e),
            r#"(or a = ["1"] (and b != ["x y"] (not (or c IN ["1", "2", "3"] d CONTAINS ["z"]))))"#
        );
        assert_eq!(show(&parse("x<=-1.5e3").unwrap()), r#"x <= ["-1.5e3"]"#);
    }

    #[test]
    fn errors_name_the_position() {
        for (q, pos, text) in [
            ("dim_city = ", 11, "expected a value"),
            ("dim_city hz", 9, "expected an operator"),
            ("(a = 1", 6, "expected ')'"),
            ("a = 1 b = 2", 6, "expected AND, OR"),
            ("a = 'x", 4, "unterminated"),
            ("a = 1 AND", 9, "expected a tag code"),
            ("a IN 1", 5, "expected '('"),
            ("a IN (1 2)", 8, "expected ','"),
            ("a = 1 & b = 2", 6, "unexpected '&'"),
            ("AND = 1", 0, "expected a tag code"),
        ] {
            let e = parse(q).unwrap_err();
            assert_eq!(e.pos, Some(pos), "{q}: {e}");
            assert!(e.message.contains(text), "{q}: {e}");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let q = format!("{}a = 1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(parse(&q).unwrap_err().message.contains("nested deeper"));
        let q = format!("{}a = 1", "NOT ".repeat(10_000));
        assert!(parse(&q).is_err());
    }
}
