use std::collections::{HashMap, HashSet};

use super::*;
use crate::event::{check_tag, decode_event, EventLimits};
use crate::tag::{DataType, ValueType};
use crate::TagDef;

fn lines(config: GenerateConfig) -> Vec<(Vec<u8>, Line)> {
    let mut g = EventGenerator::new(config).unwrap();
    let mut out = Vec::new();
    let mut line = Vec::new();
    while let Some(kind) = g.next_line(&mut line) {
        out.push((line.clone(), kind));
    }
    out
}

fn small(seed: u64) -> GenerateConfig {
    GenerateConfig {
        users: 1_000,
        events: 20_000,
        seed,
        ..GenerateConfig::default()
    }
}

/// The reasons the job would give for a line: the decoder's, else each tag's.
fn reasons(raw: &[u8], defs: &HashMap<String, TagDef>) -> Vec<&'static str> {
    let gray = HashSet::new();
    match decode_event(1, raw, &EventLimits::default()) {
        Err(rejected) => vec![rejected.reason.kind()],
        Ok(event) => event
            .tags
            .iter()
            .filter_map(|(code, value)| {
                check_tag(
                    defs.get(code),
                    code,
                    &event.user_id,
                    value,
                    &gray,
                    &EventLimits::default(),
                )
                .err()
                .map(|r| r.kind())
            })
            .collect(),
    }
}

fn defs() -> HashMap<String, TagDef> {
    registry()
        .into_iter()
        .map(|t| (t.tag_code.clone(), t))
        .collect()
}

#[test]
fn the_registry_is_realistic_and_imports_cleanly() {
    let tags = registry();
    assert!((170..=230).contains(&tags.len()), "{} tags", tags.len());
    for vt in ValueType::ALL {
        assert!(tags.iter().any(|t| t.value_type == *vt), "{vt}");
    }
    for dt in DataType::ALL {
        for vt in [
            ValueType::Dimension,
            ValueType::Statistic,
            ValueType::ShortTerm,
        ] {
            let n = tags
                .iter()
                .filter(|t| t.data_type == *dt && t.value_type == vt)
                .count();
            assert!(n > 0, "no {dt} {vt} tag");
        }
    }
    for status in [TagStatus::Gray, TagStatus::Offline] {
        assert!(tags.iter().any(|t| t.status == status));
    }
    let mut csv = Vec::new();
    write_registry_csv(&mut csv, &tags).unwrap();
    assert!(csv.starts_with(crate::CSV_HEADER.join(",").as_bytes()));
    let read = crate::import_csv("tags.csv", csv.as_slice()).unwrap();
    assert!(read.refused.is_empty(), "{:#?}", read.refused);
    let back: Vec<TagDef> = read.tags.into_iter().map(|(_, t)| t).collect();
    assert_eq!(back, tags, "the CSV reads back the same definitions");
    let unknown: Vec<_> = super::bad::UNKNOWN_CODES
        .iter()
        .filter(|c| tags.iter().any(|t| t.tag_code == **c))
        .collect();
    assert!(unknown.is_empty(), "{unknown:?} are defined");
}

#[test]
fn the_same_seed_writes_the_same_bytes_and_another_seed_others() {
    let config = GenerateConfig {
        bad_ratio: 0.1,
        ..small(42)
    };
    let write = |c| {
        let mut out = Vec::new();
        let summary = write_events(EventGenerator::new(c).unwrap(), &mut out).unwrap();
        (out, summary)
    };
    let (a, summary) = write(config);
    let (b, _) = write(config);
    assert!(a == b, "two runs of one seed differ");
    let (c, _) = write(GenerateConfig { seed: 43, ..config });
    assert!(a != c, "another seed writes the same");
    assert_eq!(summary.events, 20_000);
    assert_eq!(a.iter().filter(|&&b| b == b'\n').count(), 20_000);
    let bad: u64 = summary.bad.iter().sum();
    assert!((1_700..2_300).contains(&bad), "{bad} bad of 20000 at 10%");
    assert!(
        summary.bad[..super::bad::KINDS_MADE]
            .iter()
            .all(|&n| n > 50),
        "{:?}",
        summary.bad
    );
}

#[test]
fn every_good_event_decodes_and_checks_against_the_registry() {
    let defs = defs();
    let mut by_user: HashMap<String, HashMap<String, serde_json::Value>> = HashMap::new();
    let mut codes = HashSet::new();
    let mut last_ts = 0;
    for (raw, kind) in lines(small(1)) {
        assert_eq!(kind, Line::Good);
        assert_eq!(
            reasons(&raw, &defs),
            Vec::<&str>::new(),
            "{}",
            String::from_utf8_lossy(&raw)
        );
        let event = decode_event(1, &raw, &EventLimits::default()).unwrap();
        assert!((1..=MAX_TAGS).contains(&event.tags.len()));
        assert!(event.ts >= 1_796_500_000 && event.ts < 1_796_500_000 + 86_400);
        last_ts = last_ts.max(event.ts);
        for (code, value) in event.tags {
            if defs[&code].value_type == ValueType::Dimension {
                let seen = by_user.entry(event.user_id.clone()).or_default();
                let first = seen.entry(code.clone()).or_insert_with(|| value.clone());
                assert_eq!(*first, value, "a user's {code} changed");
            }
            codes.insert(code);
        }
    }
    assert!(last_ts > 1_796_500_000 + 80_000, "the span is covered");
    assert!(codes.len() > 150, "only {} codes used", codes.len());
}

