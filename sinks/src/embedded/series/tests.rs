//! Round trips of whole chunks, and decoders fed damaged bytes.

use proptest::prelude::*;
use xxhash_rust::xxh3::xxh3_64;

use super::*;

/// A point as comparable values: the value by its bits, so NaN equals itself.
fn key(p: &Point) -> (String, i64, u64, String) {
    (p.series.clone(), p.ts, p.value.to_bits(), p.extra.clone())
}

/// `points` as [`decode`] must return them: stably sorted by (series, time).
fn expected(points: &[Point]) -> Vec<(String, i64, u64, String)> {
    let mut sorted: Vec<&Point> = points.iter().collect();
    sorted.sort_by(|a, b| (a.series.as_str(), a.ts).cmp(&(b.series.as_str(), b.ts)));
    sorted.into_iter().map(key).collect()
}

fn round_trip(points: &[Point]) -> Vec<(String, i64, u64, String)> {
    let bytes = encode(points).expect("encodes");
    let sizes = column_sizes(&bytes).expect("sizes");
    assert_eq!(sizes.iter().map(|(_, b)| b).sum::<usize>(), bytes.len());
    decode(&bytes).expect("decodes").iter().map(key).collect()
}

fn point(series: &str, ts: i64, value: f64, extra: &str) -> Point {
    Point {
        series: series.to_owned(),
        ts,
        value,
        extra: extra.to_owned(),
    }
}

/// A sensor-like reading's extras, as the narrow row's `t:x` holds them.
fn sensor_extra(i: i64) -> String {
    format!(
        r#"{{"battery":3.{},"fw":"2.4.1","humidity":{}.{},"room":"room{:03}","rssi":-{},"seq":{}}}"#,
        70 - i % 3,
        40 + i % 7,
        i % 10,
        i % 13,
        60 + i % 9,
        1000 + i
    )
}

#[test]
fn empty_chunk_round_trips() {
    assert!(round_trip(&[]).is_empty());
}

#[test]
fn one_reading_round_trips() {
    let p = [point("dev00001", 1_796_400_000, 21.4, &sensor_extra(1))];
    assert_eq!(round_trip(&p), expected(&p));
}

#[test]
fn unsorted_input_is_sorted_stably() {
    let p = [
        point("b", 5, 1.0, "{}"),
        point("a", 9, 2.0, "{}"),
        point("b", 1, 3.0, "{}"),
        point("a", 9, 4.0, r#"{"second":true}"#),
        point("a", 2, 5.0, ""),
    ];
    let got = round_trip(&p);
    assert_eq!(got, expected(&p));
    assert_eq!(
        got[1].2,
        2.0f64.to_bits(),
        "the first of two equal keys stays first"
    );
    assert_eq!(got[2].2, 4.0f64.to_bits());
}

#[test]
fn odd_values_and_times_round_trip() {
    let values = [
        f64::NAN,
        -f64::NAN,
        f64::from_bits(0x7ff8_dead_beef_0001),
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        0.0,
        0.1 + 0.2,
        f64::MIN_POSITIVE,
        5e-324,
        f64::MAX,
        1e300,
        21.37,
        -3.0,
    ];
    let times = [i64::MIN, -1, 0, 1, i64::MAX, i64::MAX - 1, 1_796_400_000];
    let p: Vec<Point> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| point("dev", times[i % times.len()], v, "{}"))
        .collect();
    assert_eq!(round_trip(&p), expected(&p));
}

