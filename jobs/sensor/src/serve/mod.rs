//! `hourglass serve`: dashboards over HTTP — a JSON API, the Prometheus API subset that
//! Grafana's built-in data source uses, a built-in page, `/metrics` and `/healthz`.
//!
//! Handlers never touch the store on the async threads: every read runs in
//! [`tokio::task::spawn_blocking`] through [`blocking`], because both backends block, at most
//! `--http-store-reads` at once.

mod api;
mod metrics;
mod page;
pub(crate) mod prom;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pipeline::Context;

use crate::codec::narrow::KeyScheme;
use crate::config::JobConfig;
use crate::tables;
use crate::Result;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use subtle::ConstantTimeEq;

use pipeline::http_thread::{self, HttpLimits, HttpThread};
use pipeline::store::{self, Backend, BackendArgs};
use sinks::embedded::OpenMode;
use sinks::Reader;

/// How long the device list and the device → room map are reused before a rescan. Both feed
/// Grafana's pickers and regex matchers, which ask for them on every dashboard refresh.
const LIST_TTL: Duration = Duration::from_secs(30);

/// How long a request retries an unreachable HBase before answering 503: a dashboard would
/// rather show an error than wait for the minute interactive commands allow.
const HBASE_REQUEST_RETRY: Duration = Duration::from_secs(5);

/// Flags of `hourglass serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Where the tables are: `--store DIR` (embedded) or `--hbase HOST:PORT`.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Job configuration (TOML), for the key scheme, the metric name and the store location.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Address to listen on. The default accepts local connections only; use `--token-file`
    /// before listening on another interface. Port 0 picks a free port (printed on start).
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "HOST:PORT")]
    pub listen: String,
    /// File holding a bearer token; every endpoint but `/healthz` then needs
    /// `Authorization: Bearer <token>`. Surrounding whitespace is ignored.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Timeouts and connection limit.
    #[command(flatten)]
    pub http: HttpLimits,
}

/// Routes another domain adds to `hourglass serve` (the binary composes them: this crate knows
/// no other job), served under the same token, limits and request metrics.
pub struct Extension {
    /// The tables its routes read, opened with the sensor tables in the same store.
    pub tables: Vec<sinks::schema::TableSpec>,
    /// Makes the routes (their state attached) over the store's reader; the number is
    /// `--http-store-reads`, the store reads it may run at once.
    pub routes: Box<dyn FnOnce(Reader, usize) -> Router + Send>,
    /// Lines it adds to `/metrics` (OpenMetrics text without `# EOF`), made at each scrape.
    pub metrics: Option<ExtraMetrics>,
}

impl std::fmt::Debug for Extension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extension")
            .field("tables", &self.tables.len())
            .finish_non_exhaustive()
    }
}

/// An [`Extension`]'s metrics: OpenMetrics lines without `# EOF`.
#[derive(Clone)]
pub struct ExtraMetrics(pub Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for ExtraMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExtraMetrics")
    }
}

/// What every handler shares.
#[derive(Debug)]
pub(crate) struct AppState {
    /// The store: the embedded store's handle, or an HBase reader with a pool of gateway
    /// connections (one per concurrent request, up to `read_connections`).
    reader: Reader,
    scheme: KeyScheme,
    /// The metric name series carry in the Prometheus API (`temp` by default).
    metric: String,
    /// Whether the room view table exists in this build's schema.
    room_table: bool,
    token: Option<Vec<u8>>,
    metrics: metrics::Metrics,
    devices: Cached<Vec<String>>,
    rooms: Cached<HashMap<String, String>>,
    /// Turns to read the store (`--http-store-reads`). Without them every concurrent request
    /// took a thread of the blocking pool (up to tokio's 512): 200 clients asking curves made
    /// 110 threads in 10 s, and the allocator's pages kept by each grew the RSS by 188 MiB.
    reads: Arc<tokio::sync::Semaphore>,
    /// An extension's lines of `/metrics`.
    extra_metrics: Option<ExtraMetrics>,
}

type Shared = Arc<AppState>;

/// A list computed from a scan, with when it was made.
type Cached<T> = Mutex<Option<(Instant, Arc<T>)>>;

impl AppState {
    /// The store's reader.
    fn reader(&self) -> &Reader {
        &self.reader
    }
}

/// An error answer of the JSON API: `{"error": message}` with a status.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    fn not_implemented(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_IMPLEMENTED,
            message: message.into(),
        }
    }

    /// A failed store call: 503 when the store is unreachable or refuses, 400 for an argument
    /// the query refuses, 500 otherwise (a malformed row is a bug or a foreign writer, not
    /// something a retry cures).
    fn from_store(e: &crate::Error) -> Self {
        match e {
            crate::Error::Engine(pipeline::Error::Invalid(message)) => {
                ApiError::bad_request(message.clone())
            }
            crate::Error::Engine(pipeline::Error::Store(_)) => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                message: format!("store unavailable: {e}"),
            },
            other => ApiError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                message: other.to_string(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(serde_json::json!({ "error": self.message })),
        )
            .into_response()
    }
}

