//! The fire transaction's decisions, without I/O, shared by both backends: which runs a
//! batch of locked jobs records and where each job's next fire time moves.

use std::collections::HashSet;

use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use chime_consumer::protocol::TaskMessage;

use super::types::{FireBatch, Firing, needs_live_zones};
use crate::domain::{Job, LiveZones, OverlapPolicy, Run};

/// A fire transaction's plan: runs to insert and next fire times to write.
pub(crate) struct FirePlanBatch {
    /// Runs to insert, with their tasks.
    pub runs: Vec<(Run, TaskMessage)>,
    /// Jobs whose next fire time moves, and where to.
    pub advance: Vec<(Uuid, Option<DateTime<Utc>>)>,
    /// The timer's view, returned to the caller once the transaction commits.
    pub batch: FireBatch,
}

/// Runs the locked job rows through [`Job::fires_due`]; shared by both backends' fire
/// transactions. `requested` ids with no row (deleted jobs) leave the timer. Jobs in
/// `busy` have an unfinished run: if their overlap policy is `forbid`, their due fires
/// are skipped (the schedule still advances). Fires are armed `firing.ahead` of time,
/// except for `forbid` jobs; runs are stamped with `firing.node`.
pub(crate) fn plan_batch(
    requested: &[Uuid],
    jobs: &[Job],
    busy: &HashSet<Uuid>,
    now: DateTime<Utc>,
    grace: Duration,
    firing: &Firing,
    live: &LiveZones,
) -> FirePlanBatch {
    let node = firing.node.as_str();
    let mut plan = FirePlanBatch {
        runs: Vec::new(),
        advance: Vec::new(),
        batch: FireBatch::default(),
    };
    for job in jobs {
        let forbid = job.spec.settings.overlap == OverlapPolicy::Forbid;
        let until = if forbid { now } else { now + firing.ahead };
        if forbid {
            plan.batch.unarmed.push(job.id);
        }
        let mut fires = job.fires_due(now, until, grace, live);
        if fires.runs.is_empty() && fires.fire_times > 0 && needs_live_zones(job) {
            plan.batch.skipped_no_zone.push(job.id);
        }
        if !fires.runs.is_empty() && forbid && busy.contains(&job.id) {
            fires.runs.clear();
            plan.batch.skipped_overlap.push(job.id);
        }
        if fires.misfired {
            plan.batch.misfired.push(job.spec.settings.misfire);
        }
        if fires.next_fire_at != job.next_fire_at {
            plan.advance.push((job.id, fires.next_fire_at));
        }
        plan.batch
            .next_fire
            .push((job.id, fires.next_fire_at.filter(|_| !job.spec.paused)));
        plan.runs.extend(fires.runs.into_iter().map(|mut run| {
            run.fired_by = Some(node.to_string());
            let task = job.task_message(&run);
            (run, task)
        }));
    }
    for id in requested {
        if !jobs.iter().any(|job| job.id == *id) {
            plan.batch.next_fire.push((*id, None));
        }
    }
    plan
}
