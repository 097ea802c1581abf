//! Fires recorded ahead of their time but never published, found when this node starts
//! or takes over their shard more than `misfire_grace` after their fire time (the node
//! that recorded them stopped in between): judged by their job's misfire policy like any
//! other missed fire ([`crate::domain::judge_recorded`]), not published as if on time.
//! A fire the policy drops becomes `dead` with the reason (error `skipped: ...`, history
//! event `misfire_skipped`) and no dead letter; counted in
//! `chime_fires_skipped_total{reason="misfire"}`.

use std::collections::BTreeMap;

use chime_consumer::protocol::AttemptRecord;
use chrono::{DateTime, Utc};
use tracing::info;
use uuid::Uuid;

use crate::{
    domain::{RunState, RunTrigger, judge_recorded},
    store::{Expect, OverdueRun, Store, StoreError},
    telemetry,
};

/// When `item`'s fire was due to be published: its fire time plus its jitter.
fn due(item: &OverdueRun) -> DateTime<Utc> {
    item.job.due_time(item.run.fire_time, item.run.trigger)
}

/// Whether `item` is a first-attempt scheduled fire more than `grace` late at `now`
/// (judged against when it was due: its fire time plus its jitter).
pub fn is_missed(item: &OverdueRun, now: DateTime<Utc>, grace: chrono::Duration) -> bool {
    item.run.state == RunState::Scheduled
        && item.run.trigger == RunTrigger::Schedule
        && item.run.attempt == 1
        && due(item) < now - grace
}

/// Judges `missed` (see [`is_missed`]) per job at `now`: drops those the policy drops
/// (recorded as skipped) and returns those to publish.
pub async fn judge(
    store: &dyn Store,
    missed: Vec<OverdueRun>,
    now: DateTime<Utc>,
    grace: chrono::Duration,
) -> Result<Vec<OverdueRun>, StoreError> {
    let mut by_job: BTreeMap<Uuid, Vec<OverdueRun>> = BTreeMap::new();
    for item in missed {
        by_job.entry(item.job.id).or_default().push(item);
    }
    let mut publish = Vec::new();
    for (_, mut items) in by_job {
        // Items of a sharded fire share a fire time: judge fire times, not runs. Fires
        // are judged by when they were due (with jitter), in that order.
        items.sort_by_key(|item| (due(item), item.run.fire_time, item.run.shard));
        let mut fires: Vec<(DateTime<Utc>, DateTime<Utc>)> =
            items.iter().map(|i| (due(i), i.run.fire_time)).collect();
        fires.dedup();
        let times: Vec<DateTime<Utc>> = fires.iter().map(|(_, t)| *t).collect();
        let dues: Vec<DateTime<Utc>> = fires.iter().map(|(d, _)| *d).collect();
        let Some(job) = items.first().map(|item| item.job.clone()) else {
            continue;
        };
        let settings = &job.spec.settings;
        // The timer may have fired the job's own missed fires (moving `next_fire_at` on)
        // before this pass read the job: judge as of the fire after the last one recorded
        // ahead, which is what `next_fire_at` was when the recording node stopped.
        let after_recorded = times
            .iter()
            .max()
            .and_then(|last| settings.schedule.next_after(*last, *last));
        let next_fire_at = match (job.next_fire_at, after_recorded) {
            (Some(next), Some(after)) => Some(next.min(after)),
            (next, _) => next,
        };
        let keep = judge_recorded(
            &dues,
            &settings.schedule,
            next_fire_at,
            now,
            settings.misfire,
            settings.catch_up_limit,
            grace,
        );
        let kept: BTreeMap<DateTime<Utc>, bool> = times.into_iter().zip(keep).collect();
        let policy = settings.misfire.as_str();
        metrics::counter!(telemetry::MISFIRES, "policy" => policy).increment(1);
        let mut skipped = 0;
        for item in items {
            if kept.get(&item.run.fire_time).copied().unwrap_or(true) {
                publish.push(item);
                continue;
            }
            let late_s = (now - due(&item)).num_milliseconds() as f64 / 1000.0;
            let reason = format!(
                "skipped: recorded ahead but not published; {late_s:.1}s late when this node took it over (misfire policy {policy})"
            );
            let record = AttemptRecord {
                attempt: item.run.attempt,
                event: "misfire_skipped".into(),
                at: now,
                consumer: None,
                error: Some(reason.clone()),
                retry_at: None,
            };
            let expect = Expect::exactly(RunState::Scheduled, item.run.attempt);
            if store
                .kill_run(item.run.id, expect, &reason, Some(&record), true, now)
                .await?
            {
                skipped += 1;
            }
        }
        if skipped > 0 {
            metrics::counter!(telemetry::FIRES_SKIPPED, "reason" => "misfire").increment(skipped);
            info!(job = %format!("{}/{}", job.spec.app, job.spec.name), skipped, policy,
                "missed fires recorded ahead were skipped by the misfire policy");
        }
    }
    Ok(publish)
}