/// Runs `f` with the state on the blocking pool once a turn to read is free, counting store
/// errors.
async fn blocking<T, F>(state: &Shared, f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&AppState) -> Result<T, ApiError> + Send + 'static,
{
    let st = state.clone();
    // The semaphore is never closed, so `Err` cannot come. The turn moves into the read: a
    // request cut by its timeout leaves it taken until the read it started ends.
    let turn = state.reads.clone().acquire_owned().await;
    let result = tokio::task::spawn_blocking(move || {
        let _turn = turn;
        f(&st)
    })
    .await
    .unwrap_or_else(|join| {
        Err(ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!(
                "request handler failed ({join}); the server goes on: please report it"
            ),
        })
    });
    if let Err(e) = &result {
        if matches!(
            e.status,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::INTERNAL_SERVER_ERROR
        ) {
            state.metrics.store_error();
        }
    }
    result
}

/// `crate::Result` → [`ApiError`], for closures run by [`blocking`].
trait StoreResult<T> {
    fn store(self) -> Result<T, ApiError>;
}

impl<T> StoreResult<T> for crate::Result<T> {
    fn store(self) -> Result<T, ApiError> {
        self.map_err(|e| ApiError::from_store(&e))
    }
}

/// Every endpoint but `/healthz` goes through this when a token is configured.
async fn require_token(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let Some(token) = &st.token else {
        return next.run(req).await;
    };
    // The scheme is case-insensitive (RFC 9110 §11.1): `bearer` and `BEARER` are `Bearer`.
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().split_at_checked(7))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case(b"Bearer "))
        .map(|(_, token)| token);
    // `ct_eq` compares in time independent of where the first difference is (the length may
    // leak, which says nothing useful about a random token).
    if given.is_some_and(|g| bool::from(g.ct_eq(token))) {
        return next.run(req).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        Json(serde_json::json!({
            "status": "error",
            "errorType": "unauthorized",
            "error": "missing or wrong bearer token: send `Authorization: Bearer <token>` with the token of --token-file",
        })),
    )
        .into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Parameters of `/debug/panic`.
#[cfg(debug_assertions)]
#[derive(Debug, serde::Deserialize)]
struct PanicParams {
    /// `blocking`: panic in a store read on the blocking pool; else in the async handler.
    #[serde(rename = "in")]
    place: Option<String>,
}

/// `GET /debug/panic[?in=blocking]` (debug builds): panics.
#[cfg(debug_assertions)]
async fn debug_panic(
    State(st): State<Shared>,
    axum::extract::Query(p): axum::extract::Query<PanicParams>,
) -> Result<&'static str, ApiError> {
    if p.place.as_deref() == Some("blocking") {
        blocking(&st, |_| -> Result<(), ApiError> {
            panic!("/debug/panic?in=blocking")
        })
        .await?;
    }
    panic!("/debug/panic")
}

/// Parameters of `/debug/sleep`.
#[cfg(debug_assertions)]
#[derive(Debug, serde::Deserialize)]
struct SleepParams {
    /// Milliseconds to wait before answering.
    ms: u64,
}

/// `GET /debug/sleep?ms=N` (debug builds): answers after N milliseconds.
#[cfg(debug_assertions)]
async fn debug_sleep(axum::extract::Query(p): axum::extract::Query<SleepParams>) -> &'static str {
    tokio::time::sleep(std::time::Duration::from_millis(p.ms)).await;
    "slept\n"
}

/// The application: every route (the extension's `extra` too), auth and metrics.
fn router(state: Shared, extra: Router) -> Router {
    let protected = Router::new()
        .route("/", get(page::index))
        .route("/assets/uPlot.iife.min.js", get(page::uplot_js))
        .route("/assets/uPlot.min.css", get(page::uplot_css))
        .route("/api/v1/curve", get(api::curve))
        .route("/api/v1/hour", get(api::hour))
        .route("/api/v1/latest", get(api::latest))
        .route("/api/v1/devices", get(api::devices))
        .route("/api/v1/room/{room}", get(api::room))
        .route(
            "/api/v1/query_range",
            get(prom::query_range).post(prom::query_range),
        )
        .route("/api/v1/query", get(prom::query).post(prom::query))
        .route("/api/v1/labels", get(prom::labels).post(prom::labels))
        .route("/api/v1/label/{name}/values", get(prom::label_values))
        .route("/api/v1/series", get(prom::series).post(prom::series))
        .route("/api/v1/metadata", get(prom::metadata))
        .route("/api/v1/status/buildinfo", get(prom::buildinfo))
        .route("/metrics", get(metrics::export));
    // Debug builds only: lets the end-to-end tests check that a handler's panic is a 500 and
    // that a slow one is cut off by the request timeout.
    #[cfg(debug_assertions)]
    let protected = protected
        .route("/debug/panic", get(debug_panic))
        .route("/debug/sleep", get(debug_sleep));
    let protected = protected
        .with_state(state.clone())
        .merge(extra)
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(protected)
        .layer(middleware::from_fn_with_state(state, metrics::track))
}

