//! Applying consumers' replies on SQLite: each function works inside the caller's write
//! transaction, so a batch of replies costs one commit.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{Row, SqliteConnection};
use uuid::Uuid;

use chime_consumer::protocol::{
    AckMessage, DeliveryMode, HeartbeatMessage, ObserveMessage, PresenceMessage, Reply,
    ResultMessage, TaskOutcome,
};

use super::{corrupt, mode, ms, record_text};
use crate::{
    domain::{RunState, retry::ResultVerdict},
    store::{ReplyApplied, ReplyEffect, StoreError, result_verdict},
};

/// Applies one reply at `now`.
pub(super) async fn record_reply(
    conn: &mut SqliteConnection,
    reply: &Reply,
    now: DateTime<Utc>,
) -> Result<ReplyApplied, StoreError> {
    Ok(match reply {
        Reply::Ack(ack) => (record_ack(conn, ack, now).await?, None),
        Reply::Heartbeat(heartbeat) => (record_heartbeat(conn, heartbeat, now).await?, None),
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

async fn record_ack(
    conn: &mut SqliteConnection,
    ack: &AckMessage,
    now: DateTime<Utc>,
) -> Result<ReplyEffect, StoreError> {
    let applied = sqlx::query(
        "UPDATE runs SET state = 'acked', acked_at = ?2, consumer = ?3,
             dispatched_at = COALESCE(dispatched_at, ?2), due_at = ?5 + run_timeout_ms
         WHERE id = ?1 AND state IN ('scheduled', 'dispatched') AND attempt = ?4
           AND mode <> 'broadcast'",
    )
    .bind(ack.task_id.to_string())
    .bind(ms(ack.acked_at))
    .bind(&ack.consumer)
    .bind(ack.attempt)
    .bind(ms(now))
    .execute(&mut *conn)
    .await?
    .rows_affected()
        == 1;
    reply_effect(conn, ack.task_id, applied).await
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

async fn record_result(
    conn: &mut SqliteConnection,
    result: &ResultMessage,
    now: DateTime<Utc>,
) -> Result<ReplyApplied, StoreError> {
    let id = result.task_id.to_string();
    let Some(row) = sqlx::query(
        "SELECT r.state, r.attempt, r.mode, j.settings FROM runs r JOIN jobs j ON j.id = r.job_id
         WHERE r.id = ?",
    )
    .bind(&id)
    .fetch_optional(&mut *conn)
    .await?
    else {
        return Ok((ReplyEffect::UnknownRun, None));
    };
    let what = format!("run {id}");
    if mode(&what, &row.try_get::<String, _>("mode")?)? == DeliveryMode::Broadcast {
        return Ok((ReplyEffect::Broadcast, None));
    }
    let state: String = row.try_get("state")?;
    let state =
        RunState::parse(&state).ok_or_else(|| corrupt(&what, format!("state {state:?}")))?;
    let settings: crate::domain::JobSettings =
        serde_json::from_str(&row.try_get::<String, _>("settings")?)
            .map_err(|e| corrupt(&what, e))?;
    let verdict = result_verdict(state, row.try_get("attempt")?, &settings, result, now);
    let finished = ms(result.finished_at);
    let update = match &verdict {
        ResultVerdict::Stale => return Ok((ReplyEffect::Stale, None)),
        ResultVerdict::Succeeded => {
            let output = match &result.outcome {
                TaskOutcome::Succeeded { output } => output.as_ref().map(Value::to_string),
                TaskOutcome::Failed { .. } => None,
            };
            sqlx::query(
                "UPDATE runs SET state = 'succeeded', finished_at = ?2, consumer = ?3,
                     output = ?4, error = NULL, due_at = NULL,
                     acked_at = COALESCE(acked_at, ?2), dispatched_at = COALESCE(dispatched_at, ?2)
                 WHERE id = ?1",
            )
            .bind(&id)
            .bind(finished)
            .bind(&result.consumer)
            .bind(output)
        }
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
    };
    update.execute(&mut *conn).await?;
    Ok((ReplyEffect::Applied, verdict.state()))
}

async fn record_presence(
    conn: &mut SqliteConnection,
    presence: &PresenceMessage,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO consumers (instance, group_name, zone, broadcast, last_seen)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (instance) DO UPDATE SET group_name = ?2, zone = ?3, broadcast = ?4,
             last_seen = MAX(last_seen, ?5)",
    )
    .bind(&presence.instance)
    .bind(&presence.group)
    .bind(&presence.zone)
    .bind(presence.broadcast)
    .bind(ms(presence.at))
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
