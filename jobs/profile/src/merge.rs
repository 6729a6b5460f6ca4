//! The per-user merge: checked tag updates buffered per user and turned, at each flush, into
//! one put per user of `user_profile_tag`, a history put per change and the short-term values.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use sinks::table::{Cell, Mutation};

use crate::event::CellValue;
use crate::key::{history_row_salted, profile_row_salted, salt, SALT_LEN, SEPARATOR};
use crate::tables::{family_of, HISTORY_FAMILY, HISTORY_QUALIFIER, HISTORY_TABLE, PROFILE_TABLE};
use crate::tag::{TagDef, ValueType};

/// A map keyed by user ids or tag codes on the merge's path: foldhash, seeded per map, where
/// std's SipHash cost 2-3 % of a replay. The keys come from the input, but a buffer holds
/// a flush's users and a registry's codes, so a flood of colliding keys stays small.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
/// A set of [`FastMap`]'s kind.
pub(crate) type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// When the job flushes its merge buffer: part of the job's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MergeConfig {
    /// Flush once this many users are buffered (default 500): a flush writes one put per
    /// user, so this bounds a write batch and the buffer's memory.
    #[serde(default = "default_max_users")]
    pub max_users: usize,
    /// Flush at least this often, in milliseconds (default 250): the longest a value waits in
    /// the buffer before it is written, so a bound on how stale `profile get` is (issue 37
    /// asks < 1 s p99 from the producer's send). Only a buffer holding something is flushed on
    /// time, and a busy worker fills `max_users` first, so a short interval costs a replay
    /// nothing (docs/BENCHMARKS.md). The job keeps the clock; [`UserMerge`] only buffers.
    #[serde(default = "default_flush_interval_ms")]
    pub flush_interval_ms: u64,
}

const fn default_max_users() -> usize {
    500
}

