//! While data is still arriving, the open hour's wide row follows the narrow table up to the
//! watermark within one early-fire period, and its summary matches its cells — also after late
//! data. Runs the dataflow in-process over the embedded store, feeding it by hand.

use std::sync::mpsc::{channel, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use operators::{EventFeed, Poll};
use pipeline::config::WindowConfig;
use pipeline::control::JobControl;
use pipeline::feed::Decoded;
use pipeline::graph::{self, GraphConfig};
use pipeline::query::{self, CurveSource};
use pipeline::reading::Reading;
use pipeline::rowkey::KeyScheme;
use pipeline::schema::all_tables;
use pipeline::stats::Stats;
use pipeline::summary::HourSummary;
use sinks::dead_letter::DeadLetters;
use sinks::embedded::EmbeddedStore;

const H: i64 = 1_724_101_200;

type Points = Vec<(i64, f64)>;
const BOUND: i64 = 30;

/// A feed driven by the test: readings from a channel, watermark = newest ts − bound.
struct Manual {
    rx: Receiver<Option<Reading>>,
    max_ts: i64,
}

impl EventFeed for Manual {
    type Item = Decoded;
    fn poll(&mut self) -> Poll<Decoded> {
        match self.rx.try_recv() {
            Ok(Some(r)) => {
                self.max_ts = self.max_ts.max(r.ts);
                Poll::Ready(Ok(r))
            }
            Ok(None) | Err(TryRecvError::Disconnected) => Poll::Done,
            Err(TryRecvError::Empty) => Poll::Pending(Duration::from_millis(20)),
        }
    }
    fn watermark(&self) -> u64 {
        (self.max_ts - BOUND).max(0) as u64
    }
}

fn reading(ts: i64, value: f64) -> Reading {
    Reading {
        device: "dev1".into(),
        ts,
        value,
        extra: "{}".into(),
    }
}

/// Waits until `check` holds, for at most `limit` (a bound on waiting, not a speed assertion).
fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    check()
}

#[test]
fn open_hour_follows_the_narrow_table_after_each_early_firing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        EmbeddedStore::open_with_clock(dir.path(), &all_tables(), Arc::new(|| 1_724_200_000_000))
            .expect("open");
    let (tx, rx) = channel();
    let rx = std::sync::Mutex::new(Some(rx));
    let job_store = store.clone();
    let cfg = GraphConfig {
        scheme: KeyScheme::Salted,
        window: WindowConfig {
            watermark_bound_secs: BOUND as u64,
            allowed_lateness_secs: 3600,
            early_fire_secs: 1,
        },
        flush_every: Duration::from_millis(200),
        registry: None,
    };
    let side = Arc::new(DeadLetters::new(
        dir.path().join("dead.jsonl"),
        dir.path().join("late.jsonl"),
    ));
    let job = std::thread::spawn(move || {
        timely::execute(timely::Config::thread(), move |worker| {
            let feed = Manual {
                rx: rx.lock().expect("lock").take().expect("one worker"),
                max_ts: 0,
            };
            let side: Arc<dyn pipeline::graph::SideOutput> = side.clone();
            worker.dataflow::<u64, _, _>(|scope| {
                graph::build(
                    scope,
                    feed,
                    &cfg,
                    Box::new(job_store.writer()),
                    side,
                    Arc::new(Stats::default()),
                    Arc::new(JobControl::default()),
                );
            });
        })
        .expect("timely")
        .join()
        .into_iter()
        .for_each(|r| r.expect("worker"));
    });

    // Wide points of the open hour that the watermark has passed vs the narrow table's.
    let hour_points = |upto: i64| -> (Points, Points) {
        let wide = query::hour(&store, "dev1", H).expect("hour").points;
        let narrow = query::curve_points(
            &store,
            KeyScheme::Salted,
            "dev1",
            H,
            H + 3600,
            CurveSource::Narrow,
        )
        .expect("curve");
        let cut = |v: Vec<(i64, f64)>| {
            v.into_iter()
                .filter(|(ts, _)| *ts < upto)
                .collect::<Vec<_>>()
        };
        (cut(wide), cut(narrow))
    };

    let mut sent = Vec::new();
    for (round, range) in [(0..60), (60..120), (120..180)].into_iter().enumerate() {
        for i in range {
            // Out of order within each round: odd seconds first.
            let ts = H + i * 10 + if i % 2 == 0 { 0 } else { 3 };
            sent.push(reading(ts, i as f64));
        }
        let batch: Vec<Reading> = sent.iter().skip(round * 60).cloned().rev().collect();
        for r in batch {
            tx.send(Some(r)).expect("send");
        }
        let watermark = sent.iter().map(|r| r.ts).max().expect("sent") - BOUND;
        assert!(
            eventually(Duration::from_secs(30), || {
                let (wide, narrow) = hour_points(watermark);
                !narrow.is_empty() && wide == narrow
            }),
            "round {round}: the open hour's wide row did not catch up with the narrow table up to {watermark}"
        );
        // The row's summary matches its cells.
        let hour = query::hour(&store, "dev1", H).expect("hour");
        assert_eq!(
            hour.summary,
            HourSummary::of_points(&hour.points),
            "round {round}"
        );
    }

    // A late reading (behind the watermark, within the allowed lateness) lands with its summary.
    tx.send(Some(reading(H + 1, -7.5))).expect("send");
    assert!(eventually(Duration::from_secs(30), || {
        query::hour(&store, "dev1", H)
            .expect("hour")
            .points
            .contains(&(H + 1, -7.5))
    }));
    let hour = query::hour(&store, "dev1", H).expect("hour");
    let summary = hour.summary.expect("summary");
    assert_eq!(Some(summary), HourSummary::of_points(&hour.points));
    assert_eq!((summary.min, summary.first), (-7.5, 0.0));

    tx.send(None).expect("send");
    job.join().expect("job thread");
}
