//! Serving an axum application so that no client can take the server down: a deadline for a
//! request's whole head, an idle timeout, a request timeout, a connection limit at which the
//! connection that has waited longest for a request makes room for a new one, and handler panics
//! answered 500. Used by `hourglass serve`, `run --serve`'s dashboards and the job's `/metrics`,
//! the last two from a thread of their own ([`HttpThread`]).

use std::cell::Cell;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use tower::ServiceExt;

use crate::{Context, Result};
use connections::{connection_budget, idle, Activity, Busy, Connections, Evictions, Watched};

mod connections;

/// Default of `--http-header-timeout`, seconds.
pub const DEFAULT_HEADER_TIMEOUT: u64 = 10;
/// Default of `--http-idle-timeout`, seconds.
pub const DEFAULT_IDLE_TIMEOUT: u64 = 60;
/// Default of `--http-request-timeout`, seconds.
pub const DEFAULT_REQUEST_TIMEOUT: u64 = 30;
/// Default of `--http-max-connections`: room for a thousand slow clients beside the normal ones
/// (the server raises its open-file limit to hold them: `connection_budget`).
pub const DEFAULT_MAX_CONNECTIONS: u64 = 2048;
/// Default of `--http-store-reads`: the HBase reader's default pool of gateway connections, so
/// that reads beyond it wait here, not in the pool.
pub const DEFAULT_STORE_READS: u64 = 16;

/// Most bytes of a request's head (request line and headers; hyper's default is ~400 KiB): a
/// client holding its connection open with a head it never finishes holds at most this much of
/// the server's memory, so [`DEFAULT_MAX_CONNECTIONS`] such clients hold at most 64 MiB. Node's
/// default limit is 16 KiB; longer heads are answered 431.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;

/// How long the accept loop waits for an evicted connection to close before evicting another.
const EVICTION_RETRY: Duration = Duration::from_millis(50);

/// Limits of an HTTP server, as flags.
#[derive(Debug, Clone, clap::Args)]
pub struct HttpLimits {
    /// Seconds a client has to send a request's whole head (request line and headers), counted
    /// from when the server starts waiting for it: a connection's start, or the end of the
    /// previous answer on a keep-alive connection, which is therefore closed after this long
    /// without a request. Sending the head a line or a byte at a time does not extend it.
    #[arg(long = "http-header-timeout", value_name = "SECS", default_value_t = DEFAULT_HEADER_TIMEOUT,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub header_timeout: u64,
    /// Seconds a connection may stay without a byte in or out while no request is being
    /// answered (a client that stops reading an answer or sending a body) before it is closed.
    #[arg(long = "http-idle-timeout", value_name = "SECS", default_value_t = DEFAULT_IDLE_TIMEOUT,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub idle_timeout: u64,
    /// Seconds a request may take to its answer's head; then it is answered 503.
    #[arg(long = "http-request-timeout", value_name = "SECS", default_value_t = DEFAULT_REQUEST_TIMEOUT,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub request_timeout: u64,
    /// Most connections open at once. At the limit, a new connection closes the one that has
    /// waited longest for a request's head (a slow or idle client); if every connection is
    /// being answered, it waits in the listen backlog. The server raises its soft open-file
    /// limit (`ulimit -n`) up to the hard one to hold them, and serves fewer (with a warning)
    /// if even that is too low.
    #[arg(long = "http-max-connections", value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub max_connections: u64,
    /// Most store reads the dashboards run at once, each on a thread of the blocking pool;
    /// further requests wait their turn (within the request timeout). Bounds those threads, and
    /// the memory each one's allocator keeps, under many concurrent requests.
    #[arg(long = "http-store-reads", value_name = "N", default_value_t = DEFAULT_STORE_READS,
          value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub store_reads: u64,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            store_reads: DEFAULT_STORE_READS,
        }
    }
}

