//! Authentication at the API's edge: every request except the health checks (and
//! `/metrics` when it is configured open) must carry `Authorization: Bearer <token>`;
//! the token's [`Caller`] is put in the request's extensions for the handlers to pass
//! to the application services, which decide what it may do. A request without a valid
//! token is answered `401 unauthorized` before its body is read.

use axum::{
    extract::{Request, State},
    http::header,
    middleware::Next,
    response::{IntoResponse, Response},
};

use super::{error::ApiError, state::AppState};
use crate::{domain::access::Action, telemetry};

/// Paths that answer without a token: a load balancer's and an orchestrator's probes.
pub const OPEN_PATHS: [&str; 2] = ["/healthz", "/readyz"];
/// The metrics path, open or not by the `metrics_auth` setting.
pub const METRICS_PATH: &str = "/metrics";

/// Authenticates the request, or answers 401 (503 if tokens cannot be read at all).
pub async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    if OPEN_PATHS.contains(&path) || (path == METRICS_PATH && !state.metrics_need_token()) {
        return next.run(request).await;
    }
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|value| value.to_str().unwrap_or(""));
    let caller = match state.tokens().authenticate(authorization).await {
        Ok(caller) => caller,
        Err(error) => {
            metrics::counter!(telemetry::HTTP_UNAUTHENTICATED).increment(1);
            return ApiError::from(error).into_response();
        }
    };
    if request.uri().path() == METRICS_PATH
        && let Err(denied) = caller.check(Action::ReadMetrics, None)
    {
        return ApiError::from(denied).into_response();
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}
