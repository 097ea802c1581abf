//! Applying consumers' replies on SQLite: a batch costs one commit and a few statements
//! per round, not one per reply.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::{SqliteConnection, SqlitePool};
use uuid::Uuid;

use chime_consumer::protocol::{
    AckMessage, HeartbeatMessage, ObserveMessage, PresenceMessage, Reply, ResultMessage,
    TaskOutcome,
};

use super::{
    rows::{ms, record_text},
    runs,
};
use crate::store::corrupt;
use crate::{
    domain::{JobSettings, retry::ResultVerdict},
    store::{
        Jitter, RecordedReplies, RepliesFailed, ReplyApplied, ReplyEffect, StoreError,
        broadcast_receipt, reply_batch,
        reply_plan::{self, Round, RunFacts, SingleWrite, Success},
    },
};

/// Applies `batch` at `now`, round by round (see [`reply_plan`]), one write transaction
/// per round: per round one statement reads its runs, one writes its acks and one its
/// successes; its replies to broadcast runs are then recorded as receipts, each run read
/// and written once. Each statement is a trip to sqlx's SQLite worker thread, which
/// costs far more than SQLite's own work.
pub(super) async fn record_replies(
    writer: &SqlitePool,
    batch: &[&Reply],
    now: DateTime<Utc>,
    jitter: &Jitter<'_>,
) -> Result<RecordedReplies, RepliesFailed> {
    reply_batch::record_rounds(batch, |round| {
        record_round(writer, batch, round, now, jitter)
    })
    .await
}

/// Applies one round of `batch` in one write transaction.
async fn record_round(
    writer: &SqlitePool,
    batch: &[&Reply],
    round: Round,
    now: DateTime<Utc>,
    jitter: &Jitter<'_>,
) -> Result<Vec<(usize, ReplyApplied)>, StoreError> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    let (ids, failure_ids) = reply_plan::round_ids(batch, &round);
    let facts = read_runs(&mut tx, &ids, &failure_ids).await?;
    let plan = reply_plan::plan_round(batch, &round, &facts, now, jitter);
    write_acks(&mut tx, &plan.acks, now).await?;
    write_successes(&mut tx, &plan.successes).await?;
    let mut effects = plan.decided;
    for (index, single) in plan.singles {
        effects.push((index, write_single(&mut tx, single, now).await?));
    }
    for (run_id, indices) in broadcast_receipt::take_receipts(batch, &mut effects) {
        let found = runs::read_run(&mut tx, run_id).await?;
        let (receipts, write) =
            broadcast_receipt::decide_receipts(found, batch, &indices, now, jitter);
        if let Some(run) = write {
            runs::write_run(&mut tx, &run).await?;
        }
        effects.extend(receipts);
    }
    tx.commit().await?;
    Ok(effects)
}

/// Reads the runs `ids` (the write transaction already excludes other writers); the job
/// settings only of `failure_ids`. The runs come back as one JSON array in one row: sqlx
/// hands each row from its SQLite worker thread over a channel, a wake-up per row, which
/// at a few thousand replies a second cost more than the query.
async fn read_runs(
    conn: &mut SqliteConnection,
    ids: &[Uuid],
    failure_ids: &[Uuid],
) -> Result<HashMap<Uuid, RunFacts>, StoreError> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Option<String> = sqlx::query_scalar(
        "SELECT json_group_array(json_array(
                    r.id, r.state, r.attempt, r.mode,
                    CASE WHEN r.id IN (SELECT value FROM json_each(?2)) THEN j.settings END))
         FROM runs r JOIN jobs j ON j.id = r.job_id
         WHERE r.id IN (SELECT value FROM json_each(?1))",
    )
    .bind(json!(ids).to_string())
    .bind(json!(failure_ids).to_string())
    .fetch_one(&mut *conn)
    .await?;
    let rows: Vec<(String, String, u32, String, Option<String>)> =
        serde_json::from_str(rows.as_deref().unwrap_or("[]"))
            .map_err(|e| corrupt("the runs of a reply round", e))?;
    let mut facts = HashMap::with_capacity(rows.len());
    for (id, state, attempt, mode, settings) in rows {
        let what = format!("run {id}");
        let settings = settings
            .map(|text| serde_json::from_str::<JobSettings>(&text))
            .transpose()
            .map_err(|e| corrupt(&what, e))?;
        let run = RunFacts::from_columns(&what, &state, attempt, &mode, settings)?;
        facts.insert(id.parse().map_err(|e| corrupt(&what, e))?, run);
    }
    Ok(facts)
}

