//! The profile routes of `hourglass serve`: `GET /api/v1/profile/{user}`,
//! `POST /api/v1/profiles:batchGet` and `GET /api/v1/audience`, an [`axum::Router`] the binary
//! merges into the server, and their lines of `/metrics` ([`ServeMetrics`]).

mod metrics;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use pipeline::http_thread::{HttpLimits, HttpThread};
use serde::Deserialize;
use serde_json::{json, Value};
use sinks::Reader;

use crate::audience::Limits;
use crate::query::{ProfileReader, Selection, MAX_BATCH_USERS};
use crate::Error;

pub use metrics::ServeMetrics;

/// What the profile handlers share.
struct Api {
    reader: ProfileReader,
    store: Reader,
    /// Turns to read the store, as the server's own routes take them.
    reads: Arc<tokio::sync::Semaphore>,
    /// Audience queries' limits (`[index]`).
    limits: Limits,
    /// Times the store calls, and reads `store`'s region counts for `/metrics`.
    metrics: ServeMetrics,
}

/// Ids an audience answer lists by default (`limit`), and at most.
pub const AUDIENCE_IDS: usize = 1000;
/// Most ids an audience answer may list.
pub const MAX_AUDIENCE_IDS: usize = 100_000;

/// The profile routes over `store` (the tables `hourglass serve` opened), reading through
/// `reader`, at most `store_reads` reads at once (each on the blocking pool).
///
/// - `GET /api/v1/profile/{user}[?versions=N][&at=T][&tags=a,b][&families=f,g]`: the user's
///   profile as `hourglass profile get` prints it; 404 for a user with no tag, 400 for a bad
///   user id, argument or unknown tag.
/// - `POST /api/v1/profiles:batchGet` with `{"users": [...], "tags": [...], "families": [...]}`
///   (`tags` and `families` optional): `{"profiles": [...]}` in the order asked, a user with
///   no tag with `"tags": {}`; 400 for more than [`MAX_BATCH_USERS`] users or a bad body.
///
/// - `GET /api/v1/audience?q=EXPR[&limit=N]`: `{"query", "count", "truncated", "users"}` as
///   `hourglass profile audience --format json` prints it, at most `limit` ids (default
///   [`AUDIENCE_IDS`], at most [`MAX_AUDIENCE_IDS`]) within `limits`; 400 for a bad expression,
///   an unknown tag, a type mismatch or a limit passed, naming the position in the message and,
///   when one place is at fault, as `"position"` (a byte offset in `q`). Without `q` it is a
///   400 too: the built-in page asks so to learn whether these routes are served (a 404 says
///   they are not).
///
/// A failing store answers 503, a failing Redis nothing: the store answers instead.
///
/// Every store call is timed into `metrics`, which also reads `store`'s reads per region of
/// `user_profile_tag` from now on.
pub fn routes(
    reader: ProfileReader,
    store: Reader,
    store_reads: usize,
    limits: Limits,
    metrics: ServeMetrics,
) -> Router {
    metrics.attach(&store);
    let api = Arc::new(Api {
        reader,
        store,
        reads: Arc::new(tokio::sync::Semaphore::new(store_reads.max(1))),
        limits,
        metrics,
    });
    Router::new()
        .route("/api/v1/profile/{user}", get(one))
        .route("/api/v1/profiles:batchGet", post(batch))
        .route("/api/v1/audience", get(audience))
        .with_state(api)
}

/// The profile routes served from a thread of their own beside a running job (`hourglass
/// profile run --serve`): the embedded store admits one process, so this is how clients read
/// it while the job writes. Dropping it stops them.
#[derive(Debug)]
pub struct ApiServer(HttpThread);

impl ApiServer {
    /// Binds `listen` at once (a taken port fails before the job starts) and serves
    /// [`routes`] over `store`, the job's own, with `http`'s limits and at most
    /// `http.store_reads` reads at once. No token: it warns when `listen` is beyond loopback.
    ///
    /// # Errors
    /// The address cannot be bound, or the server's thread cannot start.
    pub fn start(
        listen: &str,
        reader: ProfileReader,
        store: Reader,
        limits: Limits,
        metrics: ServeMetrics,
        http: &HttpLimits,
    ) -> crate::Result<Self> {
        let listener = std::net::TcpListener::bind(listen).map_err(|source| Error::Io {
            path: format!("{listen} (pick a free port with --serve HOST:PORT; port 0 picks one)"),
            source,
        })?;
        let addr = listener.local_addr().map_err(|source| Error::Io {
            path: listen.to_string(),
            source,
        })?;
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "serving profiles beyond loopback without a token: anyone who reaches this address can read every profile");
        }
        let reads = usize::try_from(http.store_reads).unwrap_or(usize::MAX);
        let app = routes(reader, store, reads, limits, metrics);
        Ok(ApiServer(HttpThread::start(
            listener,
            app,
            http,
            "profile-api",
            2,
        )?))
    }

    /// The address it listens on (with the port chosen for port 0).
    pub fn addr(&self) -> std::net::SocketAddr {
        self.0.addr()
    }
}

