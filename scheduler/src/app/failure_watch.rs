//! Pause on failure, applied: [`Jobs::pause_failing`] pauses the jobs whose last
//! `pause_after_failures` finished runs all ended `dead` (the rule is
//! [`crate::domain::failure_pause`]), and [`FailureWatch`] runs it every interval for
//! the shards this node owns.
//!
//! Each pause goes through the job-change protocol at the version the store read, with
//! the reason on the job (`paused_reason`). A job changed meanwhile (by a user, or by
//! another node that paused it first) fails the version check and is left to the next
//! pass, which judges it again from the store: the sweep is idempotent, so two nodes or
//! a repeated pass pause a job once, and record one audit entry. Every pause is audited
//! as `job.pause` by the actor `scheduler`, counted in
//! `chime_jobs_auto_paused_total{app}`, and logged at WARN.

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{
    audit::{self, job_target},
    jobs::{Jobs, JobsError},
};
use crate::{
    cluster::Ownership,
    domain::{
        Job,
        audit::{AuditEntry, actions},
        failure_pause,
    },
    telemetry,
};

/// The audit trail's actor for what the scheduler does by itself.
pub const SCHEDULER_ACTOR: &str = "scheduler";

impl Jobs {
    /// Pauses the jobs of `shards` (`None`: every shard) that tripped their
    /// `pause_after_failures` (see the module documentation); returns them as stored.
    pub async fn pause_failing(&self, shards: Option<&[u32]>) -> Result<Vec<Job>, JobsError> {
        let mut paused = Vec::new();
        for job in self.store().failing_jobs(shards).await? {
            let Some(limit) = job.spec.settings.pause_after_failures else {
                continue;
            };
            let reason = failure_pause::reason(limit);
            let mut spec = job.spec.clone();
            spec.paused = true;
            let (current, why) = (job.clone(), reason.clone());
            let stored = self
                .whole_change(job.id, move |store, since| async move {
                    let mut updated = current.updated(spec, since);
                    updated.paused_reason = Some(why);
                    store.update_job(&updated, current.version, false).await
                })
                .await;
            match stored {
                Ok(stored) => {
                    warn!(job = %stored.id, app = %stored.spec.app, name = %stored.spec.name,
                        failures = limit, "paused a job after consecutive failed runs");
                    metrics::counter!(telemetry::JOBS_AUTO_PAUSED, "app" => stored.spec.app.clone())
                        .increment(1);
                    audit::record(self.store().as_ref(), vec![pause_entry(&stored, &reason)]).await;
                    paused.push(stored);
                }
                // Changed since it was read: the next pass judges it again.
                Err(JobsError::VersionConflict { .. } | JobsError::NotFound(_)) => {
                    debug!(job = %job.id, "a failing job changed before it was paused");
                }
                Err(error) => return Err(error),
            }
        }
        Ok(paused)
    }
}

/// The audit entry of the scheduler pausing `job` for `reason`: a `job.pause` with the
/// job's definition, as a user's pause records, and the reason.
fn pause_entry(job: &Job, reason: &str) -> AuditEntry {
    AuditEntry::now(
        SCHEDULER_ACTOR,
        actions::JOB_PAUSE,
        job_target(job.id),
        Some(&job.spec.app),
        json!({
            "version": job.version,
            "app": job.spec.app,
            "name": job.spec.name,
            "paused": job.spec.paused,
            "paused_reason": reason,
            "settings": serde_json::to_value(&job.spec.settings).unwrap_or(Value::Null),
        }),
    )
}

/// Runs [`Jobs::pause_failing`] for this node's shards every interval.
pub struct FailureWatch {
    jobs: Arc<Jobs>,
    ownership: Ownership,
    interval: Duration,
}

impl FailureWatch {
    /// A watch over `ownership`'s shards through `jobs`, a pass every `interval`.
    pub fn new(jobs: Arc<Jobs>, ownership: Ownership, interval: Duration) -> Self {
        Self {
            jobs,
            ownership,
            interval,
        }
    }

    /// One pass: the jobs it paused. A node that owns no shard does nothing.
    pub async fn run_once(&self) -> Result<Vec<Job>, JobsError> {
        let shards = self.ownership.shard_filter();
        if shards.as_deref().is_some_and(<[u32]>::is_empty) {
            return Ok(Vec::new());
        }
        self.jobs.pause_failing(shards.as_deref()).await
    }

    /// Passes every interval until `stop` is cancelled; a failed pass is logged, counted
    /// and tried again on the next.
    pub async fn run(self, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(self.interval) => {}
            }
            if let Err(error) = self.run_once().await {
                warn!(%error, "the pause-on-failure check failed; retrying on the next pass");
                metrics::counter!(telemetry::STORE_ERRORS, "operation" => "failure_watch")
                    .increment(1);
            }
        }
    }
}
