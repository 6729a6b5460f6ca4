//! The sensor job as the engine's driver runs it: its dataflow ([`graph::build`]) over the
//! readings, with the settings every process of a cluster must share.

use std::sync::Arc;
use std::time::Duration;

use operators::EventFeed;
use pipeline::driver::{Dataflow, Pace, Settings, WorkerParts};
use pipeline::source::Clock;
use pipeline::store::Backend;
use timely::dataflow::Scope;

use crate::config::JobConfig;
use crate::decode::Decoded;
use crate::graph::{self, GraphConfig, SideOutput};
use crate::room::PreviousView;
use crate::stats::SensorStats;
use crate::tables::ROOM_TABLE;
use crate::Result;

/// The sensor job: readings → narrow rows, hourly wide cells and the room view.
#[derive(Debug)]
pub struct SensorJob {
    graph: GraphConfig,
    settings: Settings,
    stats: Arc<SensorStats>,
}

impl SensorJob {
    /// The job `cfg` describes, paced as its source asks, continuing the room view a previous
    /// run left in `backend`, counting into `stats`.
    ///
    /// # Errors
    /// The stored room view cannot be read.
    pub fn new(
        cfg: &JobConfig,
        pace: Pace,
        backend: &Backend,
        stats: Arc<SensorStats>,
    ) -> Result<Self> {
        Ok(SensorJob {
            graph: GraphConfig {
                scheme: cfg.key_scheme,
                window: cfg.window,
                flush_every: pace.flush_every,
                flush_min_gap: pace.flush_min_gap,
                registry: cfg.registry_source(),
                previous_view: previous_view(backend)?,
                clock: Clock::start(),
                early_fire_past_hours: pace.early_fire_past_hours,
                room_write_interval: Duration::from_secs(cfg.room_write_interval_secs),
            },
            settings: vec![
                ("metric".into(), cfg.metric.clone()),
                ("key_scheme".into(), format!("{:?}", cfg.key_scheme)),
                (
                    "room_write_interval_secs".into(),
                    cfg.room_write_interval_secs.to_string(),
                ),
                (
                    "registry_topic".into(),
                    cfg.registry_topic.clone().unwrap_or_default(),
                ),
            ],
            stats,
        })
    }
}

impl Dataflow for SensorJob {
    type Item = Decoded;

    fn settings(&self) -> Settings {
        self.settings.clone()
    }

    fn build<F>(&self, scope: Scope<'_, u64>, worker: WorkerParts<'_, F>)
    where
        F: EventFeed<Item = Decoded> + 'static,
    {
        let side: Arc<dyn SideOutput> = worker.side;
        graph::build(
            scope,
            worker.feed,
            &self.graph,
            worker.writer,
            side,
            worker.stats,
            self.stats.clone(),
            worker.control,
            worker.probe,
        );
    }
}

/// The room view a previous run left in `backend` (see [`PreviousView`]), which a job continues
/// from; says so when there is one.
///
/// # Errors
/// The room view's table cannot be read.
pub fn previous_view(backend: &Backend) -> Result<PreviousView> {
    let view = PreviousView::read(&backend.reader()).map_err(|e| pipeline::Error::Context {
        what: format!(
            "reading the room view a previous run left in {} ({})",
            ROOM_TABLE,
            backend.location()
        ),
        source: Box::new(e),
    })?;
    if !view.is_empty() {
        tracing::info!(
            rows = view.len(),
            "room view: continuing from the stored rows"
        );
    }
    Ok(view)
}
