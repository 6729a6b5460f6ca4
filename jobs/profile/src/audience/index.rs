//! `user_tag_index`'s one row codec: index rows, their parsing, and the prefixes and ranges
//! that audience queries scan.
//!
//! A row is `<tag code>_<type mark><encoded value>_<user id>`, one cell `i:u` stamped with the
//! value's event time. The type mark is one upper-case letter (`B`, `I`, `F`, `S`, `M`), which
//! no tag code holds (`[a-z][a-z0-9_]*`): `beh_buy_I…` can never be a row of `beh_buy_30d`,
//! so a code's rows are exactly `[<code>_A, <code>_[)` and a value's rows one prefix.
//!
//! Values are encoded so that HBase's byte order is the values' order, and no encoding holds
//! `_`, so the last `_` starts the user id (which holds none, [`crate::key`]):
//! - BOOLEAN: `B0` / `B1`.
//! - INT: `I` + 16 lowercase hex digits of the value with its sign bit flipped (big-endian):
//!   `i64::MIN` is `I0000…`, `-1` is `I7fff…`, `0` is `I8000…`.
//! - FLOAT: `F` + 16 hex digits of the IEEE bits, the sign bit flipped for a positive value
//!   and every bit flipped for a negative one (`-0.0` is stored as `0.0`): the usual
//!   total-order encoding of doubles.
//! - STRING: `S` + the text percent-encoded: `A-Z a-z 0-9 . : -` as themselves, every other
//!   byte as `%XX`. Readable in the HBase shell for the usual values (`Shz`), injective and
//!   free of `_`; only equality is asked of strings, so its order does not matter.
//! - MULTI_VALUE: one row per element, `M` + the element encoded as a STRING.
//!
//! Not salted, unlike the profile rows: a query reads one code's rows, which salting would
//! split into one scan per bucket; the index's write load is the profile table's spread over
//! codes, and the table is pre-split on the codes' first letters ([`split_keys`]).

use std::ops::Bound;

use sinks::schema::{FamilySpec, KeyCodec, TableSpec};
use sinks::table::prefix_successor;

use crate::event::CellValue;
use crate::key::SEPARATOR;
use crate::tag::DataType;

/// Name of the inverted index table.
pub const INDEX_TABLE: &str = "user_tag_index";
/// Its one family.
pub const INDEX_FAMILY: &str = "i";
/// The qualifier of an index row's one cell.
pub const INDEX_QUALIFIER: &[u8] = b"u";
/// The value of that cell: the row key says everything, HBase needs a cell.
pub const INDEX_CELL: &[u8] = b"1";

/// `user_tag_index`'s key codec for its table spec: an entity is a tag code, whose rows are
/// under `<code>_`.
pub const INDEX_KEY_CODEC: KeyCodec = KeyCodec::new("<tag code>_<mark><value>_<user>", code_key);

/// One value as the index orders it.
#[derive(Debug, Clone, PartialEq)]
pub enum IndexValue {
    /// A BOOLEAN value.
    Bool(bool),
    /// An INT value.
    Int(i64),
    /// A FLOAT value, finite.
    Float(f64),
    /// A STRING value.
    Str(String),
    /// One element of a MULTI_VALUE value.
    Elem(String),
}

impl IndexValue {
    /// The type mark of this value's rows.
    fn mark(&self) -> u8 {
        match self {
            IndexValue::Bool(_) => b'B',
            IndexValue::Int(_) => b'I',
            IndexValue::Float(_) => b'F',
            IndexValue::Str(_) => b'S',
            IndexValue::Elem(_) => b'M',
        }
    }

    /// The mark of the rows of a tag of `data_type`.
    pub fn mark_of(data_type: DataType) -> u8 {
        match data_type {
            DataType::Boolean => b'B',
            DataType::Int => b'I',
            DataType::Float => b'F',
            DataType::String => b'S',
            DataType::MultiValue => b'M',
        }
    }

    /// Appends the mark and the encoded value.
    fn encode_into(&self, out: &mut Vec<u8>) {
        out.push(self.mark());
        match self {
            IndexValue::Bool(b) => out.push(if *b { b'1' } else { b'0' }),
            IndexValue::Int(i) => hex16(out, (*i as u64) ^ (1 << 63)),
            IndexValue::Float(f) => hex16(out, float_key(*f)),
            IndexValue::Str(s) | IndexValue::Elem(s) => percent(out, s),
        }
    }
}

