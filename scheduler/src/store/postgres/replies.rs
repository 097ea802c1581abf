//! Applying consumers' replies on PostgreSQL: each function works inside the caller's
//! transaction, so a batch of replies costs one commit.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Row, types::Json};
use uuid::Uuid;

use chime_consumer::protocol::{
    AckMessage, DeliveryMode, HeartbeatMessage, ObserveMessage, PresenceMessage, Reply,
    ResultMessage, TaskOutcome,
};

use crate::{
    domain::{JobSettings, RunState, retry::ResultVerdict},
    store::{ReplyApplied, ReplyEffect, StoreError, corrupt, result_verdict},
};

/// Applies one reply at `now`.
pub(super) async fn record_reply(
    conn: &mut PgConnection,
    reply: &Reply,
    now: DateTime<Utc>,
) -> Result<ReplyApplied, StoreError> {
    Ok(match reply {
        Reply::Ack(ack) => (record_ack(conn, ack).await?, None),
        Reply::Heartbeat(heartbeat) => (record_heartbeat(conn, heartbeat).await?, None),
        Reply::Result(result) => record_result(conn, result, now).await?,
        Reply::Presence(presence) => {
            record_presence(conn, presence).await?;
            (ReplyEffect::Applied, None)
        }
        Reply::Observe(observe) => {
            record_observer(conn, observe).await?;
            (ReplyEffect::Applied, None)
        }
    })
}

async fn record_ack(conn: &mut PgConnection, ack: &AckMessage) -> Result<ReplyEffect, StoreError> {
    let applied = sqlx::query(
        "UPDATE runs SET state = 'acked', acked_at = $2, consumer = $3,
             dispatched_at = COALESCE(dispatched_at, $2),
             due_at = now() + run_timeout_ms * interval '1 millisecond'
         WHERE id = $1 AND state IN ('scheduled', 'dispatched') AND attempt = $4
           AND mode <> 'broadcast'",
    )
    .bind(ack.task_id)
    .bind(ack.acked_at)
    .bind(&ack.consumer)
    .bind(ack.attempt as i32)
    .execute(&mut *conn)
    .await?
    .rows_affected()
        == 1;
    reply_effect(conn, ack.task_id, applied).await
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

async fn record_result(
    conn: &mut PgConnection,
    result: &ResultMessage,
    now: DateTime<Utc>,
) -> Result<ReplyApplied, StoreError> {
    let Some(row) = sqlx::query(
        "SELECT r.state, r.attempt, r.mode, j.settings FROM runs r JOIN jobs j ON j.id = r.job_id
         WHERE r.id = $1 FOR UPDATE OF r",
    )
    .bind(result.task_id)
    .fetch_optional(&mut *conn)
    .await?
    else {
        return Ok((ReplyEffect::UnknownRun, None));
    };
    let what = format!("run {}", result.task_id);
    if row.try_get::<String, _>("mode")? == DeliveryMode::Broadcast.as_str() {
        return Ok((ReplyEffect::Broadcast, None));
    }
    let state: String = row.try_get("state")?;
    let state =
        RunState::parse(&state).ok_or_else(|| corrupt(&what, format!("state {state:?}")))?;
    let Json(settings) = row
        .try_get::<Json<JobSettings>, _>("settings")
        .map_err(|e| corrupt(&what, e))?;
    let attempt = row.try_get::<i32, _>("attempt")? as u32;
    let verdict = result_verdict(state, attempt, &settings, result, now);
    let update = match &verdict {
        ResultVerdict::Stale => return Ok((ReplyEffect::Stale, None)),
        ResultVerdict::Succeeded => {
            let output = match &result.outcome {
                TaskOutcome::Succeeded { output } => output.clone(),
                TaskOutcome::Failed { .. } => None,
            };
            sqlx::query(
                "UPDATE runs SET state = 'succeeded', finished_at = $2, consumer = $3,
                     output = $4, error = NULL, due_at = NULL,
                     acked_at = COALESCE(acked_at, $2), dispatched_at = COALESCE(dispatched_at, $2)
                 WHERE id = $1",
            )
            .bind(result.task_id)
            .bind(result.finished_at)
            .bind(&result.consumer)
            .bind(output)
        }
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
    };
    update.execute(&mut *conn).await?;
    Ok((ReplyEffect::Applied, verdict.state()))
}

async fn record_presence(
    conn: &mut PgConnection,
    presence: &PresenceMessage,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO consumers (instance, group_name, zone, broadcast, last_seen)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (instance) DO UPDATE SET group_name = $2, zone = $3, broadcast = $4,
             last_seen = GREATEST(consumers.last_seen, $5)",
    )
    .bind(&presence.instance)
    .bind(&presence.group)
    .bind(&presence.zone)
    .bind(presence.broadcast)
    .bind(presence.at)
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
