//! [`AppState`]: what the handlers share — the application services they call and the
//! few settings of the HTTP edge itself (the body limits, the metrics to render).

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;

use crate::{
    app::{Audit, Cancellations, Consumers, Jobs, Node, Runs, Tokens},
    dlq::DeadLetters,
};

/// The parts an [`AppState`] is made of.
pub struct AppParts {
    /// Operations on jobs.
    pub jobs: Arc<Jobs>,
    /// Run history.
    pub runs: Arc<Runs>,
    /// Cancelling runs.
    pub cancellations: Arc<Cancellations>,
    /// Dead-letter queue operations.
    pub dead_letters: Arc<DeadLetters>,
    /// This node's view of the cluster and its readiness.
    pub node: Arc<Node>,
    /// The consumer instances and groups.
    pub consumers: Arc<Consumers>,
    /// API tokens: who is calling.
    pub tokens: Arc<Tokens>,
    /// The audit trail.
    pub audit: Arc<Audit>,
    /// Whether `/metrics` needs a token (`metrics_auth = token`).
    pub metrics_need_token: bool,
    /// The largest job payload, in bytes of JSON.
    pub payload_limit: usize,
    /// The metrics recorder `/metrics` renders.
    pub metrics: PrometheusHandle,
}

/// What the handlers share. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    parts: Arc<AppParts>,
}

impl AppState {
    /// State over its parts.
    pub fn new(parts: AppParts) -> Self {
        Self {
            parts: Arc::new(parts),
        }
    }

    pub(super) fn jobs(&self) -> &Jobs {
        &self.parts.jobs
    }

    pub(super) fn runs(&self) -> &Runs {
        &self.parts.runs
    }

    pub(super) fn cancellations(&self) -> &Cancellations {
        &self.parts.cancellations
    }

    pub(super) fn dead_letters(&self) -> &DeadLetters {
        &self.parts.dead_letters
    }

    pub(super) fn node(&self) -> &Node {
        &self.parts.node
    }

    pub(super) fn consumers(&self) -> &Consumers {
        &self.parts.consumers
    }

    pub(super) fn audit(&self) -> &Audit {
        &self.parts.audit
    }

    pub(super) fn tokens(&self) -> &Tokens {
        &self.parts.tokens
    }

    pub(super) fn metrics_need_token(&self) -> bool {
        self.parts.metrics_need_token
    }

    pub(super) fn metrics(&self) -> &PrometheusHandle {
        &self.parts.metrics
    }

    /// The largest job payload, in bytes of JSON.
    pub(super) fn payload_limit(&self) -> usize {
        self.parts.payload_limit
    }

    /// The largest request body: the payload limit plus room for the other fields.
    pub(super) fn body_limit(&self) -> usize {
        self.parts.payload_limit * 2 + 64 * 1024
    }
}