/// Opens the backend `args` name (with the extension's tables), ready for serving.
fn open_state(
    args: &ServeArgs,
    extra_tables: &[sinks::schema::TableSpec],
) -> Result<(AppState, Backend)> {
    let mut cfg = match &args.config {
        Some(path) => JobConfig::load(path)?,
        None => JobConfig::default(),
    };
    args.backend.apply(&mut cfg.store);
    // Requests wait for HBase a few seconds at most: a dashboard retries on its own.
    let mut all = tables::all_tables();
    all.extend(extra_tables.iter().cloned());
    let backend = store::open_with(
        &cfg.store,
        &all,
        &args.backend,
        OpenMode::ReadOnly,
        Some(HBASE_REQUEST_RETRY),
    )
    .context(
        "`hourglass serve` opens the embedded store exclusively: it cannot share the \
         directory with a running `hourglass replay` or `hourglass run` (stop it first, or \
         serve HBase with --hbase)",
    )?;
    let state = state_for(&backend, &cfg, args.token_file.as_deref(), &args.http)?;
    Ok((state, backend))
}

/// The serving state over an open `backend`: `hourglass serve`'s, or that of a job serving its
/// own store (`hourglass run --serve`).
fn state_for(
    backend: &Backend,
    cfg: &JobConfig,
    token_file: Option<&Path>,
    limits: &HttpLimits,
) -> Result<AppState> {
    let token = match token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the token file {}", path.display()))?;
            let token = text.trim();
            ensure!(
                !token.is_empty(),
                "token file {} is empty: put a random token in it (e.g. `openssl rand -hex 32`)",
                path.display()
            );
            Some(token.as_bytes().to_vec())
        }
        None => None,
    };
    tracing::info!(store = %backend.location(), "serving");
    Ok(AppState {
        reader: backend.reader(),
        scheme: cfg.key_scheme,
        metric: cfg.metric.clone(),
        room_table: tables::all_tables()
            .iter()
            .any(|t| t.name == tables::ROOM_TABLE),
        token,
        metrics: metrics::Metrics::new(),
        devices: Mutex::new(None),
        rooms: Mutex::new(None),
        reads: Arc::new(tokio::sync::Semaphore::new(
            usize::try_from(limits.store_reads).unwrap_or(usize::MAX),
        )),
        extra_metrics: None,
    })
}

/// Dashboards served from a thread of their own, beside a running job; dropping it stops them.
#[derive(Debug)]
pub struct DashboardServer(HttpThread);

impl DashboardServer {
    /// Binds `listen` at once (a taken port fails before the job starts) and serves the same
    /// endpoints as `hourglass serve` from `backend`, the job's own store: the embedded store
    /// admits one process, so this is how dashboards read it while the job writes.
    ///
    /// # Errors
    /// The address cannot be bound, the token file is unreadable or empty.
    pub fn start(
        listen: &str,
        backend: &Backend,
        cfg: &JobConfig,
        token_file: Option<&Path>,
        limits: &HttpLimits,
    ) -> Result<Self> {
        let state = Arc::new(state_for(backend, cfg, token_file, limits)?);
        let listener = std::net::TcpListener::bind(listen).with_context(|| {
            format!("cannot serve dashboards on {listen}: pick a free port with --serve HOST:PORT (port 0 picks one)")
        })?;
        warn_if_open(state.token.is_none(), listener.local_addr()?);
        Ok(DashboardServer(HttpThread::start(
            listener,
            router(state, Router::new()),
            limits,
            "dashboards",
            2,
        )?))
    }

    /// The address it listens on (with the port chosen for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.0.addr()
    }
}

fn warn_if_open(no_token: bool, addr: SocketAddr) {
    if no_token && !addr.ip().is_loopback() {
        tracing::warn!(%addr, "listening beyond loopback without --token-file: anyone who reaches this address can read every reading");
    }
}

/// Runs the server until Ctrl-C or SIGTERM.
pub fn run(args: &ServeArgs) -> Result<()> {
    run_with(args, None)
}

/// Runs the server until Ctrl-C or SIGTERM, with `extension`'s routes, tables and metrics
/// beside the sensor dashboards.
pub fn run_with(args: &ServeArgs, extension: Option<Extension>) -> Result<()> {
    let tables = extension.as_ref().map_or(&[][..], |e| &e.tables[..]);
    let (mut state, backend) = open_state(args, tables)?;
    let blocking = usize::try_from(args.http.store_reads).unwrap_or(usize::MAX);
    let extra = match extension {
        Some(e) => {
            state.extra_metrics = e.metrics;
            (e.routes)(backend.reader(), blocking)
        }
        None => Router::new(),
    };
    let state = Arc::new(state);
    let runtime = http_thread::runtime("serve", 2, blocking)?;
    let served: pipeline::Result<()> = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let addr = listener.local_addr()?;
        // Tests and scripts read the address (port 0 picks one) from this first line.
        println!("listening on http://{addr}");
        warn_if_open(state.token.is_none(), addr);
        http_thread::serve(listener, router(state, extra), &args.http, shutdown())
            .await
            .context("serving HTTP")
    });
    Ok(served?)
}

async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
