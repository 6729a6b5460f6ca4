//! The early-firing scenario, run over any backend: by `early_firing.rs` on the embedded store
//! and by `hbase_live.rs` on the live HBase. The dataflow runs in-process, fed by hand.
//!
//! While data is still arriving out of order, the open hour's wide row follows the narrow table
//! up to the watermark within an early-fire period, and its summary matches its cells; late data
//! (while the hour is open, and after its on-time firing) lands in the row with its summary.

use std::path::Path;
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use operators::{EventFeed, Poll};
use pipeline::config::WindowConfig;
use pipeline::control::JobControl;
use pipeline::stats::Stats;
use sensor::codec::narrow::KeyScheme;
use sensor::decode::Decoded;
use sensor::graph::{self, GraphConfig};
use sensor::query::{self, CurveSource};
use sensor::reading::Reading;
use sensor::summary::HourSummary;
use sinks::dead_letter::DeadLetters;
use sinks::table::{TableReader, TableWriter};
use timely::dataflow::ProbeHandle;

type Points = Vec<(i64, f64)>;

/// Makes the job's table writer (called once, on the job's worker).
pub type WriterFactory = Arc<dyn Fn() -> Box<dyn TableWriter> + Send + Sync>;

const BOUND: i64 = 30;
const DEVICE: &str = "dev1";

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

/// The running job. Dropping it ends the input and waits for the job, so a failing test leaves
/// nothing writing into the tables of the next one.
struct Job {
    tx: Option<Sender<Option<Reading>>>,
    thread: Option<JoinHandle<()>>,
}

impl Job {
    fn send(&self, r: Reading) {
        self.tx
            .as_ref()
            .expect("running")
            .send(Some(r))
            .expect("send");
    }

