//! Reading tag definitions from CSV: every good row kept, every bad one reported with its line.

use std::collections::HashMap;
use std::io::Read;

use crate::tag::TagDef;
use crate::{Error, Result};

/// The header a registry CSV starts with, exactly (surrounding blanks of each name aside).
pub const CSV_HEADER: [&str; 9] = [
    "tag_code",
    "name",
    "data_type",
    "value_type",
    "status",
    "ttl_secs",
    "category",
    "owner",
    "update_frequency",
];

/// A row that was not imported: its line in the file and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedRow {
    /// 1-based line number where the row starts (the header is line 1).
    pub line: u64,
    /// The row's tag code, when it could be read.
    pub tag_code: Option<String>,
    /// Why it was refused.
    pub reason: String,
}

/// What [`import_csv`] read: the valid definitions, each with its line, and the refused rows.
#[derive(Debug, Default)]
pub struct CsvImport {
    /// Valid definitions with the line each started on, in file order.
    pub tags: Vec<(u64, TagDef)>,
    /// Rows that break a rule, in file order.
    pub refused: Vec<RefusedRow>,
}

/// Reads a registry CSV (header [`CSV_HEADER`], one definition a row, fields trimmed, empty
/// `ttl_secs` = none) and validates each row.
///
/// A bad row never stops the import: it becomes a [`RefusedRow`] with its line number and the
/// reason (wrong field count, invalid UTF-8, a value out of its set, a rule of
/// [`TagDef::validate`], a code given twice in the file — the second is refused). `path` only
/// names the input in errors.
///
/// # Errors
///
/// [`Error::Csv`] when the file cannot be a registry at all: unreadable, empty, or with
/// another header.
pub fn import_csv<R: Read>(path: &str, mut input: R) -> Result<CsvImport> {
    let csv_error = |reason: String| Error::Csv {
        path: path.to_string(),
        reason,
    };
    // Whole, to number lines (a registry is thousands of rows, not millions).
    let mut data = Vec::new();
    input
        .read_to_end(&mut data)
        .map_err(|e| csv_error(format!("cannot read: {e}")))?;
    let mut lines = LineCounter::new(&data);
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(data.as_slice());
    let header = reader
        .byte_headers()
        .map_err(|e| csv_error(format!("cannot read the header: {e}")))?
        .clone();
    if header.is_empty() {
        return Err(csv_error(format!(
            "empty file; expected the header {}",
            CSV_HEADER.join(",")
        )));
    }
    // A UTF-8 byte order mark (spreadsheets write one) is not part of the first name.
    let names: Vec<String> = header
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let f = if i == 0 {
                f.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(f)
            } else {
                f
            };
            String::from_utf8_lossy(f).into_owned()
        })
        .collect();
    if names != CSV_HEADER {
        return Err(csv_error(format!(
            "the header is '{}'; expected exactly '{}'",
            names.join(","),
            CSV_HEADER.join(",")
        )));
    }
    let mut out = CsvImport::default();
    let mut seen: HashMap<String, u64> = HashMap::new();
    let mut record = csv::ByteRecord::new();
    loop {
        let before = reader.position().byte();
        match reader.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                // Reading from memory fails only on a malformed record, after which the csv
                // reader goes on with the next one.
                let at = e.position().map_or(before, csv::Position::byte);
                out.refused.push(RefusedRow {
                    line: lines.line_at(at),
                    tag_code: None,
                    reason: e.to_string(),
                });
                continue;
            }
        }
        let line = lines.line_at(record.position().map_or(before, csv::Position::byte));
        match parse_row(&record) {
            Ok(tag) => {
                if let Some(first) = seen.get(&tag.tag_code) {
                    out.refused.push(RefusedRow {
                        line,
                        reason: format!(
                            "tag_code '{}' is already defined on line {first} of this file",
                            tag.tag_code
                        ),
                        tag_code: Some(tag.tag_code),
                    });
                } else {
                    seen.insert(tag.tag_code.clone(), line);
                    out.tags.push((line, tag));
                }
            }
            Err(reason) => out.refused.push(RefusedRow {
                line,
                tag_code: record
                    .get(0)
                    .and_then(|c| std::str::from_utf8(c).ok())
                    .filter(|c| !c.is_empty())
                    .map(str::to_string),
                reason,
            }),
        }
    }
    Ok(out)
}

