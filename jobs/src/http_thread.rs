//! Serving an axum application so that no client can take the server down: a header-read
//! timeout, an idle timeout, a request timeout, a connection limit, and handler panics
//! answered 500. Used by `hourglass serve`, `run --serve`'s dashboards and the job's `/metrics`,
//! the last two from a thread of their own ([`HttpThread`]).

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tower::ServiceExt;

/// Default of `--http-header-timeout`, seconds.
pub const DEFAULT_HEADER_TIMEOUT: u64 = 10;
/// Default of `--http-idle-timeout`, seconds.
pub const DEFAULT_IDLE_TIMEOUT: u64 = 60;
/// Default of `--http-request-timeout`, seconds.
pub const DEFAULT_REQUEST_TIMEOUT: u64 = 30;
/// Default of `--http-max-connections`: well below the usual 1024 file descriptors.
pub const DEFAULT_MAX_CONNECTIONS: u64 = 128;

/// Limits of an HTTP server, as flags.
#[derive(Debug, Clone, clap::Args)]
pub struct HttpLimits {
    /// Seconds a client has to send a request's headers, counted from when the server starts
    /// waiting for them: a connection's start, or the end of the previous answer on a
    /// keep-alive connection, which is therefore closed after this long without a request.
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
    /// Most connections served at once; further ones wait in the listen backlog until one
    /// closes. Keep it below the file descriptor limit (`ulimit -n`).
    #[arg(long = "http-max-connections", value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub max_connections: u64,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
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
/// current-thread runtime for `workers <= 1` (whose caller marks the thread it blocks on).
pub fn runtime(name: &str, workers: usize) -> Result<tokio::runtime::Runtime> {
    if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_start(mark_http_thread)
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name(name)
            .enable_all()
            .on_thread_start(mark_http_thread)
            .build()
    }
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

/// When a connection last moved a byte, and how many of its requests are being answered.
#[derive(Debug)]
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
    busy: AtomicUsize,
}

impl Activity {
    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn quiet_for(&self) -> Duration {
        self.start
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// A request being answered: the idle clock stops meanwhile and restarts at its end.
struct Busy(Arc<Activity>);

impl Busy {
    fn new(activity: Arc<Activity>) -> Self {
        activity.busy.fetch_add(1, Ordering::Relaxed);
        Busy(activity)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A socket that notes in [`Activity`] each time bytes move.
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
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
async fn idle(activity: &Activity, limit: Duration) {
    loop {
        let quiet = activity.quiet_for();
        if activity.busy.load(Ordering::Relaxed) == 0 && quiet >= limit {
            return;
        }
        let wait = limit.saturating_sub(quiet).max(Duration::from_millis(100));
        tokio::time::sleep(wait).await;
    }
}

/// Serves `app` on `listener` with `limits` until `shutdown` resolves, then lets the requests
/// in progress finish (for at most the request timeout).
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
    let app = app.layer(middleware::from_fn_with_state(request_timeout, guard));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(limits.header_timeout));
    let permits = Arc::new(tokio::sync::Semaphore::new(
        usize::try_from(limits.max_connections).unwrap_or(usize::MAX),
    ));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        // Taking the permit before accepting leaves connections beyond the limit in the
        // kernel's backlog, where they cost no file descriptor of ours.
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => permit?,
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let activity = Arc::new(Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
        });
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
            tokio::select! {
                // A client that hangs up or breaks the protocol is no server error.
                _ = connection => {},
                () = idle(&activity, idle_limit) => {},
            }
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
        let runtime = runtime(name, workers)?;
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
