//! For random readings and ranges, `query::curve` over the embedded store returns exactly the
//! readings with `from <= ts < to`, oldest first, for both key schemes.

use std::collections::BTreeMap;

use proptest::prelude::*;
use sensor::codec::narrow::narrow_put;
use sensor::codec::narrow::KeyScheme;
use sensor::query;
use sensor::reading::Reading;
use sensor::tables::all_tables;
use sinks::embedded::EmbeddedStore;
use sinks::table::TableWriter;

const NOW_MS: i64 = 1_724_200_000_000;
const BASE: i64 = 1_724_100_000;

fn devices() -> impl Strategy<Value = String> {
    // Few ids, some prefixes of others, so ranges of neighbours are exercised.
    prop::sample::select(vec!["d", "d1", "d1.x", "d:2", "dev-9", "D"]).prop_map(str::to_string)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn curve_returns_exactly_the_range(
        salted in any::<bool>(),
        readings in prop::collection::vec((devices(), 0i64..20_000, -50i32..50), 1..120),
        queries in prop::collection::vec((devices(), 0i64..21_000, 0i64..8_000), 1..8),
    ) {
        let scheme = if salted { KeyScheme::Salted } else { KeyScheme::Plain };
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open_with_clock(dir.path(), &all_tables(), std::sync::Arc::new(|| NOW_MS)).unwrap();
        let mut writer = store.writer();
        // Model: the last write of a (device, ts) wins, as in the store.
        let mut model: BTreeMap<(String, i64), f64> = BTreeMap::new();
        for (device, offset, v) in &readings {
            let r = Reading { device: device.clone(), ts: BASE + offset, value: f64::from(*v) / 2.0, extra: "{}".into(), room: None };
            model.insert((r.device.clone(), r.ts), r.value);
            writer.write(vec![narrow_put(scheme, &r)]).unwrap();
        }
        writer.flush().unwrap();
        for (device, from, len) in &queries {
            let (from, to) = (BASE + from, BASE + from + len);
            let got: Vec<(i64, f64)> = query::curve(&store, scheme, device, from, to)
                .unwrap()
                .into_iter()
                .map(|r| { assert_eq!(&r.device, device); (r.ts, r.value) })
                .collect();
            let want: Vec<(i64, f64)> = model
                .range((device.clone(), from)..(device.clone(), to))
                .map(|((_, ts), v)| (*ts, *v))
                .collect();
            prop_assert_eq!(got, want);
        }
    }
}