thread_local! {
    static HTTP_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as serving HTTP: a panic on it fails one request, not the process.
fn mark_http_thread() {
    HTTP_THREAD.with(|c| c.set(true));
}

/// Whether this thread serves HTTP (the panic hook lets such panics unwind into a 500).
pub fn on_http_thread() -> bool {
    HTTP_THREAD.with(Cell::get)
}

/// A runtime whose threads are all marked as HTTP threads: `workers` threads, or a
/// current-thread runtime for `workers <= 1` (whose caller marks the thread it blocks on), with
/// at most `blocking` threads in its blocking pool (tokio's default is 512: each keeps its
/// stack and the pages its allocator heap holds).
pub fn runtime(name: &str, workers: usize, blocking: usize) -> Result<tokio::runtime::Runtime> {
    let mut builder = if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers).thread_name(name);
        b
    };
    builder
        .max_blocking_threads(blocking.max(1))
        .enable_all()
        .on_thread_start(mark_http_thread)
        .build()
        .with_context(|| format!("starting the {name} server's runtime"))
}

/// The JSON error answer of the server itself, readable by both the JSON API's clients
/// (`error`) and Prometheus' (`status`, `errorType`).
fn error_answer(status: StatusCode, error_type: &str, message: String) -> Response {
    (
        status,
        Json(serde_json::json!({ "status": "error", "errorType": error_type, "error": message })),
    )
        .into_response()
}

/// Runs the rest of the application as a task of its own, so that a panic in it is a 500
/// (the task's `JoinError`) and a request past `timeout` a 503.
async fn guard(State(timeout): State<Duration>, req: Request, next: Next) -> Response {
    let task = tokio::spawn(next.run(req));
    let abort = task.abort_handle();
    match tokio::time::timeout(timeout, task).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => error_answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("internal error while answering ({e}); the server goes on: please report it"),
        ),
        Err(_) => {
            // Work already handed to the blocking pool finishes; its answer is dropped.
            abort.abort();
            error_answer(
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                format!(
                    "the request took longer than the limit of {} s (--http-request-timeout): \
                     narrow it (a shorter range, fewer series) or raise the limit",
                    timeout.as_secs()
                ),
            )
        }
    }
}

/// Serves `app` on `listener` with `limits` until `shutdown` resolves, then lets the requests
/// in progress finish (for at most the request timeout).
///
/// Each connection is a task of its own, so a slow client costs a socket and a few KiB, never
/// a thread. Its head must arrive whole within the header timeout and hold at most
/// [`MAX_HEAD_BYTES`]. At the connection limit, a new connection makes room by closing the one
/// that has waited longest for a head: slow and idle clients cannot keep a normal request out.
///
/// # Errors
/// None so far: accept errors (such as running out of file descriptors) are logged and
/// retried, since they pass when connections close.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: &HttpLimits,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let request_timeout = Duration::from_secs(limits.request_timeout);
    let idle_limit = Duration::from_secs(limits.idle_timeout);
    let max_connections = connection_budget(limits.max_connections);
    let app = app.layer(middleware::from_fn_with_state(request_timeout, guard));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(limits.header_timeout))
        .max_buf_size(MAX_HEAD_BYTES);
    let permits = Arc::new(tokio::sync::Semaphore::new(
        usize::try_from(max_connections).unwrap_or(usize::MAX),
    ));
    let connections = Arc::new(Connections::default());
    let mut evictions = Evictions::default();
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    'serve: loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed; retrying");
                    // Out of file descriptors: a waiting connection gives one back.
                    connections.evict_longest_waiting();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Accepted first, so that eviction happens only for a connection that is there. If
        // every connection is being answered, this one waits, and the next in the backlog.
        let permit = loop {
            if let Ok(permit) = permits.clone().try_acquire_owned() {
                break permit;
            }
            if connections.evict_longest_waiting() {
                evictions.count(max_connections);
            }
            tokio::select! {
                permit = permits.clone().acquire_owned() => break permit.context("the connection limit's semaphore closed")?,
                () = tokio::time::sleep(EVICTION_RETRY) => {},
                () = &mut shutdown => break 'serve,
            }
        };
        let activity = Arc::new(Activity::new());
        let listed = connections.register(activity.clone());
        let io = TokioIo::new(Watched {
            stream,
            activity: activity.clone(),
        });
        let per_request = activity.clone();
        let app = app.clone();
        let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let busy = Busy::new(per_request.clone());
            let app = app.clone();
            async move {
                let _busy = busy;
                app.oneshot(req.map(Body::new)).await
            }
        });
        let connection = graceful.watch(http.serve_connection(io, service));
        tokio::spawn(async move {
            tokio::pin!(connection);
            loop {
                tokio::select! {
                    // A client that hangs up or breaks the protocol is no server error.
                    _ = &mut connection => break,
                    () = idle(&activity, idle_limit) => break,
                    () = activity.evict.notified() => {
                        // Its request may have begun since it was picked: then it stays.
                        if activity.busy.load(Ordering::Relaxed) == 0 {
                            break;
                        }
                        activity.evicting.store(false, Ordering::Relaxed);
                    }
                }
            }
            drop(listed);
            drop(permit);
        });
    }
    if tokio::time::timeout(request_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open at shutdown were closed");
    }
    Ok(())
}

