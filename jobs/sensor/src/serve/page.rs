//! The built-in page at `/` and its chart library (uPlot, bundled at build time).

use axum::http::header;
use axum::response::{Html, IntoResponse};

const INDEX: &str = include_str!("../../../assets/index.html");
const UPLOT_JS: &str = include_str!("../../../assets/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../../../assets/uplot/uPlot.min.css");

/// `GET /`: pick a device or a room and a range; see the curve and the room's current values.
pub(crate) async fn index() -> Html<&'static str> {
    Html(INDEX)
}

pub(crate) async fn uplot_js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        UPLOT_JS,
    )
}

pub(crate) async fn uplot_css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        UPLOT_CSS,
    )
}
