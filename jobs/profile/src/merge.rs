//! The per-user merge: checked tag updates buffered per user and turned, at each flush, into
//! one put per user of `user_profile_tag`, a history put per change and the short-term values.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use sinks::table::{Cell, Mutation};

use crate::event::CellValue;
use crate::key::{history_row, profile_row};
use crate::tables::{family_of, HISTORY_FAMILY, HISTORY_QUALIFIER, HISTORY_TABLE, PROFILE_TABLE};
use crate::tag::{TagDef, ValueType};

/// When the job flushes its merge buffer: part of the job's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MergeConfig {
    /// Flush once this many users are buffered (default 500): a flush writes one put per
    /// user, so this bounds a write batch and the buffer's memory.
    #[serde(default = "default_max_users")]
    pub max_users: usize,
    /// Flush at least this often, in milliseconds (default 5,000): the longest a value waits
    /// before it is readable. The job keeps the clock; [`UserMerge`] only buffers.
    #[serde(default = "default_flush_interval_ms")]
    pub flush_interval_ms: u64,
}

const fn default_max_users() -> usize {
    500
}

const fn default_flush_interval_ms() -> u64 {
    5_000
}

impl Default for MergeConfig {
    fn default() -> Self {
        MergeConfig {
            max_users: default_max_users(),
            flush_interval_ms: default_flush_interval_ms(),
        }
    }
}

/// One checked tag value of one user at one event time.
#[derive(Debug, Clone, PartialEq)]
pub struct TagUpdate {
    /// The user id (valid by [`crate::key::validate_user_id`]).
    pub user: String,
    /// The tag's code.
    pub code: String,
    /// Event time, epoch seconds.
    pub ts: i64,
    /// The checked value ([`crate::event::check_tag`]).
    pub value: CellValue,
    /// The tag's value type: which family, or Redis, the value goes to.
    pub value_type: ValueType,
    /// A short-term tag's time to live, in seconds.
    pub ttl_secs: Option<u64>,
}

impl TagUpdate {
    /// The update of tag `def` to `value` for `user` at `ts` (epoch seconds).
    pub fn new(def: &TagDef, user: &str, ts: i64, value: CellValue) -> Self {
        TagUpdate {
            user: user.to_string(),
            code: def.tag_code.clone(),
            ts,
            value,
            value_type: def.value_type,
            ttl_secs: def.ttl_secs,
        }
    }
}

/// A short-term tag's newest value in a flush, for Redis (`short:{user}:{code}`), never HBase.
#[derive(Debug, Clone, PartialEq)]
pub struct ShortTermValue {
    /// The user id.
    pub user: String,
    /// The tag's code.
    pub code: String,
    /// Event time, epoch seconds.
    pub ts: i64,
    /// The value ([`CellValue::to_json`] is what Redis stores).
    pub value: CellValue,
    /// Time to live, seconds (the tag's `ttl_secs`; 0 if the update had none).
    pub ttl_secs: u64,
}

/// What one flush writes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Flushed {
    /// One put of `user_profile_tag` per user with a dimension or statistic tag, ordered by
    /// row key, then one put of `user_tag_history` per change, ordered by row key.
    pub mutations: Vec<Mutation>,
    /// The short-term tags' newest values, ordered by user and code.
    pub short_term: Vec<ShortTermValue>,
}

/// A value buffered for one (user, tag, event time).
#[derive(Debug, Clone, PartialEq)]
struct Buffered {
    value: CellValue,
    value_type: ValueType,
    ttl_secs: Option<u64>,
}

/// The merge buffer: per user, per tag, the values by event time.
///
/// Within a flush, the value of a (user, tag) written to `user_profile_tag` is the one with the
/// newest event time, not the last to arrive (Kafka partitions and retried producers deliver
/// out of order); of two with the same event time, the later arrival. Every distinct event
/// time of a (user, tag) is a change, written to `user_tag_history`. Across flushes the store
/// decides: each cell is stamped with its event time, and HBase shows the newest stamp (so does
/// the embedded store: the job opens it with `pipeline::store::open_for_merging`, whose writers
/// keep the newest stamp of a one-version family too, at a read per cell).
#[derive(Debug, Default)]
pub struct UserMerge {
    config: MergeConfig,
    users: HashMap<String, BTreeMap<String, BTreeMap<i64, Buffered>>>,
}

