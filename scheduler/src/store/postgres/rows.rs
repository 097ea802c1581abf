//! Rows to domain types and back on PostgreSQL, the shard and expectation parameters
//! the queries bind, and how many rows one set-based statement may name.

use sqlx::{Row, postgres::PgRow, types::Json};
use uuid::Uuid;

use chime_consumer::protocol::AttemptRecord;

use crate::domain::broadcast::InstanceReceipt;
use crate::domain::{Job, JobSpec, Run};
use crate::store::decode::{
    delivery_mode, millis, overlap_policy, run_state, run_trigger, waiting_for,
};
use crate::store::{StoreError, corrupt};

/// A shard list as a PostgreSQL `int[]`; `None` means every shard.
pub(super) fn shard_array(shards: Option<&[u32]>) -> Option<Vec<i32>> {
    shards.map(|s| s.iter().map(|&shard| shard as i32).collect())
}

pub(super) fn job_from_row(row: &PgRow) -> Result<Job, StoreError> {
    let id: Uuid = row.try_get("id")?;
    let Json(settings) = row
        .try_get("settings")
        .map_err(|e| corrupt(format!("job {id}"), e))?;
    Ok(Job {
        id,
        spec: JobSpec {
            app: row.try_get("app")?,
            name: row.try_get("name")?,
            paused: row.try_get("paused")?,
            settings,
        },
        version: row.try_get("version")?,
        next_fire_at: row.try_get("next_fire_at")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        paused_reason: row.try_get("paused_reason")?,
    })
}

pub(super) fn run_from_row(row: &PgRow) -> Result<Run, StoreError> {
    let id: Uuid = row.try_get("id")?;
    let what = format!("run {id}");
    let state: String = row.try_get("state")?;
    let trigger: String = row.try_get("trigger")?;
    Ok(Run {
        id,
        job_id: row.try_get("job_id")?,
        fire_time: row.try_get("fire_time")?,
        shard: row.try_get::<i32, _>("shard")? as u32,
        shard_total: row.try_get::<i32, _>("shard_total")? as u32,
        attempt: row.try_get::<i32, _>("attempt")? as u32,
        state: run_state(&what, &state)?,
        trigger: run_trigger(&what, &trigger)?,
        payload: row.try_get("payload")?,
        created_at: row.try_get("created_at")?,
        dispatched_at: row.try_get("dispatched_at")?,
        acked_at: row.try_get("acked_at")?,
        finished_at: row.try_get("finished_at")?,
        consumer: row.try_get("consumer")?,
        fired_by: row.try_get("fired_by")?,
        output: row.try_get("output")?,
        error: row.try_get("error")?,
        ack_timeout: millis(row.try_get("ack_timeout_ms")?),
        run_timeout: millis(row.try_get("run_timeout_ms")?),
        due_at: row.try_get("due_at")?,
        history: row
            .try_get::<Json<Vec<AttemptRecord>>, _>("history")
            .map_err(|e| corrupt(&what, e))?
            .0,
        progress: row
            .try_get::<Option<Json<_>>, _>("progress")
            .map_err(|e| corrupt(&what, e))?
            .map(|p| p.0),
        heartbeat_at: row.try_get("heartbeat_at")?,
        mode: delivery_mode(&what, &row.try_get::<String, _>("mode")?)?,
        zone: row.try_get("zone")?,
        overlap: overlap_policy(&what, &row.try_get::<String, _>("overlap")?)?,
        instances: row
            .try_get::<Json<Vec<InstanceReceipt>>, _>("instances")
            .map_err(|e| corrupt(&what, e))?
            .0,
        waiting_for: waiting_for(&state, row.try_get("waiting_for").ok().flatten()),
        cancelled_by: row.try_get("cancelled_by").ok().flatten(),
    })
}

pub(super) fn record_json(record: Option<&AttemptRecord>) -> Option<Json<&AttemptRecord>> {
    record.map(Json)
}

/// Most rows one set-based statement names. Over a few hundred ids PostgreSQL may plan
/// `id = ANY(array)` on a large `runs` table as a sequential scan (it rates reading the
/// whole table about as cheap as a thousand primary-key probes), and the batch's cost
/// would then follow the table, not the batch. At this size the primary key wins.
pub(super) const MAX_SET_ROWS: usize = 100;

/// An [`Expect`] as SQL conditions on `state` and `attempt`, bound as parameters `$n` and
/// `$n+1`.
pub(super) fn expect_sql(n: usize) -> String {
    format!(
        "(${n}::text IS NULL AND state NOT IN ('succeeded', 'dead', 'cancelled') OR state = ${n}::text)
         AND (${m}::int IS NULL OR attempt = ${m}::int)",
        m = n + 1
    )
}