/// The entries a stored cell text of a tag of `data_type` makes: one, or one per element of a
/// MULTI_VALUE; none when the text is not a value of the type.
pub fn values_of_cell(data_type: DataType, cell: &[u8]) -> Vec<IndexValue> {
    match CellValue::from_cell(data_type, cell) {
        Some(v) => values_of(&v),
        None => Vec::new(),
    }
}

/// The entries of a checked value.
pub fn values_of(value: &CellValue) -> Vec<IndexValue> {
    match value {
        CellValue::Boolean(b) => vec![IndexValue::Bool(*b)],
        CellValue::Int(i) => vec![IndexValue::Int(*i)],
        CellValue::Float(f) => vec![IndexValue::Float(*f)],
        CellValue::String(s) => vec![IndexValue::Str(s.clone())],
        CellValue::MultiValue(json) => serde_json::from_str::<Vec<String>>(json)
            .unwrap_or_default()
            .into_iter()
            .map(IndexValue::Elem)
            .collect(),
    }
}

/// The index row of `user` having `value` for `code`.
pub fn index_row(code: &str, value: &IndexValue, user: &str) -> Vec<u8> {
    let mut row = value_prefix(code, value);
    row.extend_from_slice(user.as_bytes());
    row
}

/// Calls `each` with every index row of `user` having the stored cell text `cell` for `code`,
/// a tag of `data_type`: the rows [`index_row`] makes of [`values_of_cell`]'s values, built in
/// `scratch` (cleared first) without building the values. The job's upkeep makes a row or two
/// per written tag, and the values' strings and the rows' vectors were most of its allocations.
pub fn for_each_row_of_cell(
    code: &str,
    data_type: DataType,
    cell: &[u8],
    user: &str,
    scratch: &mut Vec<u8>,
    mut each: impl FnMut(&[u8]),
) {
    let Ok(text) = std::str::from_utf8(cell) else {
        return;
    };
    scratch.clear();
    scratch.extend_from_slice(code.as_bytes());
    scratch.push(SEPARATOR);
    let head = scratch.len();
    let mut row = |scratch: &mut Vec<u8>, encode: &dyn Fn(&mut Vec<u8>)| {
        scratch.truncate(head);
        encode(scratch);
        scratch.push(SEPARATOR);
        scratch.extend_from_slice(user.as_bytes());
        each(scratch);
    };
    match data_type {
        DataType::Boolean => {
            if let Ok(b) = text.parse::<bool>() {
                row(scratch, &|out| IndexValue::Bool(b).encode_into(out));
            }
        }
        DataType::Int => {
            if let Ok(i) = text.parse::<i64>() {
                row(scratch, &|out| IndexValue::Int(i).encode_into(out));
            }
        }
        DataType::Float => {
            if let Some(f) = text.parse::<f64>().ok().filter(|f| f.is_finite()) {
                row(scratch, &|out| IndexValue::Float(f).encode_into(out));
            }
        }
        DataType::String => row(scratch, &|out| {
            out.push(b'S');
            percent(out, text);
        }),
        DataType::MultiValue => {
            for element in serde_json::from_str::<Vec<String>>(text).unwrap_or_default() {
                row(scratch, &|out| {
                    out.push(b'M');
                    percent(out, &element);
                });
            }
        }
    }
}

/// The prefix of every row of `code` with `value`: `<code>_<mark><value>_`.
pub fn value_prefix(code: &str, value: &IndexValue) -> Vec<u8> {
    let mut row = code_key(code);
    value.encode_into(&mut row);
    row.push(SEPARATOR);
    row
}

/// `<code>_`: the start of the code's rows (and of longer codes' rows; see [`code_range`]).
fn code_key(code: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(code.len() + 24);
    key.extend_from_slice(code.as_bytes());
    key.push(SEPARATOR);
    key
}

/// `[start, stop)` holding exactly the rows of `code`, of any type: `[<code>_A, <code>_[)`.
pub fn code_range(code: &str) -> (Vec<u8>, Vec<u8>) {
    let mut start = code_key(code);
    let mut stop = start.clone();
    start.push(b'A');
    stop.push(b'Z' + 1);
    (start, stop)
}