#[test]
fn every_bad_event_is_rejected_for_its_kind_only() {
    let defs = defs();
    let config = GenerateConfig {
        bad_ratio: 1.0,
        events: 3_000,
        ..small(5)
    };
    let mut seen = HashSet::new();
    for (raw, kind) in lines(config) {
        let Line::Bad(kind) = kind else {
            panic!("a good line at bad ratio 1");
        };
        assert_eq!(
            reasons(&raw, &defs),
            vec![kind],
            "{}",
            String::from_utf8_lossy(&raw[..raw.len().min(300)])
        );
        seen.insert(kind);
    }
    assert_eq!(seen.len(), super::bad::KINDS_MADE, "{seen:?}");
}

#[test]
fn users_are_skewed_and_ids_share_leading_digits() {
    let mut events_of: HashMap<String, u32> = HashMap::new();
    let mut numbers = 0;
    for (raw, _) in lines(small(3)) {
        let v: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        if v["user_id"].is_u64() {
            numbers += 1;
        }
        let event = decode_event(1, &raw, &EventLimits::default()).unwrap();
        *events_of.entry(event.user_id).or_default() += 1;
    }
    let mut counts: Vec<u32> = events_of.values().copied().collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let top: u32 = counts[..10].iter().sum();
    // Uniform users would give the top 1% of users about 1% of the events.
    assert!(
        top > 20_000 / 5,
        "the top 10 of 1000 users made {top} of 20000 events"
    );
    assert!(counts.len() > 500, "{} users seen", counts.len());
    assert!(numbers > 0, "some ids are JSON integers");
    let phone_like = events_of
        .keys()
        .filter(|id| id.len() == 11 && ["13", "15", "18"].contains(&&id[..2]))
        .count();
    assert!(
        phone_like * 2 > events_of.len(),
        "{phone_like} of {} ids are 13x/15x/18x numbers",
        events_of.len()
    );
}

#[test]
fn settings_out_of_range_are_refused() {
    for bad in [
        GenerateConfig {
            users: 0,
            ..GenerateConfig::default()
        },
        GenerateConfig {
            users: MAX_USERS + 1,
            ..GenerateConfig::default()
        },
        GenerateConfig {
            bad_ratio: 1.5,
            ..GenerateConfig::default()
        },
        GenerateConfig {
            zipf_exponent: 0.0,
            ..GenerateConfig::default()
        },
        GenerateConfig {
            start: -1,
            ..GenerateConfig::default()
        },
        GenerateConfig {
            start: pipeline::json::MAX_TS,
            span_secs: 1,
            ..GenerateConfig::default()
        },
    ] {
        assert!(
            matches!(EventGenerator::new(bad), Err(Error::Invalid(_))),
            "{bad:?}"
        );
    }
    let none = GenerateConfig {
        events: 0,
        ..GenerateConfig::default()
    };
    assert!(lines(none).is_empty());
}

#[test]
fn live_and_probe_lines_are_good_events_of_the_user_they_name() {
    let mut defs = defs();
    defs.insert(PROBE_TAG.into(), probe_tag());
    let mut g = EventGenerator::new(small(3)).unwrap();
    let mut line = Vec::new();
    for i in 0..2_000u64 {
        let ts = 1_796_500_000 + i as i64;
        let (user, probe) = if i % 3 == 0 {
            let value = format!("p{i}");
            let user = g.probe_line(i * 7, ts, &value, &mut line).to_string();
            (user, Some(value))
        } else {
            (g.live_line(ts, &mut line).to_string(), None)
        };
        assert_eq!(reasons(&line, &defs), Vec::<&str>::new(), "{line:?}");
        let event = decode_event(1, &line, &EventLimits::default()).unwrap();
        assert_eq!((event.user_id.as_str(), event.ts), (user.as_str(), ts));
        let probed = event.tags.iter().find(|(code, _)| code == PROBE_TAG);
        assert_eq!(
            probed.map(|(_, v)| v.clone()),
            probe.map(serde_json::Value::from)
        );
    }
    // A rank beyond the users wraps around to one of them.
    let mut a = Vec::new();
    let user = g.probe_line(1_000 + 5, 1, "x", &mut a).to_string();
    assert_eq!(user, g.probe_line(5, 1, "x", &mut line));
}