/// Acks that apply: each run becomes `acked`, its result due within its run timeout.
async fn write_acks(
    conn: &mut SqliteConnection,
    acks: &[&AckMessage],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    if acks.is_empty() {
        return Ok(());
    }
    let rows: Vec<Value> = acks
        .iter()
        .map(|a| json!([a.task_id, ms(a.acked_at), a.consumer]))
        .collect();
    sqlx::query(
        "UPDATE runs SET state = 'acked', acked_at = a.at, consumer = a.consumer,
             dispatched_at = COALESCE(runs.dispatched_at, a.at),
             due_at = ?2 + runs.run_timeout_ms
         FROM (SELECT value ->> 0 AS id, value ->> 1 AS at, value ->> 2 AS consumer
               FROM jsonb_each(?1)) AS a
         WHERE runs.id = a.id",
    )
    .bind(Value::Array(rows).to_string())
    .bind(ms(now))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Results that succeed: each run becomes `succeeded` with its output.
async fn write_successes(
    conn: &mut SqliteConnection,
    successes: &[Success<'_>],
) -> Result<(), StoreError> {
    if successes.is_empty() {
        return Ok(());
    }
    let rows: Vec<Value> = successes
        .iter()
        .map(|s| {
            let r = s.result;
            let output = match &r.outcome {
                TaskOutcome::Succeeded { output } => output.as_ref().map(Value::to_string),
                TaskOutcome::Failed { .. } => None,
            };
            json!([
                r.task_id,
                ms(r.finished_at),
                r.consumer,
                output,
                ms(s.acked_at())
            ])
        })
        .collect();
    sqlx::query(
        "UPDATE runs SET state = 'succeeded', finished_at = a.at, consumer = a.consumer,
             output = a.output, error = NULL, due_at = NULL,
             acked_at = COALESCE(runs.acked_at, a.acked_at),
             dispatched_at = COALESCE(runs.dispatched_at, a.acked_at)
         FROM (SELECT value ->> 0 AS id, value ->> 1 AS at, value ->> 2 AS consumer,
                      value ->> 3 AS output, value ->> 4 AS acked_at
               FROM jsonb_each(?1)) AS a
         WHERE runs.id = a.id",
    )
    .bind(Value::Array(rows).to_string())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Writes a reply that is applied on its own.
async fn write_single(
    conn: &mut SqliteConnection,
    single: SingleWrite<'_>,
    now: DateTime<Utc>,
) -> Result<ReplyApplied, StoreError> {
    match &single {
        SingleWrite::Heartbeat(heartbeat) => {
            return Ok((record_heartbeat(conn, heartbeat, now).await?, None));
        }
        SingleWrite::Failure(result, verdict) => write_failure(conn, result, verdict, now).await?,
        SingleWrite::Presence(presence) => record_presence(conn, presence).await?,
        SingleWrite::Observe(observe) => record_observer(conn, observe).await?,
        SingleWrite::Late(result) => record_late_result(conn, result).await?,
    }
    Ok(single.written())
}

async fn record_heartbeat(
    conn: &mut SqliteConnection,
    heartbeat: &HeartbeatMessage,
    now: DateTime<Utc>,
) -> Result<ReplyEffect, StoreError> {
    let progress = heartbeat
        .progress
        .as_ref()
        .map(|p| serde_json::to_string(p).expect("progress serialises"));
    let applied = sqlx::query(
        "UPDATE runs SET state = 'acked', heartbeat_at = ?2, consumer = ?3,
             acked_at = COALESCE(acked_at, ?2), dispatched_at = COALESCE(dispatched_at, ?2),
             progress = COALESCE(?5, progress), due_at = ?6 + run_timeout_ms
         WHERE id = ?1 AND state IN ('dispatched', 'acked') AND attempt = ?4
           AND mode <> 'broadcast'",
    )
    .bind(heartbeat.task_id.to_string())
    .bind(ms(heartbeat.at))
    .bind(&heartbeat.consumer)
    .bind(heartbeat.attempt)
    .bind(progress)
    .bind(ms(now))
    .execute(&mut *conn)
    .await?
    .rows_affected()
        == 1;
    reply_effect(conn, heartbeat.task_id, applied).await
}

/// A failed attempt: the run is retried later or given up, and the attempt goes into
/// its history.
async fn write_failure(
    conn: &mut SqliteConnection,
    result: &ResultMessage,
    verdict: &ResultVerdict,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let id = result.task_id.to_string();
    let finished = ms(result.finished_at);
    let update = match verdict {
        ResultVerdict::Retry { at, record } => sqlx::query(
            "UPDATE runs SET state = 'failed', finished_at = ?2, consumer = ?3, error = ?4,
                 due_at = ?5, history = json_insert(history, '$[#]', json(?6)),
                 acked_at = COALESCE(acked_at, ?2), dispatched_at = COALESCE(dispatched_at, ?2)
             WHERE id = ?1",
        )
        .bind(&id)
        .bind(finished)
        .bind(&result.consumer)
        .bind(record.error.clone())
        .bind(ms(*at))
        .bind(record_text(Some(record))),
        ResultVerdict::Dead { reason, record } => sqlx::query(
            "UPDATE runs SET state = 'dead', finished_at = ?2, consumer = ?3, error = ?4,
                 due_at = ?5, history = json_insert(history, '$[#]', json(?6)),
                 acked_at = COALESCE(acked_at, ?2), dispatched_at = COALESCE(dispatched_at, ?2)
             WHERE id = ?1",
        )
        .bind(&id)
        .bind(finished)
        .bind(&result.consumer)
        .bind(reason.clone())
        .bind(ms(now))
        .bind(record_text(Some(record))),
        ResultVerdict::Stale | ResultVerdict::Succeeded => {
            unreachable!("only failures are written one by one")
        }
    };
    update.execute(&mut *conn).await?;
    Ok(())
}

async fn record_presence(
    conn: &mut SqliteConnection,
    presence: &PresenceMessage,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO consumers (instance, group_name, zone, broadcast, last_seen, first_seen, version)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)
         ON CONFLICT (instance) DO UPDATE SET group_name = ?2, zone = ?3, broadcast = ?4,
             last_seen = MAX(last_seen, ?5), first_seen = MIN(first_seen, ?5), version = ?6",
    )
    .bind(&presence.instance)
    .bind(&presence.group)
    .bind(&presence.zone)
    .bind(presence.broadcast)
    .bind(ms(presence.at))
    .bind(&presence.version)
    .execute(conn)
    .await?;
    Ok(())
}

async fn record_observer(
    conn: &mut SqliteConnection,
    observe: &ObserveMessage,
) -> Result<(), StoreError> {
    for pattern in &observe.patterns {
        sqlx::query(
            "INSERT INTO observers (name, pattern, last_seen) VALUES (?1, ?2, ?3)
             ON CONFLICT (name, pattern) DO UPDATE SET last_seen = MAX(last_seen, ?3)",
        )
        .bind(&observe.observer)
        .bind(pattern)
        .bind(ms(observe.at))
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// The effect of an ack or heartbeat: applied, or why not.
async fn reply_effect(
    conn: &mut SqliteConnection,
    run_id: Uuid,
    applied: bool,
) -> Result<ReplyEffect, StoreError> {
    if applied {
        return Ok(ReplyEffect::Applied);
    }
    let mode: Option<String> = sqlx::query_scalar("SELECT mode FROM runs WHERE id = ?")
        .bind(run_id.to_string())
        .fetch_optional(conn)
        .await?;
    Ok(ReplyEffect::not_applied(mode.as_deref()))
}

/// A result for a run already `dead`: its history gets the late outcome once per
/// attempt (a redelivered result adds nothing), and a late success's output is kept if
/// the run has none. The run stays `dead`.
async fn record_late_result(
    conn: &mut SqliteConnection,
    result: &ResultMessage,
) -> Result<(), StoreError> {
    let record = crate::domain::run::late_record(result);
    let output = match &result.outcome {
        TaskOutcome::Succeeded { output } => output.as_ref().map(|o| o.to_string()),
        TaskOutcome::Failed { .. } => None,
    };
    sqlx::query(
        "UPDATE runs SET history = json_insert(history, '$[#]', json(?2)),
             output = COALESCE(output, ?3)
         WHERE id = ?1 AND state IN ('dead', 'cancelled')
           AND NOT EXISTS (SELECT 1 FROM json_each(runs.history) AS h
                           WHERE json_extract(h.value, '$.event') IN ('late_success', 'late_failure')
                             AND json_extract(h.value, '$.attempt') = ?4)",
    )
    .bind(result.task_id.to_string())
    .bind(serde_json::to_string(&record).expect("records serialise"))
    .bind(output)
    .bind(result.attempt)
    .execute(conn)
    .await?;
    Ok(())
}