/// `[start, stop)` holding exactly the rows of `code` (whose rows have `mark`) with a value
/// within `lower` and `upper`, which must be of that mark.
pub fn value_range(
    code: &str,
    mark: u8,
    lower: Bound<&IndexValue>,
    upper: Bound<&IndexValue>,
) -> (Vec<u8>, Vec<u8>) {
    let mut type_prefix = code_key(code);
    type_prefix.push(mark);
    let start = match lower {
        Bound::Unbounded => type_prefix.clone(),
        Bound::Included(v) => value_prefix(code, v),
        Bound::Excluded(v) => prefix_successor(&value_prefix(code, v)),
    };
    let stop = match upper {
        Bound::Unbounded => prefix_successor(&type_prefix),
        Bound::Included(v) => prefix_successor(&value_prefix(code, v)),
        Bound::Excluded(v) => value_prefix(code, v),
    };
    (start, stop)
}

/// One index row read back.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexEntry {
    /// The tag code.
    pub code: String,
    /// The value.
    pub value: IndexValue,
    /// The user.
    pub user: String,
}

/// Reads an index row key back; `None` when it is not one [`index_row`] writes.
pub fn parse_index_row(row: &[u8]) -> Option<IndexEntry> {
    let (code, mark, body, user) = split_index_row(row)?;
    let value = match mark {
        b'B' => match body {
            "0" => IndexValue::Bool(false),
            "1" => IndexValue::Bool(true),
            _ => return None,
        },
        b'I' => IndexValue::Int((parse_hex16(body)? ^ (1 << 63)) as i64),
        b'F' => IndexValue::Float(float_of_key(parse_hex16(body)?)),
        b'S' => IndexValue::Str(unpercent(body)?),
        b'M' => IndexValue::Elem(unpercent(body)?),
        _ => return None,
    };
    Some(IndexEntry {
        code: code.to_string(),
        value,
        user: user.to_string(),
    })
}

/// The user of an index row: what [`parse_index_row`] reads as its `user`, without building
/// the entry (an audience query reads only this of each row); `None` where it reads nothing.
pub fn index_row_user(row: &[u8]) -> Option<&str> {
    let (_, mark, body, user) = split_index_row(row)?;
    let valid = match mark {
        b'B' => matches!(body, "0" | "1"),
        b'I' | b'F' => parse_hex16(body).is_some(),
        b'S' | b'M' => {
            body.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'-'))
                || unpercent(body).is_some()
        }
        _ => false,
    };
    valid.then_some(user)
}

/// An index row's code, type mark, encoded value and user, each checked but the value.
fn split_index_row(row: &[u8]) -> Option<(&str, u8, &str, &str)> {
    let text = std::str::from_utf8(row).ok()?;
    let (rest, user) = text.rsplit_once('_')?;
    crate::key::validate_user_id(user).ok()?;
    let (code, value) = rest.rsplit_once('_')?;
    let mark = *value.as_bytes().first()?;
    if !mark.is_ascii_uppercase()
        || code.is_empty()
        || !code
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return None;
    }
    Some((code, mark, &value[1..], user))
}

/// Split keys of the index: the codes' first letters `b` to `z` over the alphabet, 25 regions.
/// Tag codes start with a letter, so every code's rows sit in one region of them, and the
/// registry's prefixes (`dim_`, `beh_`, `vip`…) fall into different ones.
pub fn split_keys() -> Vec<Vec<u8>> {
    (b'b'..=b'z').map(|c| vec![c]).collect()
}

/// `user_tag_index`: one family `i`, one version (the row is the fact), no TTL (entries are
/// retracted by the job and by `tags purge`), Snappy, a ROW bloom (a retraction is a delete of
/// a known row).
pub fn index_table() -> TableSpec {
    TableSpec {
        name: INDEX_TABLE,
        key: INDEX_KEY_CODEC,
        families: vec![FamilySpec::new(INDEX_FAMILY, None)],
        split_keys: split_keys(),
        get_rows_per_call: sinks::schema::DEFAULT_GET_ROWS_PER_CALL,
    }
}

