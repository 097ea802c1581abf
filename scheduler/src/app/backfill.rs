//! [`Jobs::backfill`]: records the fires a job's schedule would have made in a past
//! range, as runs with trigger `backfill` and the scheduled fires' own ids, so a fire
//! already recorded (by the timer, a trigger of the same ids, or an earlier backfill) is
//! not recorded again. The range's fires are computed by
//! [`crate::domain::backfill`]; here they are stored, spaced out and audited.
//!
//! Dispatch at a bounded rate: the `k`-th fire of the range is recorded `scheduled` and
//! due `k / rate` seconds after the request. Those due within the first second go to the
//! dispatcher at once; the reconciler publishes each of the others once it is overdue
//! (its usual `republish_after` after its due time, as for any `scheduled` run whose
//! publish is pending), so a large backfill flows out at about `rate` a second and
//! survives a restart of the node that recorded it.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    audit::{self, job_target},
    jobs::{Jobs, JobsError},
};
use crate::{
    domain::{
        LiveZones, RunTrigger,
        access::{Action, Caller},
        audit::{AuditEntry, actions},
        backfill::{self, BackfillOverlap, BackfillRequest},
    },
    store::{live_since, needs_live_zones},
    telemetry,
};

/// What a backfill did (or, dry, would look at).
#[derive(Debug, Clone, PartialEq)]
pub struct Backfill {
    /// The job.
    pub job_id: Uuid,
    /// The checked request.
    pub request: BackfillRequest,
    /// Fire times of the range the backfill covers, ascending.
    pub fire_times: Vec<DateTime<Utc>>,
    /// Fires recorded by this request (at least one of its runs was new).
    pub recorded: usize,
    /// Fires whose runs were all recorded already.
    pub present: usize,
    /// Runs recorded by this request.
    pub runs: usize,
    /// When the last recorded fire is due (it goes out then, give or take the
    /// reconciler's interval); None when nothing was recorded.
    pub last_due_at: Option<DateTime<Utc>>,
    /// Nothing was recorded: the answer says what would be.
    pub dry_run: bool,
}

impl Jobs {
    /// Backfills job `id` over `request` (see the module docs): records the range's
    /// fires not recorded yet, each as one run per item, stamped `fired_by` this node,
    /// and hands the first second's tasks to the dispatcher. With overlap `forbid`, a job
    /// with an unfinished run gets nothing and the call fails with [`JobsError::Busy`].
    /// A zone job with no zone to run in records nothing ([`JobsError::NoLiveZone`]).
    /// `dry_run` checks and counts the range's fires and records nothing.
    pub async fn backfill(
        &self,
        caller: &Caller,
        id: Uuid,
        request: BackfillRequest,
        dry_run: bool,
    ) -> Result<Backfill, JobsError> {
        let job = self.job_for(caller, Action::TriggerJobs, id).await?;
        let now = Utc::now();
        let live = if needs_live_zones(&job) {
            self.store.live_zones(live_since(now)).await?
        } else {
            LiveZones::default()
        };
        let items = job.spec.settings.target.items(&live).len();
        if items == 0 {
            return Err(JobsError::NoLiveZone {
                group: job.spec.settings.target.group.clone(),
            });
        }
        let fire_times = backfill::fire_times(
            &job.spec.settings.schedule,
            job.next_fire_at,
            job.spec.paused,
            &backfill::within_window(&request, &job.spec.settings.window),
            backfill::max_fires(items),
        )?;
        let mut outcome = Backfill {
            job_id: job.id,
            request,
            fire_times,
            recorded: 0,
            present: 0,
            runs: 0,
            last_due_at: None,
            dry_run,
        };
        if dry_run || outcome.fire_times.is_empty() {
            return Ok(outcome);
        }
        let mut runs = Vec::with_capacity(outcome.fire_times.len() * items);
        for (k, fire_time) in outcome.fire_times.iter().enumerate() {
            let due = backfill::due_at(now, k, request.rate);
            for mut run in job.new_runs(*fire_time, RunTrigger::Backfill, now, &live) {
                run.fired_by = Some(self.node.clone());
                run.due_at = Some(due);
                runs.push((k, run));
            }
        }
        let all: Vec<_> = runs.iter().map(|(_, run)| run.clone()).collect();
        let require_idle = request.overlap == BackfillOverlap::Forbid;
        let Some(inserted) = self
            .store
            .insert_backfill(job.id, &all, require_idle)
            .await?
        else {
            return Err(JobsError::Busy(job.id));
        };
        let mut at_once = Vec::new();
        let mut fired = vec![false; outcome.fire_times.len()];
        for (k, run) in &runs {
            if !inserted.contains(&run.id) {
                continue;
            }
            fired[*k] = true;
            outcome.runs += 1;
            outcome.last_due_at = outcome.last_due_at.max(run.due_at);
            if backfill::dispatch_at_once(*k, request.rate) {
                at_once.push(job.due_task(run));
            }
        }
        outcome.recorded = fired.iter().filter(|f| **f).count();
        outcome.present = fired.len() - outcome.recorded;
        if outcome.recorded > 0 {
            metrics::counter!(telemetry::FIRES, "trigger" => "backfill")
                .increment(outcome.recorded as u64);
        }
        if !at_once.is_empty() {
            self.dispatch.submit(at_once);
        }
        let entry = AuditEntry::now(
            &caller.name,
            actions::JOB_BACKFILL,
            job_target(job.id),
            Some(&job.spec.app),
            serde_json::json!({
                "from": crate::domain::timestamp::timestamp(request.from),
                "to": crate::domain::timestamp::timestamp(request.to),
                "rate": request.rate,
                "overlap": request.overlap.as_str(),
                "fires": outcome.fire_times.len(),
                "recorded": outcome.recorded,
                "present": outcome.present,
                "runs": outcome.runs,
            }),
        );
        audit::record(self.store.as_ref(), vec![entry]).await;
        Ok(outcome)
    }
}
