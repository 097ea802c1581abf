//! The HTTP API under `/v1` (jobs and runs), health checks and `/metrics`. Handlers
//! validate input into domain types, call the store, and tell the timer and dispatcher.
//! Every error is JSON (see [`error`]).

pub mod body;
pub mod cluster;
pub mod dlq;
pub mod dto;
pub mod error;
mod guard;
mod health;
mod jobs;
mod runs;

use std::sync::Arc;

use axum::{
    Router,
    extract::DefaultBodyLimit,
    middleware,
    routing::{get, post},
};
use metrics_exporter_prometheus::PrometheusHandle;
use tracing::warn;

use crate::{
    broker::GroupDeclarer,
    cluster::{ClusterSettings, Ownership},
    dispatch::DispatchHandle,
    dlq::DeadLetters,
    domain::Job,
    store::{Backend, Store},
    timer::TimerHandle,
};
use error::{ApiError, ErrorCode};

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Backend,
    store: Arc<dyn Store>,
    ownership: Ownership,
    cluster: ClusterSettings,
    timer: TimerHandle,
    dispatch: DispatchHandle,
    declarer: GroupDeclarer,
    dead_letters: Arc<DeadLetters>,
    payload_limit: usize,
    metrics: PrometheusHandle,
}

impl AppState {
    /// State over a store and this node's shard ownership and lease settings, the timer
    /// and dispatcher handles, a queue declarer, the DLQ operations, the payload limit
    /// (bytes of JSON) and the metrics recorder to render.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        backend: Backend,
        ownership: Ownership,
        cluster: ClusterSettings,
        timer: TimerHandle,
        dispatch: DispatchHandle,
        declarer: GroupDeclarer,
        dead_letters: Arc<DeadLetters>,
        payload_limit: usize,
        metrics: PrometheusHandle,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store: backend.store(),
                backend,
                ownership,
                cluster,
                timer,
                dispatch,
                declarer,
                dead_letters,
                payload_limit,
                metrics,
            }),
        }
    }

    fn store(&self) -> &dyn Store {
        self.inner.store.as_ref()
    }

    /// The largest request body: the payload limit plus room for the other fields.
    fn body_limit(&self) -> usize {
        self.inner.payload_limit * 2 + 64 * 1024
    }

    /// Declares the job's work queue so its tasks wait in RabbitMQ while no consumer runs.
    /// A broker outage does not fail the request: the dispatcher declares again before the
    /// first publish.
    async fn declare_target(&self, job: &Job) {
        let target = &job.spec.settings.target;
        let group = &target.group;
        let zones = target.zones.as_deref().unwrap_or_default();
        if let Err(error) = self.inner.declarer.declare(group, zones).await {
            warn!(%error, group, job = %job.id, "could not declare the job's queue now; the dispatcher will");
        }
    }
}

/// The API router.
pub fn router(state: AppState) -> Router {
    let body_limit = state.body_limit();
    Router::new()
        .route("/v1/jobs", post(jobs::create).get(jobs::list))
        .route(
            "/v1/jobs/{id}",
            get(jobs::get).patch(jobs::patch).delete(jobs::delete),
        )
        .route("/v1/jobs/{id}/pause", post(jobs::pause))
        .route("/v1/jobs/{id}/resume", post(jobs::resume))
        .route("/v1/jobs/{id}/trigger", post(jobs::trigger))
        .route("/v1/jobs/{id}/runs", get(runs::list))
        .route("/v1/runs/{id}", get(runs::get))
        .route("/v1/cluster", get(cluster::status))
        .route("/v1/dlq", get(dlq::list))
        .route("/v1/dlq/{queue}/messages", get(dlq::peek))
        .route("/v1/dlq/{queue}/replay", post(dlq::replay))
        .route("/v1/dlq/{queue}/purge", post(dlq::purge))
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
        .layer(middleware::from_fn(move |request, next| {
            guard::read_whole_body(body_limit, request, next)
        }))
        .layer(middleware::from_fn(guard::catch_panics))
        .with_state(state)
}