const fn default_flush_interval_ms() -> u64 {
    250
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

/// A short-term tag's newest value in a flush, for Redis (`short-tags:{user}`), never HBase.
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

/// One buffered update: whose (an index into the flush's users), which tag (an index into the
/// interned codes), when, and what.
#[derive(Debug, Clone, PartialEq)]
struct Buffered {
    user: u32,
    code: u32,
    ts: i64,
    value: CellValue,
    value_type: ValueType,
    ttl_secs: Option<u64>,
}

/// The merge buffer: the updates of up to [`MergeConfig::max_users`] users, in arrival order.
///
/// Within a flush, the value of a (user, tag) written to `user_profile_tag` is the one with the
/// newest event time, not the last to arrive (Kafka partitions and retried producers deliver
/// out of order); of two with the same event time, the later arrival. Every distinct event
/// time of a (user, tag) is a change, written to `user_tag_history`. Across flushes the store
/// decides: each cell is stamped with its event time, and HBase shows the newest stamp (so does
/// the embedded store: the job opens it with `pipeline::store::open_for_merging`, whose writers
/// put each cell as a version keyed by its stamp, without a read, and whose reads show the
/// newest).
///
/// Built for a flush per 500 users: the updates are one vector sorted at the flush (no map per
/// user or tag), a user's id is stored once and its MD5 salt computed once per flush, tag codes
/// are interned, and the vectors keep their capacity from flush to flush.
#[derive(Debug, Default)]
pub struct UserMerge {
    config: MergeConfig,
    /// The buffered users: id -> index.
    users: FastMap<String, u32>,
    updates: Vec<Buffered>,
    /// Tag codes seen: code -> index into `code_names`. Kept across flushes (a registry has
    /// hundreds of codes); cleared when it grows past [`MAX_INTERNED_CODES`].
    codes: FastMap<String, u32>,
    code_names: Vec<String>,
    /// Scratch of a flush: the users' ids and salts by index, the updates' order.
    ids: Vec<String>,
    salts: Vec<[u8; SALT_LEN]>,
    order: Vec<(u32, u32, i64, u32)>,
}

/// Most codes [`UserMerge`] keeps interned between flushes.
const MAX_INTERNED_CODES: usize = 1 << 16;

impl UserMerge {
    /// An empty buffer flushed by `config`.
    pub fn new(config: MergeConfig) -> Self {
        UserMerge {
            config,
            ..UserMerge::default()
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &MergeConfig {
        &self.config
    }

    /// Buffers one update; returns whether the buffer is full ([`MergeConfig::max_users`]
    /// users), when the caller should [`flush`](UserMerge::flush).
    pub fn push(&mut self, update: TagUpdate) -> bool {
        self.push_update(
            &update.user,
            &update.code,
            update.ts,
            update.value,
            update.value_type,
            update.ttl_secs,
        )
    }

    /// [`push`](UserMerge::push) of the update of tag `def` to `value` for `user` at `ts`
    /// (epoch seconds), copying the user id and the code only the first time the buffer sees
    /// them.
    pub fn push_tag(&mut self, def: &TagDef, user: &str, ts: i64, value: CellValue) -> bool {
        self.push_update(user, &def.tag_code, ts, value, def.value_type, def.ttl_secs)
    }

    fn push_update(
        &mut self,
        user: &str,
        code: &str,
        ts: i64,
        value: CellValue,
        value_type: ValueType,
        ttl_secs: Option<u64>,
    ) -> bool {
        let user = match self.users.get(user) {
            Some(&index) => index,
            None => {
                let index = index_of(self.users.len());
                self.users.insert(user.to_string(), index);
                index
            }
        };
        let code = match self.codes.get(code) {
            Some(&index) => index,
            None => {
                let index = index_of(self.code_names.len());
                self.codes.insert(code.to_string(), index);
                self.code_names.push(code.to_string());
                index
            }
        };
        self.updates.push(Buffered {
            user,
            code,
            ts,
            value,
            value_type,
            ttl_secs,
        });
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
        let mut flushed = Flushed::default();
        self.flush_into(&mut flushed);
        flushed
    }

    /// [`flush`](UserMerge::flush) into `flushed`, which is cleared first: a caller that
    /// drains it keeps its vectors' capacity for the next flush.
    pub fn flush_into(&mut self, flushed: &mut Flushed) {
        let Flushed {
            mutations,
            short_term,
        } = flushed;
        mutations.clear();
        short_term.clear();
        let users = self.users.len();
        self.ids.clear();
        self.ids.resize_with(users, String::new);
        for (id, index) in self.users.drain() {
            self.ids[index as usize] = id;
        }
        self.salts.clear();
        self.salts.extend(self.ids.iter().map(|id| salt(id)));
        // Users in the order of their history rows, `<salt>_<user>_…`: as user ids hold no
        // `_`, that is the order of `<salt><user>_`.
        let (ids, salts) = (&self.ids, &self.salts);
        let mut by_history: Vec<u32> = (0..index_of(users)).collect();
        by_history.sort_unstable_by(|&a, &b| {
            let (a, b) = (a as usize, b as usize);
            salts[a].cmp(&salts[b]).then_with(|| {
                let a = ids[a].as_bytes().iter().chain(&[SEPARATOR]);
                a.cmp(ids[b].as_bytes().iter().chain(&[SEPARATOR]))
            })
        });
        let mut rank = vec![0u32; users];
        for (r, &user) in by_history.iter().enumerate() {
            rank[user as usize] = index_of(r);
        }
        // Each (user, tag)'s updates together, by event time, then arrival.
        self.order.clear();
        self.order.extend(
            self.updates
                .iter()
                .enumerate()
                .map(|(arrival, u)| (rank[u.user as usize], u.code, u.ts, index_of(arrival))),
        );
        self.order.sort_unstable();

        let mut profile: Vec<Mutation> = Vec::with_capacity(users);
        let mut cells: Vec<Cell> = Vec::new();
        let mut user_start = 0;
        let order = &self.order;
        while user_start < order.len() {
            let user_rank = order[user_start].0;
            let user_end = user_start
                + order[user_start..]
                    .iter()
                    .position(|o| o.0 != user_rank)
                    .unwrap_or(order.len() - user_start);
            let user = self.updates[order[user_start].3 as usize].user as usize;
            let (id, salt) = (&self.ids[user], &self.salts[user]);
            let history_start = mutations.len();
            for tag in order[user_start..user_end].chunk_by(|a, b| a.1 == b.1) {
                let code = &self.code_names[tag[0].1 as usize];
                let newest = &mut self.updates[tag[tag.len() - 1].3 as usize];
                let ts = newest.ts;
                let Some(family) = family_of(newest.value_type) else {
                    short_term.push(ShortTermValue {
                        user: id.clone(),
                        code: code.clone(),
                        ts,
                        value: std::mem::replace(&mut newest.value, CellValue::Boolean(false)),
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
                // A change per event time, its last arrival's value, the newest first.
                for change in tag.chunk_by(|a, b| a.2 == b.2).rev() {
                    let buffered = &self.updates[change[change.len() - 1].3 as usize];
                    let ts_ms = buffered.ts.saturating_mul(1000);
                    mutations.push(Mutation::Put {
                        table: HISTORY_TABLE,
                        row: history_row_salted(salt, id, code, ts_ms),
                        cells: vec![Cell {
                            family: HISTORY_FAMILY.to_string(),
                            qualifier: HISTORY_QUALIFIER.to_vec(),
                            ts_ms,
                            value: buffered.value.to_cell(),
                        }],
                    });
                }
            }
            // Codes may hold `_`, so within a user the rows' order is not the codes' order.
            mutations[history_start..].sort_unstable_by(|a, b| a.row().cmp(b.row()));
            if !cells.is_empty() {
                // Moved into a vector of their number; `cells` keeps its capacity.
                let mut row_cells = Vec::with_capacity(cells.len());
                row_cells.append(&mut cells);
                row_cells.sort_unstable_by(|a, b| {
                    (&a.family, &a.qualifier).cmp(&(&b.family, &b.qualifier))
                });
                profile.push(Mutation::Put {
                    table: PROFILE_TABLE,
                    row: profile_row_salted(salt, id),
                    cells: row_cells,
                });
            }
            user_start = user_end;
        }
        self.updates.clear();
        if self.code_names.len() > MAX_INTERNED_CODES {
            self.codes.clear();
            self.code_names.clear();
        }
        short_term.sort_unstable_by(|a, b| (&a.user, &a.code).cmp(&(&b.user, &b.code)));
        profile.sort_unstable_by(|a, b| a.row().cmp(b.row()));
        mutations.splice(0..0, profile);
    }
}

/// A position as a `u32` index: a flush holds far fewer than 2^32 users, codes or updates.
fn index_of(position: usize) -> u32 {
    u32::try_from(position).expect("a merge buffer holds fewer than 2^32 updates")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use std::collections::BTreeMap;

    use super::*;
    use crate::key::{history_row, parse_history_row, profile_row};
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
        assert_eq!((c.max_users, c.flush_interval_ms), (100, 250));
        assert!(toml::from_str::<MergeConfig>("max_user = 1").is_err());
    }

    /// Codes of the property test: each value type, and `beh_b_x`, which extends `beh_b` by
    /// `_…`, so that the prefix of one code's history rows starts the other's.
    const CODES: [(&str, ValueType); 4] = [
        ("beh_b", ValueType::Statistic),
        ("beh_b_x", ValueType::Dimension),
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