    /// Ends the input and waits for the job, failing the test if it failed.
    fn finish(mut self) {
        self.tx.take().expect("running").send(None).expect("send");
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("job thread");
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn start(h: i64, writer: WriterFactory, scratch: &Path) -> Job {
    let (tx, rx) = channel();
    let rx = Mutex::new(Some(rx));
    let cfg = GraphConfig {
        scheme: KeyScheme::Salted,
        window: WindowConfig {
            watermark_bound_secs: BOUND as u64,
            allowed_lateness_secs: 3600,
            early_fire_secs: 1,
            ..WindowConfig::default()
        },
        flush_every: Duration::from_millis(200),
        flush_min_gap: Duration::ZERO,
        registry: None,
        previous_view: Default::default(),
        // The wall clock in the hour, so that it fires early as for a live dashboard.
        clock: pipeline::source::Clock::at(h + 1800),
        early_fire_past_hours: false,
        room_write_interval: Duration::from_secs(10),
    };
    let side = Arc::new(DeadLetters::new(
        scratch.join("dead.jsonl"),
        scratch.join("late.jsonl"),
    ));
    let thread = std::thread::spawn(move || {
        timely::execute(timely::Config::thread(), move |worker| {
            let feed = Manual {
                rx: rx.lock().expect("lock").take().expect("one worker"),
                max_ts: 0,
            };
            let side: Arc<dyn sensor::graph::SideOutput> = side.clone();
            worker.dataflow::<u64, _, _>(|scope| {
                graph::build(
                    scope,
                    feed,
                    &cfg,
                    writer(),
                    side,
                    Arc::new(Stats::default()),
                    Arc::default(),
                    Arc::new(JobControl::default()),
                    &ProbeHandle::new(),
                );
            });
        })
        .expect("timely")
        .join()
        .into_iter()
        .for_each(|r| r.expect("worker"));
    });
    Job {
        tx: Some(tx),
        thread: Some(thread),
    }
}

fn reading(ts: i64, value: f64) -> Reading {
    Reading {
        device: DEVICE.into(),
        ts,
        value,
        extra: "{}".into(),
        room: None,
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

/// Runs the scenario on the hour starting at `h`: the job writes through `writer`, the test
/// reads the tables through `store`; `scratch` takes the job's side files.
pub fn open_hour_follows_the_narrow_table(
    h: i64,
    store: &dyn TableReader,
    writer: WriterFactory,
    scratch: &Path,
) {
    assert_eq!(h % 3600, 0, "{h} is not the start of an hour");
    let job = start(h, writer, scratch);
    let wait = Duration::from_secs(30);

    // Wide points of the hour that the watermark has passed vs the narrow table's.
    let hour_points = |upto: i64| -> (Points, Points) {
        let wide = query::hour(store, KeyScheme::Salted, DEVICE, h)
            .expect("hour")
            .points;
        let narrow = query::curve_points(
            store,
            KeyScheme::Salted,
            DEVICE,
            h,
            h + 3600,
            CurveSource::Narrow,
        )
        .expect("curve");
        let cut = |v: Points| v.into_iter().filter(|(ts, _)| *ts < upto).collect();
        (cut(wide), cut(narrow))
    };
    // Both tables hold every reading sent below `upto` (so that the comparison is not vacuous
    // while the narrow table lags too), and the wide row equals the narrow table.
    let caught_up = |sent: &[Reading], upto: i64| {
        let mut want: Points = sent
            .iter()
            .filter(|r| r.ts >= h && r.ts < upto.min(h + 3600))
            .map(|r| (r.ts, r.value))
            .collect();
        want.sort_by_key(|p| p.0);
        eventually(wait, || {
            let (wide, narrow) = hour_points(upto);
            narrow == want && wide == narrow
        })
    };
    // The row's summary is the recomputation from its cells.
    let summary_matches_cells = |when: &str| -> HourSummary {
        let hour = query::hour(store, KeyScheme::Salted, DEVICE, h).expect("hour");
        let summary = hour.summary.unwrap_or_else(|| panic!("{when}: no summary"));
        assert_eq!(
            Some(summary),
            HourSummary::of_points(&hour.points),
            "{when}: the summary differs from the recomputation from the row's cells"
        );
        summary
    };

    let deliver = |sent: &mut Vec<Reading>, r: Reading| {
        sent.push(r.clone());
        job.send(r);
    };

    let mut sent = Vec::new();
    for (round, range) in [(0..60), (60..120), (120..180)].into_iter().enumerate() {
        for i in range {
            // Out of order within each round: odd seconds first.
            let ts = h + i * 10 + if i % 2 == 0 { 0 } else { 3 };
            sent.push(reading(ts, i as f64));
        }
        let batch: Vec<Reading> = sent.iter().skip(round * 60).cloned().rev().collect();
        for r in batch {
            job.send(r);
        }
        let watermark = sent.iter().map(|r| r.ts).max().expect("sent") - BOUND;
        assert!(
            caught_up(&sent, watermark),
            "round {round}: the open hour's wide row did not catch up with the narrow table up \
             to {watermark}: {:?}",
            hour_points(watermark)
        );
        summary_matches_cells(&format!("round {round}"));
    }
    let watermark = sent.iter().map(|r| r.ts).max().expect("sent") - BOUND;

    // A late reading (behind the watermark, the hour still open) lands with its summary.
    deliver(&mut sent, reading(h + 1, -7.5));
    assert!(
        eventually(wait, || hour_points(watermark).0.contains(&(h + 1, -7.5))),
        "the late reading did not reach the open hour's wide row"
    );
    assert!(caught_up(&sent, watermark), "{:?}", hour_points(watermark));
    let summary = summary_matches_cells("after late data in the open hour");
    assert_eq!((summary.n, summary.min, summary.first), (181, -7.5, 0.0));

    // The watermark passes the hour's end: the on-time firing completes the row.
    deliver(&mut sent, reading(h + 3600 + BOUND + 10, 1.0));
    assert!(caught_up(&sent, h + 3600), "{:?}", hour_points(h + 3600));
    summary_matches_cells("after the on-time firing");

    // Late after the on-time firing, within the allowed lateness: written at once.
    deliver(&mut sent, reading(h + 2, 500.5));
    assert!(
        eventually(wait, || hour_points(h + 3600).0.contains(&(h + 2, 500.5))),
        "the reading late after the on-time firing did not reach the wide row"
    );
    assert!(caught_up(&sent, h + 3600), "{:?}", hour_points(h + 3600));
    let summary = summary_matches_cells("after late data past the on-time firing");
    assert_eq!((summary.n, summary.max), (182, 500.5));

    job.finish();
}