/// A running server; dropping it stops it and waits for its thread.
#[derive(Debug)]
pub struct HttpThread {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl HttpThread {
    /// Serves `app` with `limits` on `listener` (bound beforehand, so that a taken port fails
    /// the caller at once) from a thread named `name` running a runtime of `workers` threads
    /// (1: a current-thread runtime).
    ///
    /// # Errors
    /// The runtime or the thread cannot be started.
    pub fn start(
        listener: std::net::TcpListener,
        app: Router,
        limits: &HttpLimits,
        name: &str,
        workers: usize,
    ) -> Result<Self> {
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let blocking = usize::try_from(limits.store_reads).unwrap_or(usize::MAX);
        let runtime = runtime(name, workers, blocking)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let what = name.to_string();
        let limits = limits.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                mark_http_thread();
                runtime.block_on(async move {
                    let served = match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => {
                            serve(listener, app, &limits, async {
                                let _ = stopped.await;
                            })
                            .await
                        }
                        Err(e) => Err(e.into()),
                    };
                    if let Err(e) = served {
                        tracing::error!(error = %e, "the {what} server stopped");
                    }
                });
            })
            .with_context(|| format!("starting the {name} thread"))?;
        Ok(HttpThread {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it listens on (with the port chosen for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for HttpThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picked(a: &Activity) -> bool {
        a.evicting.load(Ordering::Relaxed)
    }

    #[test]
    fn eviction_picks_the_connection_waiting_longest_and_never_one_being_answered() {
        let connections = Arc::new(Connections::default());
        let [first, second, third] = [(); 3].map(|()| Arc::new(Activity::new()));
        let _listed = [&first, &second, &third].map(|a| connections.register(a.clone()));
        // The first was accepted first but is answering a request; the third has waited since
        // its start, the second since the end of an answer after that.
        let busy = Busy::new(first.clone());
        std::thread::sleep(Duration::from_millis(5));
        drop(Busy::new(second.clone()));

        assert!(connections.evict_longest_waiting());
        assert!(picked(&third) && !picked(&first) && !picked(&second));
        assert!(connections.evict_longest_waiting());
        assert!(picked(&second) && !picked(&first));
        assert!(
            !connections.evict_longest_waiting(),
            "only the connection being answered is left"
        );
        drop(busy);
        assert!(connections.evict_longest_waiting());
        assert!(picked(&first));
    }

    #[test]
    fn a_closed_connection_leaves_the_list() {
        let connections = Arc::new(Connections::default());
        let listed = connections.register(Arc::new(Activity::new()));
        assert_eq!(connections.lock().len(), 1);
        drop(listed);
        assert!(connections.lock().is_empty());
        assert!(!connections.evict_longest_waiting());
    }
}