#[test]
fn extras_keep_every_spelling() {
    let extras = [
        r#"{"h":45.0}"#,
        r#"{"h":45}"#,
        r#"{"h":0.05}"#,
        r#"{"h":-0.05}"#,
        r#"{"h":-0.0}"#,
        r#"{"h":-0}"#,
        r#"{"h":007}"#,
        r#"{"h":1e5}"#,
        r#"{"h":1.5E-7}"#,
        r#"{"h":123456789012345678901234567890}"#,
        r#"{"h":0.1234567}"#,
        r#"{"s":"a\"b"}"#,
        r#"{"s":"é ☃"}"#,
        r#"{"n":null,"t":true,"f":false}"#,
        r#"{"nested":{"a":[1,2]}}"#,
        r#"{ "spaced": 1 }"#,
        r#"{"h":"45.0"}"#,
        r#"{"h":45.0,"h":46}"#,
        "{}",
        "",
        "not json at all",
        "{\"unterminated",
    ];
    let p: Vec<Point> = extras
        .iter()
        .enumerate()
        .map(|(i, e)| point("dev", i as i64, 1.0, e))
        .collect();
    assert_eq!(round_trip(&p), expected(&p));
}

#[test]
fn sensor_readings_are_small() {
    let p: Vec<Point> = (0..10_000)
        .map(|i| {
            point(
                &format!("dev{:05}", i / 60),
                1_796_400_000 + (i % 60) * 10,
                f64::from(200 + (i % 5) as i32) / 10.0,
                &sensor_extra(i),
            )
        })
        .collect();
    let bytes = encode(&p).unwrap();
    assert_eq!(round_trip(&p), expected(&p));
    let sizes = column_sizes(&bytes).unwrap();
    // An empty raw column is three zero varints a block: no object, no byte, an empty section.
    let blocks = block_count(&bytes).unwrap();
    assert_eq!(
        blocks,
        10_000_usize.div_ceil(BLOCK_POINTS.next_multiple_of(60))
    );
    assert!(
        sizes.contains(&("extra raw".to_owned(), 3 * blocks)),
        "sensor extras went raw: {sizes:?}"
    );
    assert!(bytes.len() < p.len() * 8, "{} bytes", bytes.len());
}

#[test]
fn damaged_chunks_are_errors() {
    let p: Vec<Point> = (0..500)
        .map(|i| point(&format!("d{}", i % 7), i, i as f64 / 4.0, &sensor_extra(i)))
        .collect();
    let bytes = encode(&p).unwrap();
    for len in 0..bytes.len() {
        assert!(decode(&bytes[..len]).is_err(), "truncated to {len}");
    }
    for at in 0..bytes.len() {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x10;
        assert!(decode(&damaged).is_err(), "byte {at} flipped");
    }
    let mut newer = bytes.clone();
    newer[MAGIC.len()] = FORMAT_VERSION + 1;
    assert!(matches!(decode(&newer), Err(Error::Version(v)) if v == FORMAT_VERSION + 1));
}

/// `bytes` with its checksum made right again, so the column decoders see the damage.
fn reseal(mut bytes: Vec<u8>) -> Vec<u8> {
    if bytes.len() >= 8 {
        let body = bytes.len() - 8;
        let sum = xxh3_64(&bytes[..body]);
        bytes[body..].copy_from_slice(&sum.to_le_bytes());
    }
    bytes
}

fn any_extra() -> impl Strategy<Value = String> {
    let scalar = prop_oneof![
        (any::<i32>(), 0u32..8).prop_map(|(m, d)| {
            let v = f64::from(m) / 10f64.powi(d as i32);
            serde_json::to_string(&v).unwrap()
        }),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| serde_json::to_string(&v).unwrap()),
        "[a-z0-9. é\"\\\\]{0,8}".prop_map(|s| serde_json::to_string(&s).unwrap()),
        Just("true".to_owned()),
        Just("null".to_owned()),
        Just("[1,{\"a\":2}]".to_owned()),
    ];
    prop_oneof![
        4 => prop::collection::btree_map("[a-z]{1,6}", scalar, 0..6).prop_map(|m| {
            let fields: Vec<String> =
                m.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            format!("{{{}}}", fields.join(","))
        }),
        1 => any::<String>(),
    ]
}

fn any_value() -> impl Strategy<Value = f64> {
    prop_oneof![
        (-100_000i64..100_000, 0u32..4).prop_map(|(m, d)| m as f64 / 10f64.powi(d as i32)),
        any::<u64>().prop_map(f64::from_bits),
        Just(-0.0),
        Just(f64::NAN),
    ]
}

