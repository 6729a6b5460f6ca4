//! The server's connections: each one's activity, the set the accept loop evicts from at the
//! connection limit, and the open-file budget that holds them.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Open files kept out of the connection budget for the rest of the process: the embedded
/// store's table files (fjall caches up to 900 descriptors), its journal, the Kafka client's.
/// At most half the limit.
const FD_RESERVE: u64 = 1024;

/// A connection's state as the accept loop and its own task see it: when it last moved a byte,
/// how many of its requests are being answered, and since when it has been waiting for a
/// request's head.
#[derive(Debug)]
pub(super) struct Activity {
    pub(super) start: Instant,
    pub(super) last_ms: AtomicU64,
    pub(super) busy: AtomicUsize,
    /// Since when (ms after `start`) it has waited for a head: 0, or the end of its last answer.
    pub(super) waiting_ms: AtomicU64,
    /// Set by the accept loop to make room; the connection closes unless it is answering.
    pub(super) evict: tokio::sync::Notify,
    pub(super) evicting: AtomicBool,
}

impl Activity {
    pub(super) fn new() -> Self {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
            waiting_ms: AtomicU64::new(0),
            evict: tokio::sync::Notify::new(),
            evicting: AtomicBool::new(false),
        }
    }

    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(super) fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    pub(super) fn quiet_for(&self) -> Duration {
        self.start
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }

    pub(super) fn waiting_since(&self) -> Instant {
        self.start + Duration::from_millis(self.waiting_ms.load(Ordering::Relaxed))
    }
}

/// A request being answered: the idle clock stops meanwhile, and at its end both it and the
/// wait for the next head start.
pub(super) struct Busy(pub(super) Arc<Activity>);

impl Busy {
    pub(super) fn new(activity: Arc<Activity>) -> Self {
        activity.busy.fetch_add(1, Ordering::Relaxed);
        Busy(activity)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.waiting_ms.store(self.0.now_ms(), Ordering::Relaxed);
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The open connections, by the order they were accepted in.
#[derive(Debug, Default)]
pub(super) struct Connections {
    pub(super) next: AtomicU64,
    pub(super) open: Mutex<BTreeMap<u64, Arc<Activity>>>,
}

impl Connections {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Activity>>> {
        // The map stays consistent whatever panicked while holding it.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a connection; it stays listed until the returned guard drops.
    pub(super) fn register(self: &Arc<Self>, activity: Arc<Activity>) -> Listed {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, activity);
        Listed {
            connections: self.clone(),
            id,
        }
    }

    /// Asks the connection that has waited longest for a request's head (and is neither being
    /// answered nor already asked) to close; false if there is none.
    pub(super) fn evict_longest_waiting(&self) -> bool {
        let open = self.lock();
        let victim = open
            .values()
            .filter(|a| a.busy.load(Ordering::Relaxed) == 0 && !a.evicting.load(Ordering::Relaxed))
            .min_by_key(|a| a.waiting_since());
        match victim {
            Some(a) => {
                a.evicting.store(true, Ordering::Relaxed);
                a.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

/// A connection's place in [`Connections`], given up when it closes.
pub(super) struct Listed {
    pub(super) connections: Arc<Connections>,
    pub(super) id: u64,
}

impl Drop for Listed {
    fn drop(&mut self) {
        self.connections.lock().remove(&self.id);
    }
}

/// A socket that notes in [`Activity`] each time bytes move.
pub(super) struct Watched {
    pub(super) stream: TcpStream,
    pub(super) activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Resolves once the connection has been idle (no byte moved, no request being answered)
/// for `limit`.
pub(super) async fn idle(activity: &Activity, limit: Duration) {
    loop {
        let quiet = activity.quiet_for();
        if activity.busy.load(Ordering::Relaxed) == 0 && quiet >= limit {
            return;
        }
        let wait = limit.saturating_sub(quiet).max(Duration::from_millis(100));
        tokio::time::sleep(wait).await;
    }
}

/// The connections a server may hold: `requested`, or fewer if the open-file limit cannot
/// hold them beside [`FD_RESERVE`] after raising its soft value up to the hard one.
pub(super) fn connection_budget(requested: u64) -> u64 {
    let Some((soft, hard)) = fd_limit::raise(requested.saturating_add(FD_RESERVE)) else {
        return requested;
    };
    let allowed = soft.saturating_sub(FD_RESERVE.min(soft / 2)).max(1);
    if requested <= allowed {
        return requested;
    }
    tracing::warn!(
        "the open-file limit (ulimit -n) is {soft} (hard limit {hard}): serving at most {allowed} \
         connections at once instead of --http-max-connections {requested}; raise the hard limit \
         (`ulimit -Hn`, systemd's LimitNOFILE=) to serve more"
    );
    allowed
}

/// The process's limit on open files.
#[cfg(unix)]
mod fd_limit {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

    /// Raises the soft limit to the hard one if it is below `wanted` (to `wanted` when the hard
    /// limit is infinite); returns `(soft, hard)` after, `u64::MAX` for infinite.
    pub(super) fn raise(wanted: u64) -> Option<(u64, u64)> {
        let limit = getrlimit(Resource::Nofile);
        let soft = limit.current.unwrap_or(u64::MAX);
        let hard = limit.maximum.unwrap_or(u64::MAX);
        if soft >= wanted || soft >= hard {
            return Some((soft, hard));
        }
        // Linux refuses an infinite soft limit (it is capped at fs.nr_open), macOS one above
        // OPEN_MAX: then `wanted` alone.
        let targets = [limit.maximum, Some(wanted.min(hard))];
        let raised = targets.into_iter().flatten().find_map(|target| {
            setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(target),
                    maximum: limit.maximum,
                },
            )
            .ok()
            .map(|()| target)
        });
        match raised {
            Some(target) => {
                tracing::info!(from = soft, to = target, "raised the open-file limit");
                Some((target, hard))
            }
            None => {
                tracing::warn!(
                    "could not raise the open-file limit (ulimit -n) from {soft} towards its \
                     hard limit {hard}: raise it before starting (`ulimit -n {wanted}`)"
                );
                Some((soft, hard))
            }
        }
    }
}

#[cfg(not(unix))]
mod fd_limit {
    /// Open files are not limited this way here.
    pub(super) fn raise(_wanted: u64) -> Option<(u64, u64)> {
        None
    }
}

/// Connections closed to make room, reported at most once a minute.
#[derive(Debug, Default)]
pub(super) struct Evictions {
    pub(super) since_report: u64,
    pub(super) reported: Option<Instant>,
}

impl Evictions {
    pub(super) fn count(&mut self, limit: u64) {
        self.since_report += 1;
        if self
            .reported
            .is_some_and(|t| t.elapsed() < Duration::from_secs(60))
        {
            return;
        }
        tracing::warn!(
            closed = self.since_report,
            "at the connection limit ({limit}): closed the connections that waited longest for \
             a request (slow or idle clients) to let new ones in; raise --http-max-connections \
             if these are real clients"
        );
        self.since_report = 0;
        self.reported = Some(Instant::now());
    }
}
