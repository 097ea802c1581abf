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

pub(super) async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

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

pub(super) async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics().render(),
    )
}