impl UserMerge {
    /// An empty buffer flushed by `config`.
    pub fn new(config: MergeConfig) -> Self {
        UserMerge {
            config,
            users: HashMap::new(),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &MergeConfig {
        &self.config
    }

    /// Buffers one update; returns whether the buffer is full ([`MergeConfig::max_users`]
    /// users), when the caller should [`flush`](UserMerge::flush).
    pub fn push(&mut self, update: TagUpdate) -> bool {
        let TagUpdate {
            user,
            code,
            ts,
            value,
            value_type,
            ttl_secs,
        } = update;
        self.users
            .entry(user)
            .or_default()
            .entry(code)
            .or_default()
            .insert(
                ts,
                Buffered {
                    value,
                    value_type,
                    ttl_secs,
                },
            );
        self.is_full()
    }

    /// Whether [`MergeConfig::max_users`] users are buffered.
    pub fn is_full(&self) -> bool {
        self.users.len() >= self.config.max_users
    }

    /// Users buffered.
    pub fn users(&self) -> usize {
        self.users.len()
    }

    /// Whether nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Empties the buffer into what to write ([`Flushed`]).
    pub fn flush(&mut self) -> Flushed {
        let mut users: Vec<_> = self
            .users
            .drain()
            .map(|(user, tags)| (profile_row(&user), user, tags))
            .collect();
        users.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut profile = Vec::with_capacity(users.len());
        let mut history = Vec::new();
        let mut short_term = Vec::new();
        for (row, user, tags) in users {
            let mut cells = Vec::with_capacity(tags.len());
            for (code, by_ts) in tags {
                let Some((&ts, newest)) = by_ts.last_key_value() else {
                    continue;
                };
                let Some(family) = family_of(newest.value_type) else {
                    short_term.push(ShortTermValue {
                        user: user.clone(),
                        code,
                        ts,
                        value: newest.value.clone(),
                        ttl_secs: newest.ttl_secs.unwrap_or(0),
                    });
                    continue;
                };
                cells.push(Cell {
                    family: family.to_string(),
                    qualifier: code.as_bytes().to_vec(),
                    ts_ms: ts.saturating_mul(1000),
                    value: newest.value.to_cell(),
                });
                for (ts, buffered) in by_ts {
                    let ts_ms = ts.saturating_mul(1000);
                    history.push(Mutation::Put {
                        table: HISTORY_TABLE,
                        row: history_row(&user, &code, ts_ms),
                        cells: vec![Cell {
                            family: HISTORY_FAMILY.to_string(),
                            qualifier: HISTORY_QUALIFIER.to_vec(),
                            ts_ms,
                            value: buffered.value.to_cell(),
                        }],
                    });
                }
            }
            if !cells.is_empty() {
                cells.sort_unstable_by(|a, b| {
                    (&a.family, &a.qualifier).cmp(&(&b.family, &b.qualifier))
                });
                profile.push(Mutation::Put {
                    table: PROFILE_TABLE,
                    row,
                    cells,
                });
            }
        }
        short_term.sort_unstable_by(|a, b| (&a.user, &a.code).cmp(&(&b.user, &b.code)));
        history.sort_unstable_by(|a, b| a.row().cmp(b.row()));
        profile.extend(history);
        Flushed {
            mutations: profile,
            short_term,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::key::parse_history_row;
    use crate::tables::{BEHAVIOR_FAMILY, DIMENSION_FAMILY};

    fn update(user: &str, code: &str, value_type: ValueType, ts: i64, v: i64) -> TagUpdate {
        TagUpdate {
            user: user.into(),
            code: code.into(),
            ts,
            value: CellValue::Int(v),
            value_type,
            ttl_secs: (value_type == ValueType::ShortTerm).then_some(3600),
        }
    }

    fn puts(mutations: &[Mutation], table: &str) -> Vec<(Vec<u8>, Vec<Cell>)> {
        mutations
            .iter()
            .filter(|m| m.table() == table)
            .map(|m| match m {
                Mutation::Put { row, cells, .. } => (row.clone(), cells.clone()),
                other => panic!("a merge writes puts only: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn the_newest_event_wins_not_the_last_arrival() {
        let mut merge = UserMerge::new(MergeConfig::default());
        merge.push(update("10086", "beh_buy_30d", ValueType::Statistic, 200, 5));
        merge.push(update("10086", "beh_buy_30d", ValueType::Statistic, 100, 4)); // late
        merge.push(update("10086", "dim_city", ValueType::Dimension, 50, 1));
        merge.push(update("10086", "dim_city", ValueType::Dimension, 50, 2)); // tie: later wins
        merge.push(update("10086", "rt_last_cat", ValueType::ShortTerm, 10, 9));
        merge.push(update("10086", "rt_last_cat", ValueType::ShortTerm, 30, 8));
        assert_eq!(merge.users(), 1);
        let flushed = merge.flush();
        assert!(merge.is_empty());

        let profile = puts(&flushed.mutations, PROFILE_TABLE);
        assert_eq!(profile.len(), 1, "one put per user");
        let (row, cells) = &profile[0];
        assert_eq!(row, b"641210086");
        let cell = |family: &str, q: &str, ts_ms: i64, v: &str| Cell {
            family: family.into(),
            qualifier: q.as_bytes().to_vec(),
            ts_ms,
            value: v.as_bytes().to_vec(),
        };
        assert_eq!(
            *cells,
            vec![
                cell(BEHAVIOR_FAMILY, "beh_buy_30d", 200_000, "5"),
                cell(DIMENSION_FAMILY, "dim_city", 50_000, "2"),
            ]
        );

        let history = puts(&flushed.mutations, HISTORY_TABLE);
        let changes: Vec<_> = history
            .iter()
            .map(|(row, cells)| {
                let (user, code, ts_ms) = parse_history_row(row).unwrap();
                assert_eq!(cells.len(), 1);
                (
                    user.to_string(),
                    code.to_string(),
                    ts_ms,
                    cells[0].value.clone(),
                )
            })
            .collect();
        let change = |code: &str, ts_ms: i64, v: &str| {
            (
                "10086".to_string(),
                code.to_string(),
                ts_ms,
                v.as_bytes().to_vec(),
            )
        };
        assert_eq!(
            changes,
            vec![
                change("beh_buy_30d", 200_000, "5"),
                change("beh_buy_30d", 100_000, "4"),
                change("dim_city", 50_000, "2"),
            ],
            "one row per change, newest first, short-term tags none"
        );
        assert_eq!(
            flushed.short_term,
            vec![ShortTermValue {
                user: "10086".into(),
                code: "rt_last_cat".into(),
                ts: 30,
                value: CellValue::Int(8),
                ttl_secs: 3600,
            }]
        );
        assert_eq!(
            merge.flush(),
            Flushed::default(),
            "a flush empties the buffer"
        );
    }

    #[test]
    fn full_at_max_users_and_configurable() {
        let mut merge = UserMerge::new(MergeConfig {
            max_users: 3,
            flush_interval_ms: 10,
        });
        assert!(!merge.push(update("a", "c", ValueType::Dimension, 1, 1)));
        assert!(
            !merge.push(update("a", "d", ValueType::Dimension, 1, 1)),
            "same user"
        );
        assert!(!merge.push(update("b", "c", ValueType::Dimension, 1, 1)));
        assert!(merge.push(update("c", "c", ValueType::Dimension, 1, 1)));
        assert_eq!(puts(&merge.flush().mutations, PROFILE_TABLE).len(), 3);
        assert!(!merge.is_full());

        assert_eq!(UserMerge::default().config(), &MergeConfig::default());
        let c: MergeConfig = toml::from_str("max_users = 100").unwrap();
        assert_eq!((c.max_users, c.flush_interval_ms), (100, 5_000));
        assert!(toml::from_str::<MergeConfig>("max_user = 1").is_err());
    }

    /// Codes of the property test: one of each value type.
    const CODES: [(&str, ValueType); 3] = [
        ("beh_b", ValueType::Statistic),
        ("dim_a", ValueType::Dimension),
        ("rt_c", ValueType::ShortTerm),
    ];

    /// What a flush must write, computed the obvious way from the arrival order: per
    /// (user, tag) the update with the greatest (event time, arrival index); per
    /// (user, tag, event time) the last arrival for the history.
    fn model(updates: &[TagUpdate]) -> Flushed {
        let mut newest: BTreeMap<(Vec<u8>, String), (i64, usize)> = BTreeMap::new();
        let mut changes: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
        for (i, u) in updates.iter().enumerate() {
            let slot = newest
                .entry((profile_row(&u.user), u.code.clone()))
                .or_insert((u.ts, i));
            if (u.ts, i) >= *slot {
                *slot = (u.ts, i);
            }
            if u.value_type != ValueType::ShortTerm {
                changes.insert(history_row(&u.user, &u.code, u.ts * 1000), i);
            }
        }
        let mut rows: BTreeMap<Vec<u8>, Vec<Cell>> = BTreeMap::new();
        let mut short_term = Vec::new();
        for ((row, code), (_, i)) in &newest {
            let u = &updates[*i];
            match family_of(u.value_type) {
                Some(family) => rows.entry(row.clone()).or_default().push(Cell {
                    family: family.to_string(),
                    qualifier: code.as_bytes().to_vec(),
                    ts_ms: u.ts * 1000,
                    value: u.value.to_cell(),
                }),
                None => short_term.push(ShortTermValue {
                    user: u.user.clone(),
                    code: code.clone(),
                    ts: u.ts,
                    value: u.value.clone(),
                    ttl_secs: 3600,
                }),
            }
        }
        short_term.sort_by(|a, b| (&a.user, &a.code).cmp(&(&b.user, &b.code)));
        let mut mutations = Vec::new();
        for (row, mut cells) in rows {
            cells.sort_by(|a, b| (&a.family, &a.qualifier).cmp(&(&b.family, &b.qualifier)));
            mutations.push(Mutation::Put {
                table: PROFILE_TABLE,
                row,
                cells,
            });
        }
        for (row, i) in changes {
            let u = &updates[i];
            mutations.push(Mutation::Put {
                table: HISTORY_TABLE,
                row,
                cells: vec![Cell {
                    family: HISTORY_FAMILY.into(),
                    qualifier: HISTORY_QUALIFIER.to_vec(),
                    ts_ms: u.ts * 1000,
                    value: u.value.to_cell(),
                }],
            });
        }
        Flushed {
            mutations,
            short_term,
        }
    }

    fn merged(updates: &[TagUpdate]) -> Flushed {
        let mut merge = UserMerge::new(MergeConfig {
            max_users: usize::MAX,
            ..MergeConfig::default()
        });
        for u in updates {
            merge.push(u.clone());
        }
        merge.flush()
    }

    fn updates() -> impl Strategy<Value = Vec<TagUpdate>> {
        // Few users, codes and times, so that (user, tag) and (user, tag, ts) repeat often.
        proptest::collection::vec((0..6u32, 0..CODES.len(), 0..5i64, any::<i64>()), 0..60).prop_map(
            |raw| {
                raw.into_iter()
                    .map(|(user, code, ts, v)| {
                        let (code, value_type) = CODES[code];
                        update(
                            &format!("{}", 10_000 + user),
                            code,
                            value_type,
                            1_796_500_000 + ts,
                            v,
                        )
                    })
                    .collect()
            },
        )
    }

    proptest! {
        #[test]
        fn any_arrival_order_merges_as_the_model(
            arrived in updates().prop_flat_map(|u| Just(u).prop_shuffle())
        ) {
            let flushed = merged(&arrived);
            prop_assert_eq!(&flushed, &model(&arrived));
            let users: std::collections::HashSet<_> = arrived
                .iter()
                .filter(|u| u.value_type != ValueType::ShortTerm)
                .map(|u| &u.user)
                .collect();
            prop_assert_eq!(puts(&flushed.mutations, PROFILE_TABLE).len(), users.len());
        }

        #[test]
        fn without_ties_the_order_does_not_matter(
            (unique, shuffled) in updates()
                .prop_map(|updates| {
                    // The first update of each (user, tag, ts) only: then no two tie.
                    let mut seen = std::collections::HashSet::new();
                    updates
                        .into_iter()
                        .filter(|u| seen.insert((u.user.clone(), u.code.clone(), u.ts)))
                        .collect::<Vec<_>>()
                })
                .prop_flat_map(|u| (Just(u.clone()), Just(u).prop_shuffle()))
        ) {
            prop_assert_eq!(merged(&shuffled), merged(&unique));
        }
    }
}