/// An error answer: `{"error": message}` with a status, and `"position"` for an audience query
/// wrong at one place.
struct ApiError(StatusCode, String, Option<usize>);

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let position = match &e {
            Error::Query(q) => q.pos,
            _ => None,
        };
        let status = match &e {
            Error::Invalid(_) | Error::UnknownTag(_) | Error::Query(_) => StatusCode::BAD_REQUEST,
            Error::Store(_) | Error::Redis { .. } | Error::Sqlite { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(status, e.to_string(), position)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "error": self.1 });
        if let Some(position) = self.2 {
            body["position"] = json!(position);
        }
        (self.0, Json(body)).into_response()
    }
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, message.into(), None)
}

/// Runs `f` on the blocking pool once a turn to read is free.
async fn blocking<T, F>(api: &Arc<Api>, f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Api) -> crate::Result<T> + Send + 'static,
{
    let api = api.clone();
    let turn = api.reads.clone().acquire_owned().await;
    tokio::task::spawn_blocking(move || {
        let _turn = turn;
        f(&api).map_err(ApiError::from)
    })
    .await
    .unwrap_or_else(|join| {
        Err(ApiError(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("profile read failed ({join}); please report it"),
            None,
        ))
    })
}

/// Query parameters of `GET /api/v1/profile/{user}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OneParams {
    versions: Option<u32>,
    at: Option<String>,
    tags: Option<String>,
    families: Option<String>,
}

fn list(text: Option<&str>) -> Vec<String> {
    text.map(|t| {
        t.split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    })
    .unwrap_or_default()
}

async fn one(
    State(api): State<Arc<Api>>,
    Path(user): Path<String>,
    params: Result<Query<OneParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(p) = params.map_err(|e| bad_request(e.body_text()))?;
    let at_ms =
        p.at.as_deref()
            .map(pipeline::time::parse_time)
            .transpose()
            .map_err(|e| bad_request(format!("at: {e}")))?
            .map(|secs| secs.saturating_mul(1000));
    if p.versions.is_some() && at_ms.is_some() {
        return Err(bad_request("give versions or at, not both"));
    }
    let (tags, families) = (list(p.tags.as_deref()), list(p.families.as_deref()));
    let versions = p.versions;
    let shown = user.clone();
    let answer = blocking(&api, move |api| {
        let now_ms = pipeline::time::now_ms();
        let store = api.metrics.timed(&api.store);
        match (at_ms, versions) {
            (Some(at), _) => api.reader.at(&store, &user, at),
            (None, Some(n)) => api.reader.versions(&store, &user, n, now_ms),
            (None, None) => {
                let selection = Selection::new(&api.reader.defs(), &tags, &families)?;
                api.reader.get(&store, &user, &selection, now_ms)
            }
        }
    })
    .await?;
    answer.map(Json).ok_or_else(|| {
        ApiError(
            StatusCode::NOT_FOUND,
            format!("user {shown:?} has no tags"),
            None,
        )
    })
}

/// The body of `POST /api/v1/profiles:batchGet`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    users: Vec<String>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    families: Vec<String>,
}

async fn batch(State(api): State<Arc<Api>>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let body: BatchBody = serde_json::from_slice(&body).map_err(|e| {
        bad_request(format!(
            "body: {e}; expected {{\"users\": [...], \"tags\": [...], \"families\": [...]}}"
        ))
    })?;
    if body.users.len() > MAX_BATCH_USERS {
        return Err(bad_request(format!(
            "{} users in one batch: at most {MAX_BATCH_USERS}; split the request",
            body.users.len()
        )));
    }
    let profiles = blocking(&api, move |api| {
        let selection = Selection::new(&api.reader.defs(), &body.tags, &body.families)?;
        let now_ms = pipeline::time::now_ms();
        api.reader.get_many(
            &api.metrics.timed(&api.store),
            &body.users,
            &selection,
            now_ms,
        )
    })
    .await?;
    Ok(Json(json!({ "profiles": profiles })))
}

/// Query parameters of `GET /api/v1/audience`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AudienceParams {
    q: String,
    limit: Option<usize>,
}

async fn audience(
    State(api): State<Arc<Api>>,
    params: Result<Query<AudienceParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(p) =
        params.map_err(|e| bad_request(format!("{}; expected ?q=EXPR", e.body_text())))?;
    let limit = p.limit.unwrap_or(AUDIENCE_IDS);
    if limit > MAX_AUDIENCE_IDS {
        return Err(bad_request(format!(
            "limit {limit}: at most {MAX_AUDIENCE_IDS} ids; use `hourglass profile audience \
             --format ids` for more"
        )));
    }
    let answer = blocking(&api, move |api| {
        let store = api.metrics.timed(&api.store);
        let found = crate::audience::select(&store, &p.q, &api.reader.defs(), api.limits)?;
        let users: Vec<String> = found.user_ids(Some(limit)).collect();
        Ok(json!({
            "query": p.q,
            "count": found.len(),
            "truncated": (users.len() as u64) < found.len(),
            "users": users,
        }))
    })
    .await?;
    Ok(Json(answer))
}
