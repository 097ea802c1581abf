//! `/healthz` (the process answers), `/readyz` (the database answers and the dispatcher has
//! a broker channel) and `/metrics` (Prometheus text).

use std::time::Duration;

use axum::{
    Json,
    extract::State,
    http::{StatusCode, header},
    response::IntoResponse,
};
use serde_json::json;

use super::AppState;

pub(super) async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

pub(super) async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let database = matches!(
        tokio::time::timeout(Duration::from_secs(2), state.store().ping()).await,
        Ok(Ok(()))
    );
    let broker = state.inner.dispatch.is_connected();
    let status = if database && broker {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let word = |ok: bool| if ok { "ok" } else { "unavailable" };
    (
        status,
        Json(json!({
            "status": if status == StatusCode::OK { "ready" } else { "not_ready" },
            "checks": {"database": word(database), "broker": word(broker)},
        })),
    )
}

pub(super) async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.inner.metrics.render(),
    )
}
