//! Applying consumers' replies on PostgreSQL: a batch costs one commit and a few
//! statements per round, not one per reply.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgPool, Row, types::Json};
use uuid::Uuid;

use chime_consumer::protocol::{
    AckMessage, HeartbeatMessage, ObserveMessage, PresenceMessage, Reply, ResultMessage,
    TaskOutcome,
};

use crate::{
    domain::{JobSettings, retry::ResultVerdict},
    store::{
        Jitter, RecordedReplies, RepliesFailed, ReplyApplied, ReplyEffect, StoreError,
        broadcast_receipt, corrupt, reply_batch,
        reply_plan::{self, Round, RunFacts, SingleWrite, Success},
    },
};

use super::{rows::MAX_SET_ROWS, runs};

/// Applies `batch` at `now`, round by round (see [`reply_plan`]), one transaction per
/// round: per part of a round (at most [`MAX_SET_ROWS`] tasks) one statement locks and
/// reads its runs in id order, one writes its acks and one its successes; its replies to
/// broadcast runs are then recorded as receipts, each run read and written once.
pub(super) async fn record_replies(
    pool: &PgPool,
    batch: &[&Reply],
    now: DateTime<Utc>,
    jitter: &Jitter<'_>,
) -> Result<RecordedReplies, RepliesFailed> {
    reply_batch::record_rounds(batch, |round| record_round(pool, batch, round, now, jitter)).await
}

/// Applies one round of `batch` in one transaction.
async fn record_round(
    pool: &PgPool,
    batch: &[&Reply],
    round: Round,
    now: DateTime<Utc>,
    jitter: &Jitter<'_>,
) -> Result<Vec<(usize, ReplyApplied)>, StoreError> {
    let mut tx = pool.begin().await?;
    let mut effects = Vec::with_capacity(round.len());
    // Parts follow each other in task order, so locks are still taken in id order.
    for part in reply_plan::parts(batch, &round, MAX_SET_ROWS) {
        let (ids, failure_ids) = reply_plan::round_ids(batch, part);
        let facts = lock_runs(&mut tx, &ids, &failure_ids).await?;
        let plan = reply_plan::plan_round(batch, part, &facts, now, jitter);
        write_acks(&mut tx, &plan.acks).await?;
        write_successes(&mut tx, &plan.successes).await?;
        let mut part_effects = plan.decided;
        for (index, single) in plan.singles {
            part_effects.push((index, write_single(&mut tx, single, now).await?));
        }
        for (run_id, indices) in broadcast_receipt::take_receipts(batch, &mut part_effects) {
            // Locked already, by `lock_runs`.
            let found = runs::lock_run(&mut tx, run_id).await?;
            let (receipts, write) =
                broadcast_receipt::decide_receipts(found, batch, &indices, now, jitter);
            if let Some(run) = write {
                runs::write_run(&mut tx, &run).await?;
            }
            part_effects.extend(receipts);
        }
        effects.extend(part_effects);
    }
    tx.commit().await?;
    Ok(effects)
}

/// Locks the runs `ids` in id order (so collectors and the dispatcher's marker cannot
/// deadlock) and reads them; the job settings only of `failure_ids`, in a second read:
/// joining every run to its job would cost a job lookup per reply, and only failures
/// need the retry settings.
async fn lock_runs(
    conn: &mut PgConnection,
    ids: &[Uuid],
    failure_ids: &[Uuid],
) -> Result<HashMap<Uuid, RunFacts>, StoreError> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query(
        "SELECT id, state, attempt, mode FROM runs
         WHERE id = ANY($1) ORDER BY id FOR UPDATE",
    )
    .bind(ids)
    .fetch_all(&mut *conn)
    .await?;
    let mut settings = failure_settings(conn, failure_ids).await?;
    let mut facts = HashMap::with_capacity(rows.len());
    for row in rows {
        let id: Uuid = row.try_get("id")?;
        let what = format!("run {id}");
        let run = RunFacts::from_columns(
            &what,
            row.try_get("state")?,
            row.try_get::<i32, _>("attempt")? as u32,
            row.try_get("mode")?,
            settings.remove(&id),
        )?;
        facts.insert(id, run);
    }
    Ok(facts)
}

/// The settings of the jobs of the runs `failure_ids` (already locked by the caller).
async fn failure_settings(
    conn: &mut PgConnection,
    failure_ids: &[Uuid],
) -> Result<HashMap<Uuid, JobSettings>, StoreError> {
    if failure_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query(
        "SELECT r.id, j.settings FROM runs r JOIN jobs j ON j.id = r.job_id
         WHERE r.id = ANY($1)",
    )
    .bind(failure_ids)
    .fetch_all(&mut *conn)
    .await?;
    let mut settings = HashMap::with_capacity(rows.len());
    for row in rows {
        let id: Uuid = row.try_get("id")?;
        let Json(job_settings) = row
            .try_get::<Json<JobSettings>, _>("settings")
            .map_err(|e| corrupt(format!("run {id}"), e))?;
        settings.insert(id, job_settings);
    }
    Ok(settings)
}

