//! The bounded timely job: each worker walks its share of the wide table's key ranges (or of
//! the devices asked for), one device per activation, and emits the device's month.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};

use crate::Result;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::capture::{Capture, Event};
use timely::dataflow::operators::generic::operator::source;

use super::figures::{device_month, MonthFigures, Window};
use super::read::{read_device, split_keys, DeviceWalk};
use crate::codec::narrow::KeyScheme;
use sinks::Reader;

/// Key ranges per worker: more ranges than workers evens out ranges of unequal size.
const RANGES_PER_WORKER: usize = 4;

/// Which devices the job reads.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Every device of the table, found by walking its keys.
    All,
    /// These devices.
    Devices(Vec<String>),
}

/// What the job computed.
#[derive(Debug, Default)]
pub struct JobOutput {
    /// Per device with rows in the month.
    pub devices: Vec<MonthFigures>,
    /// Wide rows read.
    pub rows: u64,
    /// Keys of rows that are no hour the window wrote.
    pub bad: Vec<String>,
}

/// A worker's share of the work.
enum Work {
    Ranges(Vec<DeviceWalk>),
    Devices(std::vec::IntoIter<String>),
}

/// Runs the job on `workers` timely workers in this process.
///
/// # Errors
/// The first store error a worker met, or a worker's failure.
pub fn run(
    reader: Reader,
    scope: Scope,
    window: Window,
    room_of: HashMap<String, String>,
    workers: usize,
    scheme: KeyScheme,
) -> Result<JobOutput> {
    let ranges = match &scope {
        Scope::All => {
            let splits = split_keys(&reader, workers * RANGES_PER_WORKER)?;
            let mut bounds = vec![Vec::new()];
            bounds.extend(splits);
            let ends = bounds.iter().skip(1).cloned().chain([Vec::new()]);
            bounds.clone().into_iter().zip(ends).collect::<Vec<_>>()
        }
        Scope::Devices(_) => Vec::new(),
    };
    let rows = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(Mutex::new(Vec::new()));
    let error: Arc<Mutex<Option<crate::Error>>> = Arc::new(Mutex::new(None));
    let room_of = Arc::new(room_of);
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let shared = (rows.clone(), bad.clone(), error.clone());
    let guards = timely::execute(timely::Config::process(workers), move |worker| {
        let (index, peers) = (worker.index(), worker.peers());
        let mut work = match &scope {
            Scope::All => Work::Ranges(
                ranges
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| i % peers == index)
                    .map(|(_, (a, b))| DeviceWalk::new(a.clone(), b.clone()))
                    .collect(),
            ),
            Scope::Devices(devices) => Work::Devices(
                devices
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| i % peers == index)
                    .map(|(_, d)| d.clone())
                    .collect::<Vec<_>>()
                    .into_iter(),
            ),
        };
        let tx = tx.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let reader = reader.clone();
        let room_of = room_of.clone();
        let (rows, bad, error) = shared.clone();
        worker.dataflow::<u64, _, _>(move |scope| {
            let months = source::<_, CapacityContainerBuilder<Vec<MonthFigures>>, _, _>(
                scope,
                "ReportRead",
                move |cap, info| {
                    let activator = scope.activator_for(info.address);
                    let mut cap = Some(cap);
                    move |output| {
                        let Some(c) = cap.as_ref() else { return };
                        let mut keys = Vec::new();
                        let next = match &mut work {
                            Work::Devices(it) => Ok(it.next()),
                            Work::Ranges(walks) => loop {
                                let Some(walk) = walks.last_mut() else {
                                    break Ok(None);
                                };
                                match walk.next_device(&reader, &mut keys) {
                                    Ok(Some(d)) => break Ok(Some(d)),
                                    Ok(None) => {
                                        walks.pop();
                                    }
                                    Err(e) => break Err(e),
                                }
                            },
                        };
                        let read = next.and_then(|d| {
                            d.map(|d| {
                                read_device(
                                    &reader,
                                    scheme,
                                    &d,
                                    window.month_start,
                                    window.month_end,
                                )
                            })
                            .transpose()
                        });
                        match read {
                            Ok(Some(dev)) => {
                                rows.fetch_add(dev.rows, Ordering::Relaxed);
                                keys.extend(dev.bad);
                                let room = room_of.get(&dev.device).map_or("", String::as_str);
                                if let Some(m) = device_month(&dev.device, room, dev.hours, &window)
                                {
                                    output.session(c).give(m);
                                }
                                activator.activate();
                            }
                            Ok(None) => cap = None,
                            Err(e) => {
                                let mut slot = error.lock().unwrap_or_else(PoisonError::into_inner);
                                slot.get_or_insert(e);
                                cap = None;
                            }
                        }
                        if !keys.is_empty() {
                            bad.lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .extend(keys);
                        }
                    }
                },
            );
            months.capture_into(tx);
        });
    })
    .map_err(|e| failed!("starting the report's workers: {e}"))?;
    for r in guards.join() {
        r.map_err(|e| failed!("a report worker failed: {e}"))?;
    }
    if let Some(e) = error.lock().unwrap_or_else(PoisonError::into_inner).take() {
        return Err(pipeline::Error::Context {
            what: "reading the hourly wide rows".into(),
            source: Box::new(e),
        }
        .into());
    }
    // Every worker has finished: the channel holds all that was sent.
    let devices = rx
        .try_iter()
        .flat_map(|event| match event {
            Event::Messages(_, data) => data,
            Event::Progress(_) => Vec::new(),
        })
        .collect();
    let mut bad = std::mem::take(&mut *bad.lock().unwrap_or_else(PoisonError::into_inner));
    bad.sort();
    Ok(JobOutput {
        devices,
        rows: rows.load(Ordering::Relaxed),
        bad,
    })
}
