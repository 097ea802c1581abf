//! `/healthz` (the process answers), `/readyz` (the database answers and the dispatcher has
//! a broker channel) and `/metrics` (Prometheus text).

use axum::{
    Json,
    extract::State,
    http::{StatusCode, header},
    response::IntoResponse,
};
use serde_json::json;

use super::state::AppState;

/// Liveness: the process answers.
#[utoipa::path(
    get, path = "/healthz", operation_id = "healthz", tag = "operations", security(()),
    responses((status = 200, description = "Alive.", body = HealthResponse)),
)]
pub(super) async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// Readiness: the database and the broker answer.
#[utoipa::path(
    get, path = "/readyz", operation_id = "readyz", tag = "operations", security(()),
    responses(
        (status = 200, description = "Ready.", body = ReadinessResponse),
        (status = 503, description = "Not ready; `checks` says what is unavailable.", body = ReadinessResponse),
    ),
)]
pub(super) async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let readiness = state.node().readiness().await;
    let status = if readiness.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let word = |ok: bool| if ok { "ok" } else { "unavailable" };
    (
        status,
        Json(json!({
            "status": if status == StatusCode::OK { "ready" } else { "not_ready" },
            "checks": {"database": word(readiness.database), "broker": word(readiness.broker)},
        })),
    )
}

/// Prometheus metrics (text exposition format). Needs a token unless `metrics_auth` is off.
#[utoipa::path(
    get, path = "/metrics", operation_id = "metrics", tag = "operations", security((), ("bearer" = [])),
    responses((status = 200, description = "The metrics.", content_type = "text/plain", body = String)),
)]
pub(super) async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics().render(),
    )
}

/// The body of `GET /healthz`.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct HealthResponse {
    /// Always `ok`.
    pub status: String,
}

/// The body of `GET /readyz`.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ReadinessResponse {
    /// `ready` or `not_ready`.
    pub status: String,
    /// `database` and `broker`, each `ok` or `unavailable`.
    pub checks: std::collections::BTreeMap<String, String>,
}
