//! [`Cancellations`]: cancelling a run (`POST /v1/runs/{id}/cancel`) from end to end —
//! the permission, the store change (decided by [`crate::domain::cancel`]), the audit
//! entry and the cancel notice that tells consumers (a queued task is skipped, a running
//! handler sees [`chime_consumer::TaskContext::cancelled`]).
//!
//! The store is the truth: once the change is committed the run is `cancelled`, whatever
//! happens to the notice. A notice that cannot be published is logged and counted
//! (`chime_cancel_notice_failures_total`), and the answer says so (`notified: false`):
//! the reconciler never publishes the run again, but a task already queued or a handler
//! already running is not told.

use std::sync::Arc;

use chrono::Utc;
use lapin::BasicProperties;
use serde_json::json;
use tracing::{info, warn};
use uuid::Uuid;

use chime_consumer::protocol::{CancelMessage, topology};

use super::{
    Fire,
    audit::{self},
    runs::fire_items,
};
use crate::{
    broker::{ConfirmedPublisher, PublishError},
    domain::{
        RunState,
        access::{Action, Caller, Denied},
        audit::{AuditEntry, actions},
        cancel::{CancelRefused, cancel},
    },
    store::{Store, StoreError},
    telemetry,
};

/// Why a run was not cancelled.
#[derive(Debug, thiserror::Error)]
pub enum CancelError {
    /// No run has this id (or its job is gone).
    #[error("no run with id {0}")]
    RunNotFound(Uuid),
    /// The run already finished.
    #[error(transparent)]
    Finished(#[from] CancelRefused),
    /// The caller may not cancel this job's runs.
    #[error(transparent)]
    Denied(#[from] Denied),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A cancelled run, with the view of its whole fire.
#[derive(Debug, Clone)]
pub struct Cancelled {
    /// The run, now `cancelled`, and its fire's items.
    pub fire: Fire,
    /// The state it was cancelled in.
    pub was: RunState,
    /// Whether the cancel notice reached the broker.
    pub notified: bool,
}

/// Cancelling runs. Cheap to share.
pub struct Cancellations {
    store: Arc<dyn Store>,
    notices: Arc<ConfirmedPublisher>,
}

impl Cancellations {
    /// Cancels runs kept in `store`, publishing notices with `notices`.
    pub fn new(store: Arc<dyn Store>, notices: Arc<ConfirmedPublisher>) -> Self {
        Self { store, notices }
    }

    /// Cancels run `id` on behalf of `caller`: see the module docs.
    pub async fn cancel(&self, caller: &Caller, id: Uuid) -> Result<Cancelled, CancelError> {
        caller.check(Action::CancelRuns, None)?;
        let run = self
            .store
            .get_run(id)
            .await?
            .ok_or(CancelError::RunNotFound(id))?;
        let Some(job) = self.store.get_job(run.job_id).await? else {
            return Err(CancelError::RunNotFound(id));
        };
        caller.check(Action::CancelRuns, Some(&job.spec.app))?;
        let now = Utc::now();
        let was = std::sync::Mutex::new(run.state);
        let change = |run: &mut crate::domain::Run, _: &crate::domain::JobSettings| {
            *was.lock().expect("state lock") = run.state;
            cancel(run, &caller.name, now).is_ok()
        };
        let (changed, run) = self
            .store
            .update_run(id, &change)
            .await?
            .ok_or(CancelError::RunNotFound(id))?;
        let was = *was.lock().expect("state lock");
        if !changed {
            return Err(CancelRefused { state: run.state }.into());
        }
        metrics::counter!(telemetry::RUNS_CANCELLED, "state" => was.as_str()).increment(1);
        info!(run_id = %id, job_id = %run.job_id, by = %caller.name, was = %was, "run cancelled");
        let entry = AuditEntry::now(
            &caller.name,
            actions::RUN_CANCEL,
            format!("run:{id}"),
            Some(&job.spec.app),
            json!({"run_id": id, "job_id": run.job_id, "attempt": run.attempt, "was": was}),
        );
        audit::record(self.store.as_ref(), vec![entry]).await;
        let notice = CancelMessage::new(id, &job.spec.settings.target.group, now, &caller.name);
        let notified = match self.notify(&notice).await {
            Ok(()) => true,
            Err(error) => {
                warn!(%error, run_id = %id, "cannot publish the cancel notice; consumers are not told");
                metrics::counter!(telemetry::CANCEL_NOTICE_FAILURES).increment(1);
                false
            }
        };
        let items = if run.shard_total <= 1 {
            vec![run.clone()]
        } else {
            fire_items(self.store.as_ref(), &run).await?
        };
        Ok(Cancelled {
            fire: Fire { run, items },
            was,
            notified,
        })
    }

    /// Publishes `notice` to the cancel notices stream, declaring it first.
    async fn notify(&self, notice: &CancelMessage) -> Result<(), PublishError> {
        self.notices.declare_cancel_notices().await?;
        self.notices
            .publish(
                "",
                topology::CANCEL_NOTICES,
                &notice.to_vec(),
                BasicProperties::default().with_content_type("application/json".into()),
            )
            .await
    }
}