/// Doubles in total order as unsigned integers: positive ones with the sign bit set, negative
/// ones with every bit flipped.
fn float_key(f: f64) -> u64 {
    let f = if f == 0.0 { 0.0 } else { f };
    let bits = f.to_bits();
    if bits >> 63 == 0 {
        bits | (1 << 63)
    } else {
        !bits
    }
}

fn float_of_key(key: u64) -> f64 {
    if key >> 63 == 1 {
        f64::from_bits(key & !(1 << 63))
    } else {
        f64::from_bits(!key)
    }
}

fn hex16(out: &mut Vec<u8>, v: u64) {
    for shift in (0..16).rev() {
        out.push(b"0123456789abcdef"[((v >> (shift * 4)) & 0xf) as usize]);
    }
}

fn parse_hex16(s: &str) -> Option<u64> {
    (s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| u64::from_str_radix(s, 16).ok())
        .flatten()
}

fn percent(out: &mut Vec<u8>, s: &str) {
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'-') {
            out.push(b);
        } else {
            out.push(b'%');
            out.push(b"0123456789ABCDEF"[usize::from(b >> 4)]);
            out.push(b"0123456789ABCDEF"[usize::from(b & 0xf)]);
        }
    }
}

fn unpercent(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            if !hex.bytes().all(|h| matches!(h, b'0'..=b'9' | b'A'..=b'F')) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else if b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'-') {
            out.push(b);
            i += 1;
        } else {
            return None;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn in_range(row: &[u8], (start, stop): &(Vec<u8>, Vec<u8>)) -> bool {
        row >= start.as_slice() && (stop.is_empty() || row < stop.as_slice())
    }

    #[test]
    fn rows_read_as_the_hbase_shell_shows_them() {
        assert_eq!(
            index_row("dim_city", &IndexValue::Str("hz".into()), "13800138000"),
            b"dim_city_Shz_13800138000"
        );
        assert_eq!(
            index_row("beh_buy_30d", &IndexValue::Int(3), "u1"),
            b"beh_buy_30d_I8000000000000003_u1"
        );
        assert_eq!(
            index_row("vip", &IndexValue::Bool(true), "u1"),
            b"vip_B1_u1"
        );
        assert_eq!(
            index_row("dim_x", &IndexValue::Str("a_b c".into()), "u1"),
            b"dim_x_Sa%5Fb%20c_u1"
        );
    }

    #[test]
    fn a_codes_range_holds_no_longer_codes_rows() {
        let short = index_row("beh_buy", &IndexValue::Int(1), "u1");
        let long = index_row("beh_buy_30d", &IndexValue::Int(1), "u1");
        assert!(in_range(&short, &code_range("beh_buy")));
        assert!(!in_range(&long, &code_range("beh_buy")));
        let all = value_range("beh_buy", b'I', Bound::Unbounded, Bound::Unbounded);
        assert!(in_range(&short, &all) && !in_range(&long, &all));
    }

    #[test]
    fn multi_values_make_one_entry_per_element() {
        let cell = br#"["a","b c"]"#;
        assert_eq!(
            values_of_cell(DataType::MultiValue, cell),
            [IndexValue::Elem("a".into()), IndexValue::Elem("b c".into())]
        );
        assert!(values_of_cell(DataType::Int, b"x").is_empty());
    }

    #[test]
    fn other_keys_do_not_parse() {
        for bad in [
            &b"dim_city_hz_u1"[..],
            b"_Shz_u1",
            b"dim_city_Sh",
            b"d_I12_u1",
            b"d_X1_u1",
            b"d_Sa%zz_u1",
        ] {
            assert_eq!(
                parse_index_row(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
            assert_eq!(
                index_row_user(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    fn value() -> impl Strategy<Value = IndexValue> {
        prop_oneof![
            any::<bool>().prop_map(IndexValue::Bool),
            any::<i64>().prop_map(IndexValue::Int),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| IndexValue::Float(if f == 0.0 { 0.0 } else { f })),
            any::<String>().prop_map(IndexValue::Str),
            "[a-z_ %]{0,8}".prop_map(IndexValue::Elem),
        ]
    }

    proptest! {
        #[test]
        fn rows_round_trip(code in "[a-z][a-z0-9_]{0,10}", v in value(), user in "[A-Za-z0-9.:-]{1,20}") {
            let row = index_row(&code, &v, &user);
            prop_assert_eq!(parse_index_row(&row), Some(IndexEntry { code: code.clone(), value: v.clone(), user: user.clone() }));
            prop_assert!(in_range(&row, &code_range(&code)));
            prop_assert!(row.starts_with(&value_prefix(&code, &v)));
            prop_assert_eq!(index_row_user(&row), Some(user.as_str()));
        }

        #[test]
        fn a_cells_rows_are_those_of_its_values(
            code in "[a-z][a-z0-9_]{0,10}",
            cell in prop_oneof![
                any::<bool>().prop_map(|b| b.to_string()),
                any::<i64>().prop_map(|i| i.to_string()),
                any::<f64>().prop_map(|f| f.to_string()),
                Just("inf".to_string()),
                any::<String>(),
                proptest::collection::vec("[a-z_ %é]{0,4}", 0..4)
                    .prop_map(|v| serde_json::to_string(&v).unwrap()),
            ],
            user in "[A-Za-z0-9.:-]{1,20}",
        ) {
            for data_type in [DataType::Boolean, DataType::Int, DataType::Float, DataType::String, DataType::MultiValue] {
                let want: Vec<Vec<u8>> = values_of_cell(data_type, cell.as_bytes())
                    .iter()
                    .map(|v| index_row(&code, v, &user))
                    .collect();
                let mut got = Vec::new();
                for_each_row_of_cell(&code, data_type, cell.as_bytes(), &user, &mut Vec::new(), |r| got.push(r.to_vec()));
                prop_assert_eq!(got, want, "{:?}", data_type);
            }
        }

        #[test]
        fn the_user_is_read_as_the_whole_row_is(row in "[a-z_]{0,6}_[A-Z]?[a-z0-9%A-F_ .é]{0,8}_[a-z0-9_.]{0,6}") {
            let entry = parse_index_row(row.as_bytes());
            prop_assert_eq!(index_row_user(row.as_bytes()), entry.as_ref().map(|e| e.user.as_str()));
        }

        #[test]
        fn int_ranges_hold_exactly_the_values_within(a in any::<i64>(), b in any::<i64>(), lo in any::<i64>(), hi in any::<i64>()) {
            let (ra, rb) = (index_row("c", &IndexValue::Int(a), "u"), index_row("c", &IndexValue::Int(b), "u"));
            prop_assert_eq!(a.cmp(&b), ra.cmp(&rb));
            let (l, h) = (IndexValue::Int(lo), IndexValue::Int(hi));
            for (bounds, want) in [
                ((Bound::Included(&l), Bound::Excluded(&h)), lo <= a && a < hi),
                ((Bound::Excluded(&l), Bound::Included(&h)), lo < a && a <= hi),
                ((Bound::Unbounded, Bound::Excluded(&h)), a < hi),
                ((Bound::Included(&l), Bound::Unbounded), lo <= a),
            ] {
                prop_assert_eq!(in_range(&ra, &value_range("c", b'I', bounds.0, bounds.1)), want);
            }
        }

        #[test]
        fn float_ranges_hold_exactly_the_values_within(a in -1e9f64..1e9, b in any::<f64>(), lo in -1e9f64..1e9) {
            prop_assume!(b.is_finite());
            let (ra, rb) = (index_row("c", &IndexValue::Float(a), "u"), index_row("c", &IndexValue::Float(b), "u"));
            if a != b {
                prop_assert_eq!(a.partial_cmp(&b).unwrap(), ra.cmp(&rb));
            }
            let l = IndexValue::Float(lo);
            prop_assert_eq!(in_range(&ra, &value_range("c", b'F', Bound::Excluded(&l), Bound::Unbounded)), a > lo);
            prop_assert_eq!(in_range(&ra, &value_range("c", b'F', Bound::Unbounded, Bound::Included(&l))), a <= lo);
        }

        #[test]
        fn a_strings_prefix_holds_no_other_value(a in "[a-z_%]{0,6}", b in "[a-z_%]{0,6}") {
            let row = index_row("c", &IndexValue::Str(b.clone()), "u");
            prop_assert_eq!(row.starts_with(&value_prefix("c", &IndexValue::Str(a.clone()))), a == b);
        }
    }
}