// The set-based statements below name their runs twice: with `r.id = ANY($1)`
// PostgreSQL can find them through the primary key; joined only to `UNNEST`, they are
// planned as a hash join over a sequential scan of `runs` (see [`MAX_SET_ROWS`]).

/// Acks that apply: each run becomes `acked`, its result due within its run timeout.
async fn write_acks(conn: &mut PgConnection, acks: &[&AckMessage]) -> Result<(), StoreError> {
    if acks.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = acks.iter().map(|a| a.task_id).collect();
    let at: Vec<DateTime<Utc>> = acks.iter().map(|a| a.acked_at).collect();
    let consumers: Vec<&str> = acks.iter().map(|a| a.consumer.as_str()).collect();
    sqlx::query(
        "UPDATE runs r SET state = 'acked', acked_at = a.at, consumer = a.consumer,
             dispatched_at = COALESCE(r.dispatched_at, a.at),
             due_at = now() + r.run_timeout_ms * interval '1 millisecond'
         FROM UNNEST($1::uuid[], $2::timestamptz[], $3::text[]) AS a(id, at, consumer)
         WHERE r.id = ANY($1) AND r.id = a.id",
    )
    .bind(&ids)
    .bind(&at)
    .bind(&consumers)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Results that succeed: each run becomes `succeeded` with its output.
async fn write_successes(
    conn: &mut PgConnection,
    successes: &[Success<'_>],
) -> Result<(), StoreError> {
    if successes.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = successes.iter().map(|s| s.result.task_id).collect();
    let at: Vec<DateTime<Utc>> = successes.iter().map(|s| s.result.finished_at).collect();
    let acked_at: Vec<DateTime<Utc>> = successes.iter().map(Success::acked_at).collect();
    let consumers: Vec<&str> = successes
        .iter()
        .map(|s| s.result.consumer.as_str())
        .collect();
    let outputs: Vec<Option<String>> = successes
        .iter()
        .map(|s| match &s.result.outcome {
            TaskOutcome::Succeeded { output } => output.as_ref().map(Value::to_string),
            TaskOutcome::Failed { .. } => None,
        })
        .collect();
    sqlx::query(
        "UPDATE runs r SET state = 'succeeded', finished_at = a.at, consumer = a.consumer,
             output = a.output::jsonb, error = NULL, due_at = NULL,
             acked_at = COALESCE(r.acked_at, a.acked_at),
             dispatched_at = COALESCE(r.dispatched_at, a.acked_at)
         FROM UNNEST($1::uuid[], $2::timestamptz[], $3::text[], $4::text[], $5::timestamptz[])
             AS a(id, at, consumer, output, acked_at)
         WHERE r.id = ANY($1) AND r.id = a.id",
    )
    .bind(&ids)
    .bind(&at)
    .bind(&consumers)
    .bind(&outputs)
    .bind(&acked_at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Writes a reply that is applied on its own.
async fn write_single(
    conn: &mut PgConnection,
    single: SingleWrite<'_>,
    now: DateTime<Utc>,
) -> Result<ReplyApplied, StoreError> {
    match &single {
        SingleWrite::Heartbeat(heartbeat) => {
            return Ok((record_heartbeat(conn, heartbeat).await?, None));
        }
        SingleWrite::Failure(result, verdict) => write_failure(conn, result, verdict, now).await?,
        SingleWrite::Presence(presence) => record_presence(conn, presence).await?,
        SingleWrite::Observe(observe) => record_observer(conn, observe).await?,
        SingleWrite::Late(result) => record_late_result(conn, result).await?,
    }
    Ok(single.written())
}

async fn record_heartbeat(
    conn: &mut PgConnection,
    heartbeat: &HeartbeatMessage,
) -> Result<ReplyEffect, StoreError> {
    let applied = sqlx::query(
        "UPDATE runs SET state = 'acked', heartbeat_at = $2, consumer = $3,
             acked_at = COALESCE(acked_at, $2), dispatched_at = COALESCE(dispatched_at, $2),
             progress = COALESCE($5, progress),
             due_at = now() + run_timeout_ms * interval '1 millisecond'
         WHERE id = $1 AND state IN ('dispatched', 'acked') AND attempt = $4
           AND mode <> 'broadcast'",
    )
    .bind(heartbeat.task_id)
    .bind(heartbeat.at)
    .bind(&heartbeat.consumer)
    .bind(heartbeat.attempt as i32)
    .bind(heartbeat.progress.as_ref().map(Json))
    .execute(&mut *conn)
    .await?
    .rows_affected()
        == 1;
    reply_effect(conn, heartbeat.task_id, applied).await
}

/// A failed attempt: the run is retried later or given up, and the attempt goes into
/// its history.
async fn write_failure(
    conn: &mut PgConnection,
    result: &ResultMessage,
    verdict: &ResultVerdict,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let update = match verdict {
        ResultVerdict::Retry { at, record } => sqlx::query(
            "UPDATE runs SET state = 'failed', finished_at = $2, consumer = $3, error = $4,
                 due_at = $5, history = history || jsonb_build_array($6::jsonb),
                 acked_at = COALESCE(acked_at, $2), dispatched_at = COALESCE(dispatched_at, $2)
             WHERE id = $1",
        )
        .bind(result.task_id)
        .bind(result.finished_at)
        .bind(&result.consumer)
        .bind(record.error.clone())
        .bind(*at)
        .bind(Json(record.clone())),
        ResultVerdict::Dead { reason, record } => sqlx::query(
            "UPDATE runs SET state = 'dead', finished_at = $2, consumer = $3, error = $4,
                 due_at = $5, history = history || jsonb_build_array($6::jsonb),
                 acked_at = COALESCE(acked_at, $2), dispatched_at = COALESCE(dispatched_at, $2)
             WHERE id = $1",
        )
        .bind(result.task_id)
        .bind(result.finished_at)
        .bind(&result.consumer)
        .bind(reason.clone())
        .bind(now)
        .bind(Json(record.clone())),
        ResultVerdict::Stale | ResultVerdict::Succeeded => {
            unreachable!("only failures are written one by one")
        }
    };
    update.execute(&mut *conn).await?;
    Ok(())
}

async fn record_presence(
    conn: &mut PgConnection,
    presence: &PresenceMessage,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO consumers (instance, group_name, zone, broadcast, last_seen, first_seen, version)
         VALUES ($1, $2, $3, $4, $5, $5, $6)
         ON CONFLICT (instance) DO UPDATE SET group_name = $2, zone = $3, broadcast = $4,
             last_seen = GREATEST(consumers.last_seen, $5),
             first_seen = LEAST(consumers.first_seen, $5), version = $6",
    )
    .bind(&presence.instance)
    .bind(&presence.group)
    .bind(&presence.zone)
    .bind(presence.broadcast)
    .bind(presence.at)
    .bind(&presence.version)
    .execute(conn)
    .await?;
    Ok(())
}

async fn record_observer(
    conn: &mut PgConnection,
    observe: &ObserveMessage,
) -> Result<(), StoreError> {
    let patterns: std::collections::BTreeSet<&str> =
        observe.patterns.iter().map(String::as_str).collect();
    let patterns: Vec<&str> = patterns.into_iter().collect();
    sqlx::query(
        "INSERT INTO observers (name, pattern, last_seen)
         SELECT $1, pattern, $3 FROM UNNEST($2::text[]) AS pattern
         ON CONFLICT (name, pattern) DO UPDATE
             SET last_seen = GREATEST(observers.last_seen, EXCLUDED.last_seen)",
    )
    .bind(&observe.observer)
    .bind(&patterns)
    .bind(observe.at)
    .execute(conn)
    .await?;
    Ok(())
}

/// The effect of an ack or heartbeat: applied, or why not.
async fn reply_effect(
    conn: &mut PgConnection,
    run_id: Uuid,
    applied: bool,
) -> Result<ReplyEffect, StoreError> {
    if applied {
        return Ok(ReplyEffect::Applied);
    }
    let mode: Option<String> = sqlx::query_scalar("SELECT mode FROM runs WHERE id = $1")
        .bind(run_id)
        .fetch_optional(conn)
        .await?;
    Ok(ReplyEffect::not_applied(mode.as_deref()))
}

/// A result for a run already `dead`: its history gets the late outcome once per
/// attempt (a redelivered result adds nothing), and a late success's output is kept if
/// the run has none. The run stays `dead`.
async fn record_late_result(
    conn: &mut PgConnection,
    result: &ResultMessage,
) -> Result<(), StoreError> {
    let record = crate::domain::run::late_record(result);
    let output = match &result.outcome {
        TaskOutcome::Succeeded { output } => output.clone(),
        TaskOutcome::Failed { .. } => None,
    };
    sqlx::query(
        "UPDATE runs SET history = history || jsonb_build_array($2::jsonb),
             output = COALESCE(output, $3)
         WHERE id = $1 AND state IN ('dead', 'cancelled')
           AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(history) AS h
                           WHERE h->>'event' IN ('late_success', 'late_failure')
                             AND (h->>'attempt')::int = $4)",
    )
    .bind(result.task_id)
    .bind(Json(&record))
    .bind(output)
    .bind(result.attempt as i32)
    .execute(conn)
    .await?;
    Ok(())
}
