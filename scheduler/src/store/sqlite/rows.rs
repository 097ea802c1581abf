//! Rows to domain types and back on SQLite: instants as unix milliseconds, ids and
//! JSON documents as text, and the shard and expectation parameters the queries bind.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{Row, sqlite::SqliteRow};
use uuid::Uuid;

use chime_consumer::protocol::AttemptRecord;

use crate::domain::{Job, JobSpec, Run};
use crate::store::decode::{
    delivery_mode, millis, overlap_policy, run_state, run_trigger, waiting_for,
};
use crate::store::{StoreError, corrupt};

/// A shard list as the JSON array `json_each` reads; `None` means every shard.
pub(super) fn shard_list(shards: Option<&[u32]>) -> Option<String> {
    shards.map(|s| serde_json::to_string(s).expect("numbers serialise"))
}

pub(super) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

pub(super) fn opt_ms(t: Option<DateTime<Utc>>) -> Option<i64> {
    t.map(ms)
}

pub(super) fn instant(what: &str, v: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_millis(v).ok_or_else(|| corrupt(what, format!("bad instant {v}")))
}

pub(super) fn opt_instant(what: &str, v: Option<i64>) -> Result<Option<DateTime<Utc>>, StoreError> {
    v.map(|v| instant(what, v)).transpose()
}

pub(super) fn uuid(what: &str, text: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|e| corrupt(what, e))
}

pub(super) fn json(what: &str, text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt(what, e))
}

pub(super) fn job_from_row(row: &SqliteRow) -> Result<Job, StoreError> {
    let id_text: String = row.try_get("id")?;
    let what = format!("job {id_text}");
    let settings: String = row.try_get("settings")?;
    Ok(Job {
        id: uuid(&what, &id_text)?,
        spec: JobSpec {
            app: row.try_get("app")?,
            name: row.try_get("name")?,
            paused: row.try_get("paused")?,
            settings: serde_json::from_str(&settings).map_err(|e| corrupt(&what, e))?,
        },
        version: row.try_get("version")?,
        next_fire_at: opt_instant(&what, row.try_get("next_fire_at")?)?,
        created_at: instant(&what, row.try_get("created_at")?)?,
        updated_at: instant(&what, row.try_get("updated_at")?)?,
        paused_reason: row.try_get("paused_reason")?,
    })
}

pub(super) fn run_from_row(row: &SqliteRow) -> Result<Run, StoreError> {
    let id_text: String = row.try_get("id")?;
    let what = format!("run {id_text}");
    let state: String = row.try_get("state")?;
    let trigger: String = row.try_get("trigger")?;
    let output: Option<String> = row.try_get("output")?;
    Ok(Run {
        id: uuid(&what, &id_text)?,
        job_id: uuid(&what, &row.try_get::<String, _>("job_id")?)?,
        fire_time: instant(&what, row.try_get("fire_time")?)?,
        shard: row.try_get("shard")?,
        shard_total: row.try_get("shard_total")?,
        attempt: row.try_get("attempt")?,
        state: run_state(&what, &state)?,
        trigger: run_trigger(&what, &trigger)?,
        payload: json(&what, &row.try_get::<String, _>("payload")?)?,
        created_at: instant(&what, row.try_get("created_at")?)?,
        dispatched_at: opt_instant(&what, row.try_get("dispatched_at")?)?,
        acked_at: opt_instant(&what, row.try_get("acked_at")?)?,
        finished_at: opt_instant(&what, row.try_get("finished_at")?)?,
        consumer: row.try_get("consumer")?,
        fired_by: row.try_get("fired_by")?,
        output: output.map(|o| json(&what, &o)).transpose()?,
        error: row.try_get("error")?,
        ack_timeout: millis(row.try_get("ack_timeout_ms")?),
        run_timeout: millis(row.try_get("run_timeout_ms")?),
        due_at: opt_instant(&what, row.try_get("due_at")?)?,
        history: serde_json::from_str(&row.try_get::<String, _>("history")?)
            .map_err(|e| corrupt(&what, e))?,
        progress: row
            .try_get::<Option<String>, _>("progress")?
            .map(|p| serde_json::from_str(&p))
            .transpose()
            .map_err(|e| corrupt(&what, e))?,
        heartbeat_at: opt_instant(&what, row.try_get("heartbeat_at")?)?,
        mode: delivery_mode(&what, &row.try_get::<String, _>("mode")?)?,
        zone: row.try_get("zone")?,
        instances: serde_json::from_str(&row.try_get::<String, _>("instances")?)
            .map_err(|e| corrupt(&what, e))?,
        overlap: overlap_policy(&what, &row.try_get::<String, _>("overlap")?)?,
        waiting_for: waiting_for(&state, row.try_get("waiting_for").ok().flatten()),
        cancelled_by: row.try_get("cancelled_by").ok().flatten(),
    })
}

pub(super) fn record_text(record: Option<&AttemptRecord>) -> Option<String> {
    record.map(|r| serde_json::to_string(r).expect("records serialise"))
}

/// An [`Expect`] as SQL conditions on `state` and `attempt`, bound as parameters `n` and
/// `n + 1`.
pub(super) fn expect_sql(n: usize) -> String {
    format!(
        "(?{n} IS NULL AND state NOT IN ('succeeded', 'dead', 'cancelled') OR state = ?{n})
         AND (?{m} IS NULL OR attempt = ?{m})",
        m = n + 1
    )
}

pub(super) fn settings_text(job: &Job) -> String {
    serde_json::to_string(&job.spec.settings).expect("job settings serialise")
}

/// `run`'s columns in [`run_columns`] order, as [`insert_runs`] reads them.
pub(super) fn run_row(run: &Run) -> Value {
    serde_json::json!([
        run.id.to_string(),
        run.job_id.to_string(),
        ms(run.fire_time),
        run.shard,
        run.shard_total,
        run.attempt,
        run.state.as_str(),
        run.trigger.as_str(),
        run.payload.to_string(),
        ms(run.created_at),
        opt_ms(run.dispatched_at),
        opt_ms(run.acked_at),
        opt_ms(run.finished_at),
        run.consumer,
        run.output.as_ref().map(Value::to_string),
        run.error,
        run.fired_by,
        run.ack_timeout.as_millis() as i64,
        run.run_timeout.as_millis() as i64,
        opt_ms(run.due_at),
        serde_json::to_string(&run.history).expect("history serialises"),
        run.progress
            .as_ref()
            .map(|p| serde_json::to_string(p).expect("progress serialises")),
        opt_ms(run.heartbeat_at),
        run.mode.as_str(),
        run.zone,
        serde_json::to_string(&run.instances).expect("receipts serialise"),
        run.overlap.as_str(),
        run.waiting_for.map(|w| w.as_str()),
    ])
}
