//! The HTTP API under `/v1` (jobs, runs, cluster, consumers, dead-letter queues, tokens), health
//! checks and `/metrics`; every request but the health checks is authenticated ([`auth`]). Handlers parse the request, call an application service ([`crate::app`],
//! [`crate::dlq::DeadLetters`]) and shape the answer; every error is JSON (see [`error`]).
//! The router and its middleware are here; what the handlers share is [`AppState`].

mod audit;
pub mod auth;
mod backfill;
mod batch;
pub mod body;
pub mod cancel;
pub mod cluster;
mod consumers;
pub mod dlq;
pub mod dto;
pub mod error;
mod guard;
mod health;
mod jobs;
pub mod openapi;
mod preview;
mod run_search;
mod run_stats;
mod runs;
mod state;
mod tokens;

pub use state::{AppParts, AppState};

use axum::{
    Router,
    extract::DefaultBodyLimit,
    middleware,
    routing::{get, post},
};

use error::{ApiError, ErrorCode};

/// The API router.
pub fn router(state: AppState) -> Router {
    let body_limit = state.body_limit();
    Router::new()
        .route("/v1/jobs", post(jobs::create).get(jobs::list))
        .route(body::BATCH_PATH, post(batch::create))
        .route(
            "/v1/jobs/{id}",
            get(jobs::get).patch(jobs::patch).delete(jobs::delete),
        )
        .route("/v1/jobs/{id}/pause", post(jobs::pause))
        .route("/v1/jobs/{id}/resume", post(jobs::resume))
        .route("/v1/jobs/{id}/trigger", post(jobs::trigger))
        .route("/v1/jobs/{id}/backfill", post(backfill::backfill))
        .route("/v1/jobs/{id}/runs", get(runs::list))
        .route("/v1/jobs/{id}/preview", get(preview::job))
        .route("/v1/schedules/preview", post(preview::schedule))
        .route("/v1/runs", get(run_search::search))
        .route("/v1/stats/runs", get(run_stats::stats))
        .route("/v1/runs/{id}", get(runs::get))
        .route("/v1/runs/{id}/cancel", post(cancel::cancel))
        .route("/v1/cluster", get(cluster::status))
        .route("/v1/consumers", get(consumers::list))
        .route("/v1/dlq", get(dlq::list))
        .route("/v1/dlq/{queue}/messages", get(dlq::peek))
        .route("/v1/dlq/{queue}/replay", post(dlq::replay))
        .route("/v1/dlq/{queue}/purge", post(dlq::purge))
        .route("/v1/tokens", post(tokens::create).get(tokens::list))
        .route("/v1/me", get(tokens::me))
        .route("/v1/audit", get(audit::list))
        .route("/v1/jobs/{id}/versions", get(audit::versions))
        .route("/v1/tokens/{name}", axum::routing::delete(tokens::revoke))
        .route(openapi::PATH, get(openapi::document))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .fallback(|| async { ApiError::new(ErrorCode::NotFound, "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                ErrorCode::MethodNotAllowed,
                "method not allowed on this route",
            )
        })
        // Bodies are read with the state's own limit, which answers in JSON.
        .layer(DefaultBodyLimit::disable())
        // Outermost last: catch panics, read the whole body, check the request, then
        // give any non-JSON error its JSON body.
        .layer(middleware::from_fn(guard::json_errors))
        .layer(middleware::from_fn(guard::check_request))
        .layer(middleware::from_fn(
            move |request: axum::extract::Request, next| {
                let limit = body::body_limit_for(request.uri().path(), body_limit);
                guard::read_whole_body(limit, request, next)
            },
        ))
        // Before the body is read: a request without a valid token costs nothing more.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .layer(middleware::from_fn(guard::catch_panics))
        .with_state(state)
}
