//! Bad events, one of each dead-letter kind the decoder and the tag checks know.

use rand::Rng;

use super::users::IdStyle;
use super::{write_string, write_value, EventGenerator};
use crate::event::{MAX_LINE_BYTES, MAX_VALUE_BYTES};
use crate::tag::{DataType, TagStatus};

/// The kinds made, the first of [`crate::RejectReason::KINDS`]: every kind but `future`,
/// which a source decides against its clock, not a line.
pub(super) const KINDS_MADE: usize = 12;

/// Plausible codes that no registry of ours defines.
pub(super) const UNKNOWN_CODES: &[&str] = &[
    "dim_zodiac",
    "dim_blood_type",
    "beh_live_watch_30d",
    "rt_last_coupon_id",
];

/// Writes a bad variant of the event being generated into `line`: kind `kind`, an index
/// into [`crate::RejectReason::KINDS`]. The first seven break the line, the others one tag of
/// an event whose other tags are good.
pub(super) fn write(
    g: &mut EventGenerator,
    kind: usize,
    user: u64,
    style: IdStyle,
    ts: i64,
    line: &mut Vec<u8>,
) {
    let mut extra = Vec::new();
    match kind {
        // too_long
        0 => {
            extra.extend_from_slice(b",\"rt_last_search\":\"");
            extra.resize(extra.len() + MAX_LINE_BYTES, b'x');
            extra.push(b'"');
        }
        // not_utf8: Latin-1 text, as an old producer writes it.
        1 => extra.extend_from_slice(b",\"rt_last_search\":\"caf\xE9\""),
        // invalid_json: cut in the middle, as a crashed producer leaves it.
        2 => {
            g.write_event(user, style, ts, line, |_| {});
            line.truncate(line.len() / 2);
            return;
        }
        // not_an_object
        3 => {
            line.push(b'[');
            g.write_event(user, style, ts, line, |_| {});
            line.push(b']');
            return;
        }
        // missing_field
        4 => {
            g.write_event(user, style, ts, line, |_| {});
            let (at_ts, at_tags) = (find(line, b",\"ts\":"), find(line, b",\"tags\":"));
            match g.rng.random_range(0..3) {
                0 => drop(line.drain(1..=at_ts)),
                1 => drop(line.drain(at_ts..at_tags)),
                _ => {
                    line.truncate(at_tags);
                    line.push(b'}');
                }
            }
            return;
        }
        // bad_field
        5 => match g.rng.random_range(0..3) {
            0 => {
                // '_' separates row-key parts: refused in a user id.
                g.id.push_str("_1");
                g.write_event(user, IdStyle::Uid, ts, line, |_| {});
                return;
            }
            // Milliseconds where seconds are expected.
            1 => {
                g.write_event(user, style, ts * 1000, line, |_| {});
                return;
            }
            _ => {
                g.write_event(user, style, ts, line, |_| {});
                line.truncate(find(line, b",\"tags\":"));
                line.extend_from_slice(b",\"tags\":[\"dim_city\"]}");
                return;
            }
        },
        // too_many_tags
        6 => {
            for n in 0..256 + g.rng.random_range(0..50) {
                extra.extend_from_slice(format!(",\"x_{n}\":1").as_bytes());
            }
        }
        // unknown_tag
        7 => {
            extra.push(b',');
            write_string(
                &mut extra,
                UNKNOWN_CODES[g.rng.random_range(0..UNKNOWN_CODES.len())],
            );
            extra.extend_from_slice(b":1");
        }
        // offline_tag, gray_tag: a value of the right type for a tag not written.
        8 | 9 => {
            let status = if kind == 8 {
                TagStatus::Offline
            } else {
                TagStatus::Gray
            };
            let tag = pick(g, |t| t.status == status);
            extra.push(b',');
            write_string(&mut extra, &g.tags[tag].def.tag_code);
            extra.push(b':');
            write_value(&mut g.rng, g.tags[tag].values, &mut extra);
        }
        // wrong_type: what producers send by mistake (a string for a number, ...).
        10 => {
            let tag = pick(g, |t| t.status == TagStatus::Online);
            extra.push(b',');
            write_string(&mut extra, &g.tags[tag].def.tag_code);
            let wrong: &[u8] = match g.tags[tag].def.data_type {
                DataType::Boolean => b":\"yes\"",
                DataType::Int => b":2.5",
                DataType::Float => b":\"1.5\"",
                DataType::String => b":42",
                DataType::MultiValue => b":\"a,b\"",
            };
            extra.extend_from_slice(wrong);
        }
        // value_too_large
        _ => {
            let tag = pick(g, |t| {
                t.status == TagStatus::Online && t.data_type == DataType::String
            });
            extra.push(b',');
            write_string(&mut extra, &g.tags[tag].def.tag_code);
            extra.extend_from_slice(b":\"");
            extra.resize(
                extra.len() + MAX_VALUE_BYTES + 1 + g.rng.random_range(0..1000),
                b'a',
            );
            extra.push(b'"');
        }
    }
    g.write_event(user, style, ts, line, |l| l.extend_from_slice(&extra));
}

/// A tag of the catalog for which `wanted` holds that the event does not carry already.
fn pick(g: &mut EventGenerator, wanted: impl Fn(&crate::TagDef) -> bool) -> usize {
    let candidates: Vec<usize> = (0..g.tags.len())
        .filter(|&i| wanted(&g.tags[i].def) && !g.chosen.contains(&i))
        .collect();
    candidates[g.rng.random_range(0..candidates.len())]
}

/// Where `needle` starts in `line`; the event was written by us, so it is there.
fn find(line: &[u8], needle: &[u8]) -> usize {
    line.windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or(line.len())
}