/// Line numbers of records from their byte offsets.
///
/// The csv crate reports a record's position as the end of the previous record, before the
/// blank lines it skips, so its line numbers drift after a blank line: the record starts at
/// the first byte after that which is not a line break.
struct LineCounter<'a> {
    data: &'a [u8],
    /// Offset up to which newlines are counted, and how many there were.
    counted_to: usize,
    newlines: u64,
}

impl<'a> LineCounter<'a> {
    fn new(data: &'a [u8]) -> Self {
        Self {
            data,
            counted_to: 0,
            newlines: 0,
        }
    }

    /// The 1-based line of the record reported at byte `at` (offsets only grow).
    fn line_at(&mut self, at: u64) -> u64 {
        let mut start = usize::try_from(at)
            .unwrap_or(usize::MAX)
            .min(self.data.len());
        while start < self.data.len() && matches!(self.data[start], b'\n' | b'\r') {
            start += 1;
        }
        if start >= self.counted_to {
            let span = &self.data[self.counted_to..start];
            self.newlines += span.iter().filter(|&&b| b == b'\n').count() as u64;
            self.counted_to = start;
        }
        self.newlines + 1
    }
}

fn parse_row(record: &csv::ByteRecord) -> Result<TagDef, String> {
    if record.len() != CSV_HEADER.len() {
        return Err(format!(
            "{} fields; expected {} ({})",
            record.len(),
            CSV_HEADER.len(),
            CSV_HEADER.join(",")
        ));
    }
    let mut fields = Vec::with_capacity(CSV_HEADER.len());
    for (name, raw) in CSV_HEADER.iter().zip(record.iter()) {
        let text = std::str::from_utf8(raw).map_err(|_| format!("{name} is not valid UTF-8"))?;
        fields.push(text);
    }
    let ttl_secs = match fields[5] {
        "" => None,
        t => Some(t.parse::<u64>().map_err(|_| {
            format!("ttl_secs '{t}' is not a whole number of seconds (or empty for none)")
        })?),
    };
    let tag = TagDef {
        tag_code: fields[0].to_string(),
        name: fields[1].to_string(),
        data_type: fields[2].parse().map_err(|e: Error| e.to_string())?,
        value_type: fields[3].parse().map_err(|e: Error| e.to_string())?,
        status: fields[4].parse().map_err(|e: Error| e.to_string())?,
        ttl_secs,
        category: fields[6].to_string(),
        owner: fields[7].to_string(),
        update_frequency: fields[8].to_string(),
    };
    tag.validate().map_err(|e| e.to_string())?;
    Ok(tag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tag::{DataType, TagStatus, ValueType};

    #[test]
    fn line_numbers_survive_blank_lines_and_quoted_breaks() {
        let got = read(
            "dim_a,A,INT,dimension,online,,,,\n\n\n\
             x\r\n\r\n\
             dim_b,\"B\nB\",INT,dimension,online,,,,\n\n\
             y\n",
        );
        assert_eq!(got.tags[0].0, 2);
        let refused: Vec<u64> = got.refused.iter().map(|r| r.line).collect();
        assert_eq!(refused, [5, 7, 10]);
    }

    const HEADER: &str =
        "tag_code,name,data_type,value_type,status,ttl_secs,category,owner,update_frequency\n";

    fn read(body: &str) -> CsvImport {
        import_csv("tags.csv", format!("{HEADER}{body}").as_bytes()).expect("a registry CSV")
    }

    #[test]
    fn good_rows_are_kept_and_bad_rows_reported_with_their_line() {
        let got = read(
            "dim_city,City,STRING,dimension,online,,geo,crm,daily\n\
             Bad-Code,x,STRING,dimension,online,,,,\n\
             rt_last_cat,\"Last category, realtime\",STRING,short_term,gray,86400,beh,reco,realtime\n\
             rt_no_ttl,x,STRING,short_term,online,,,,\n\
             beh_buy_30d,Buys in 30 days,DOUBLE,statistic,online,,,,\n\
             too,few,fields\n\
             dim_city,Again,STRING,dimension,online,,,,\n\
             \n\
             beh_buy_30d_v2, Buys ,INT,statistic,offline,,beh,crm,daily\n\
             st,x,INT,statistic,online,-5,,,\n",
        );
        let codes: Vec<(u64, &str)> = got
            .tags
            .iter()
            .map(|(l, t)| (*l, t.tag_code.as_str()))
            .collect();
        assert_eq!(
            codes,
            [(2, "dim_city"), (4, "rt_last_cat"), (10, "beh_buy_30d_v2")]
        );
        let rt = &got.tags[1].1;
        assert_eq!(rt.name, "Last category, realtime");
        assert_eq!(rt.ttl_secs, Some(86400));
        assert_eq!(rt.status, TagStatus::Gray);
        assert_eq!(rt.value_type, ValueType::ShortTerm);
        assert_eq!(got.tags[2].1.name, "Buys", "fields are trimmed");
        assert_eq!(got.tags[2].1.data_type, DataType::Int);
        let refused: Vec<(u64, &str)> = got
            .refused
            .iter()
            .map(|r| (r.line, r.reason.as_str()))
            .collect();
        assert_eq!(refused.len(), 6, "{refused:#?}");
        assert_eq!(refused[0].0, 3);
        assert!(refused[0].1.contains("tag_code 'Bad-Code'"));
        assert_eq!(refused[1].0, 5);
        assert!(refused[1].1.contains("needs ttl_secs"));
        assert_eq!(refused[2].0, 6);
        assert!(refused[2].1.contains("data_type 'DOUBLE'"));
        assert_eq!(refused[3], (7, "3 fields; expected 9 (tag_code,name,data_type,value_type,status,ttl_secs,category,owner,update_frequency)"));
        assert_eq!(refused[4].0, 8);
        assert!(refused[4].1.contains("already defined on line 2"));
        assert_eq!(got.refused[4].tag_code.as_deref(), Some("dim_city"));
        assert_eq!(refused[5].0, 11);
        assert!(refused[5].1.contains("ttl_secs '-5'"));
    }

    #[test]
    fn a_field_that_is_not_utf8_is_a_refused_row() {
        let mut bytes = HEADER.as_bytes().to_vec();
        bytes.extend_from_slice(b"dim_a,caf\xE9,STRING,dimension,online,,,,\n");
        bytes.extend_from_slice(b"dim_b,ok,STRING,dimension,online,,,,\n");
        let got = import_csv("t.csv", bytes.as_slice()).unwrap();
        assert_eq!(got.tags.len(), 1);
        assert_eq!(got.tags[0].0, 3);
        assert_eq!(got.refused[0].line, 2);
        assert_eq!(got.refused[0].reason, "name is not valid UTF-8");
    }

    #[test]
    fn a_quoted_field_over_lines_keeps_the_line_it_starts_on() {
        let got = read(
            "dim_a,\"two\nlines\",STRING,dimension,online,,,,\ndim_b,ok,STRING,dimension,online,,,,\n",
        );
        assert_eq!(got.refused[0].line, 2);
        assert!(got.refused[0].reason.contains("control character"));
        assert_eq!(got.tags[0].0, 4);
    }

    #[test]
    fn another_header_is_refused_whole() {
        let e = import_csv("t.csv", "code,name\nx,y\n".as_bytes()).unwrap_err();
        assert!(
            e.to_string().contains("expected exactly 'tag_code,name"),
            "{e}"
        );
        let e = import_csv("t.csv", "".as_bytes()).unwrap_err();
        assert!(e.to_string().contains("empty file"), "{e}");
        let bom = format!("\u{feff}{HEADER}dim_a,A,BOOLEAN,dimension,online,,,,\n");
        assert_eq!(import_csv("t.csv", bom.as_bytes()).unwrap().tags.len(), 1);
    }
}