fn any_points() -> impl Strategy<Value = Vec<Point>> {
    let ts = prop_oneof![
        1_796_400_000i64..1_796_403_600,
        any::<i64>(),
        Just(i64::MIN),
        Just(i64::MAX),
    ];
    prop::collection::vec(
        (
            prop::sample::select(vec!["dev00001", "dev00002", "dev1", "", "é", "dev00001x"]),
            ts,
            any_value(),
            any_extra(),
        )
            .prop_map(|(s, t, v, e)| point(s, t, v, &e)),
        0..200,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn chunks_round_trip(points in any_points()) {
        prop_assert_eq!(round_trip(&points), expected(&points));
    }

    #[test]
    fn random_bytes_are_errors(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        prop_assert!(decode(&bytes).is_err());
        for version in [1, FORMAT_VERSION] {
            let mut framed = MAGIC.to_vec();
            framed.push(version);
            framed.extend_from_slice(&bytes);
            // Past the checksums, any answer but a panic will do: random columns may parse.
            let _ = decode(&reseal(framed.clone()));
            let _ = decode(&reseal_v2(framed.clone()));
            let _ = decode_series(&reseal_v2(framed), "dev1", "dev1");
        }
    }

    #[test]
    fn damaged_columns_never_panic(
        points in any_points(),
        at in any::<prop::sample::Index>(),
        xor in 1u8..=255,
        cut in any::<prop::sample::Index>(),
    ) {
        // Version 1's framing: one checksum at the end, which `reseal` makes right.
        let bytes = encode_blocks(&points, usize::MAX).unwrap();
        let bytes = if points.is_empty() { bytes } else { as_version_1(&bytes) };
        let mut damaged = bytes.clone();
        let i = at.index(damaged.len() - 8);
        damaged[i] ^= xor;
        let _ = decode(&reseal(damaged));
        let truncated = bytes[..cut.index(bytes.len())].to_vec();
        let _ = decode(&reseal(truncated));
    }
}

// Version 2: blocks of whole series behind a directory.

/// `bytes` (version 2) with every block checksum and the header checksum made right again, so
/// the directory and column decoders see the damage; as it was if its directory does not parse.
fn reseal_v2(mut bytes: Vec<u8>) -> Vec<u8> {
    let Some((header_end, blocks)) = directory_of(&bytes) else {
        return bytes;
    };
    // Cut inside the header's checksum: nothing to make right.
    if header_end + 8 > bytes.len() {
        return bytes;
    }
    for (sum_at, range) in blocks {
        if range.end > bytes.len() || sum_at + 8 > header_end {
            return bytes;
        }
        let sum = xxh3_64(&bytes[range]);
        bytes[sum_at..sum_at + 8].copy_from_slice(&sum.to_le_bytes());
    }
    let sum = xxh3_64(&bytes[..header_end]);
    bytes[header_end..header_end + 8].copy_from_slice(&sum.to_le_bytes());
    bytes
}

/// Where a version 2 chunk's header ends (its checksum's offset) and, per block, the offset of
/// its checksum in the directory and its bytes.
#[allow(clippy::type_complexity)]
fn directory_of(bytes: &[u8]) -> Option<(usize, Vec<(usize, std::ops::Range<usize>)>)> {
    let head = MAGIC.len() + 1;
    let mut r = bytes::Reader::new(bytes.get(head..)?, "test");
    r.varint().ok()?;
    let count = r.varint().ok()?;
    let len = usize::try_from(r.varint().ok()?).ok()?;
    let directory_at = bytes.len() - r.remaining();
    let directory = r.take(len).ok()?;
    let header_end = bytes.len() - r.remaining();
    let mut at = header_end + 8;
    let mut d = bytes::Reader::new(directory, "test");
    let mut blocks = Vec::new();
    for _ in 0..count {
        d.varint().ok()?;
        d.section().ok()?;
        d.varint().ok()?;
        d.section().ok()?;
        d.varint().ok()?;
        let len = usize::try_from(d.varint().ok()?).ok()?;
        let sum_at = directory_at + directory.len() - d.remaining();
        d.take(8).ok()?;
        blocks.push((sum_at, at..at.checked_add(len)?));
        at += len;
    }
    Some((header_end, blocks))
}

/// A one-block version 2 chunk (of at least one reading) as version 1 wrote it: magic, 1, readings, the four sections,
/// the xxh3-64 of all before.
fn as_version_1(v2: &[u8]) -> Vec<u8> {
    let (_, blocks) = directory_of(v2).expect("a version 2 chunk");
    let mut r = bytes::Reader::new(&v2[MAGIC.len() + 1..], "test");
    let n = r.varint().unwrap();
    let mut out = MAGIC.to_vec();
    out.push(1);
    bytes::put_varint(&mut out, n);
    match blocks.as_slice() {
        [(_, range)] => out.extend_from_slice(&v2[range.clone()]),
        _ => panic!("not one block"),
    }
    let sum = xxh3_64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// The points of `points` of series `first..=last`, as [`decode_series`] must return them.
fn expected_series(points: &[Point], first: &str, last: &str) -> Vec<(String, i64, u64, String)> {
    expected(points)
        .into_iter()
        .filter(|p| p.0.as_str() >= first && p.0.as_str() <= last)
        .collect()
}

fn keys(points: &[Point]) -> Vec<(String, i64, u64, String)> {
    points.iter().map(key).collect()
}

/// The series ids of [`any_points`], and a few between and around them.
const IDS: [&str; 9] = [
    "",
    "dev0",
    "dev00001",
    "dev00001x",
    "dev00002",
    "dev1",
    "dev2",
    "é",
    "\u{10ffff}",
];

#[test]
fn blocks_hold_whole_series_of_about_the_block_size() {
    let p: Vec<Point> = (0..10_000)
        .map(|i| point(&format!("dev{:05}", i % 100), i, 1.0, &sensor_extra(i)))
        .collect();
    // 100 readings a series: a block is cut after the series that reaches 250, at 300.
    let bytes = encode_blocks(&p, 250).unwrap();
    assert_eq!(block_count(&bytes).unwrap(), 34);
    assert_eq!(keys(&decode(&bytes).unwrap()), expected(&p));
    for id in ["dev00000", "dev00042", "dev00099"] {
        assert_eq!(
            keys(&decode_series(&bytes, id, id).unwrap()),
            expected_series(&p, id, id)
        );
    }
    assert!(decode_series(&bytes, "dev000420", "dev000429")
        .unwrap()
        .is_empty());
    assert_eq!(block_count(&encode_blocks(&p, 0).unwrap()).unwrap(), 100);
    assert_eq!(
        block_count(&encode(&p).unwrap()).unwrap(),
        10_000_usize.div_ceil(BLOCK_POINTS.next_multiple_of(100)),
    );
    assert_eq!(block_count(&encode(&[]).unwrap()).unwrap(), 0);
}

#[test]
fn a_read_of_one_series_does_not_check_other_blocks() {
    let p: Vec<Point> = (0..600)
        .map(|i| point(&format!("d{}", i % 6), i, 2.5, "{}"))
        .collect();
    let bytes = encode_blocks(&p, 1).unwrap();
    let (_, blocks) = directory_of(&bytes).unwrap();
    assert_eq!(blocks.len(), 6);
    let mut damaged = bytes.clone();
    damaged[blocks[5].1.start] ^= 1;
    assert!(matches!(decode(&damaged), Err(Error::Corrupt(_))));
    assert!(matches!(
        decode_series(&damaged, "d5", "d5"),
        Err(Error::Corrupt(_))
    ));
    assert_eq!(
        keys(&decode_series(&damaged, "d0", "d4").unwrap()),
        expected_series(&p, "d0", "d4")
    );
}

#[test]
fn version_1_chunks_read_as_one_block() {
    let p: Vec<Point> = (0..500)
        .map(|i| point(&format!("d{}", i % 7), i, i as f64 / 4.0, &sensor_extra(i)))
        .collect();
    let v1 = as_version_1(&encode_blocks(&p, usize::MAX).unwrap());
    assert_eq!(v1[MAGIC.len()], 1);
    assert_eq!(block_count(&v1).unwrap(), 1);
    assert_eq!(keys(&decode(&v1).unwrap()), expected(&p));
    assert_eq!(
        keys(&decode_series(&v1, "d3", "d4").unwrap()),
        expected_series(&p, "d3", "d4")
    );
    let sizes = column_sizes(&v1).unwrap();
    assert_eq!(sizes.iter().map(|(_, b)| b).sum::<usize>(), v1.len());
    for at in 0..v1.len() {
        let mut damaged = v1.clone();
        damaged[at] ^= 0x10;
        assert!(decode(&damaged).is_err(), "byte {at} flipped");
    }
}

#[test]
fn damaged_blocked_chunks_are_errors() {
    let p: Vec<Point> = (0..500)
        .map(|i| point(&format!("d{}", i % 7), i, i as f64 / 4.0, &sensor_extra(i)))
        .collect();
    let bytes = encode_blocks(&p, 100).unwrap();
    assert!(block_count(&bytes).unwrap() > 2);
    let intact = keys(&decode_series(&bytes, "d2", "d3").unwrap());
    for len in 0..bytes.len() {
        assert!(decode(&bytes[..len]).is_err(), "truncated to {len}");
        assert!(
            decode_series(&bytes[..len], "d2", "d3").is_err(),
            "truncated to {len}"
        );
    }
    for at in 0..bytes.len() {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x10;
        assert!(decode(&damaged).is_err(), "byte {at} flipped");
        // A damaged block it does not read may go unseen; a wrong answer may not.
        if let Ok(got) = decode_series(&damaged, "d2", "d3") {
            assert_eq!(keys(&got), intact, "byte {at} flipped");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn blocked_chunks_round_trip_and_read_by_series(
        points in any_points(),
        block in prop_oneof![0usize..4, 4usize..300, Just(usize::MAX)],
        a in prop::sample::select(IDS.to_vec()),
        b in prop::sample::select(IDS.to_vec()),
    ) {
        let bytes = encode_blocks(&points, block).unwrap();
        prop_assert_eq!(keys(&decode(&bytes).unwrap()), expected(&points));
        let sizes = column_sizes(&bytes).unwrap();
        prop_assert_eq!(sizes.iter().map(|(_, b)| b).sum::<usize>(), bytes.len());
        let (first, last) = if a <= b { (a, b) } else { (b, a) };
        prop_assert_eq!(
            keys(&decode_series(&bytes, first, last).unwrap()),
            expected_series(&points, first, last)
        );
        prop_assert_eq!(
            keys(&decode_series(&bytes, a, a).unwrap()),
            expected_series(&points, a, a)
        );
        if block == usize::MAX && !points.is_empty() {
            let v1 = as_version_1(&bytes);
            prop_assert_eq!(keys(&decode(&v1).unwrap()), expected(&points));
            prop_assert_eq!(
                keys(&decode_series(&v1, first, last).unwrap()),
                expected_series(&points, first, last)
            );
        }
    }

    #[test]
    fn damaged_blocked_chunks_never_panic(
        points in any_points(),
        block in 0usize..50,
        at in any::<prop::sample::Index>(),
        xor in 1u8..=255,
        cut in any::<prop::sample::Index>(),
        id in prop::sample::select(IDS.to_vec()),
    ) {
        let bytes = encode_blocks(&points, block).unwrap();
        let mut damaged = bytes.clone();
        let i = at.index(damaged.len());
        damaged[i] ^= xor;
        let damaged = reseal_v2(damaged);
        let _ = decode(&damaged);
        let _ = decode_series(&damaged, id, id);
        let truncated = reseal_v2(bytes[..cut.index(bytes.len())].to_vec());
        let _ = decode(&truncated);
        let _ = decode_series(&truncated, id, id);
    }
}
