//! What the reconciler reads and writes on SQLite: overdue runs, next attempts, runs
//! given up, and runs waiting for a consumer.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{AssertSqlSafe, Row, SqlitePool};
use uuid::Uuid;

use chime_consumer::protocol::AttemptRecord;

use super::rows::{expect_sql, job_from_row, ms, record_text, run_from_row, shard_list, uuid};
use crate::domain::RunState;
use crate::store::{
    Expect, NextAttempt, OverdueRun, StoreError, corrupt, decode_jobs, decode_runs, with_jobs,
};

/// The reconciler's filter: `due_at` past (`?1`; `scheduled` runs: past `?2`, which may be
/// later than `?1` when armed fires are taken over), jobs of the shards in `?3` (JSON
/// array or NULL), after the cursor (`?5`, `?6`) unless NULL, most overdue first, at
/// most `?4`.
macro_rules! overdue_filter {
    () => {
        "WHERE due_at < max(?1, ?2)
           AND (CASE WHEN state = 'scheduled' THEN due_at < ?2 ELSE due_at < ?1 END)
           AND (?3 IS NULL OR EXISTS (SELECT 1 FROM jobs j WHERE j.id = runs.job_id
                                      AND j.shard IN (SELECT value FROM json_each(?3))))
           AND (?5 IS NULL OR (due_at, id) > (?5, ?6))
         ORDER BY due_at, id LIMIT ?4"
    };
}

/// The query plan of the reconciler's overdue-runs query, one line per step, as
/// `EXPLAIN QUERY PLAN` prints it (for tests that its cost follows the overdue runs).
pub(super) async fn explain_overdue(
    readers: &SqlitePool,
    shards: Option<&[u32]>,
) -> Result<Vec<String>, StoreError> {
    let now = ms(Utc::now());
    let rows = sqlx::query(concat!(
        "EXPLAIN QUERY PLAN SELECT ",
        run_columns!(),
        " FROM runs ",
        overdue_filter!()
    ))
    .bind(now)
    .bind(now)
    .bind(shard_list(shards))
    .bind(1000)
    .bind(None::<i64>)
    .bind(None::<String>)
    .fetch_all(readers)
    .await?;
    rows.iter()
        .map(|row| Ok(row.try_get::<String, _>("detail")?))
        .collect()
}

pub(super) async fn overdue_runs(
    readers: &SqlitePool,
    now: DateTime<Utc>,
    unconfirmed_before: DateTime<Utc>,
    after: Option<(DateTime<Utc>, Uuid)>,
    limit: u32,
    shards: Option<&[u32]>,
) -> Result<Vec<OverdueRun>, StoreError> {
    let runs = sqlx::query(concat!(
        "SELECT ",
        run_columns!(),
        " FROM runs ",
        overdue_filter!()
    ))
    .bind(ms(now))
    .bind(ms(unconfirmed_before))
    .bind(shard_list(shards))
    .bind(limit)
    .bind(after.map(|(at, _)| ms(at)))
    .bind(after.map(|(_, id)| id.to_string()))
    .fetch_all(readers)
    .await?;
    let runs = decode_runs(&runs, run_from_row);
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let job_ids: HashSet<Uuid> = runs.iter().map(|run| run.job_id).collect();
    let jobs = sqlx::query(concat!(
        "SELECT ",
        job_read_columns!(),
        " FROM jobs WHERE id IN (SELECT value FROM json_each(?))"
    ))
    .bind(serde_json::to_string(&job_ids).expect("uuids serialise"))
    .fetch_all(readers)
    .await?;
    Ok(with_jobs(runs, decode_jobs(&jobs, job_from_row)))
}

pub(super) async fn next_attempts(
    writer: &SqlitePool,
    runs: &[NextAttempt<'_>],
    now: DateTime<Utc>,
) -> Result<HashSet<Uuid>, StoreError> {
    if runs.is_empty() {
        return Ok(HashSet::new());
    }
    let rows: Vec<Value> = runs
        .iter()
        .map(|r| {
            serde_json::json!([
                r.run_id,
                r.expect.state.map(RunState::as_str),
                r.expect.attempt,
                record_text(r.record),
            ])
        })
        .collect();
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    let moved: Vec<String> = sqlx::query_scalar(
        "UPDATE runs SET state = 'scheduled', attempt = runs.attempt + 1, due_at = ?2,
             dispatched_at = NULL, acked_at = NULL, finished_at = NULL, heartbeat_at = NULL,
             progress = NULL,
             history = CASE WHEN a.record IS NULL THEN runs.history
                            ELSE json_insert(runs.history, '$[#]', json(a.record)) END
         FROM (SELECT value ->> 0 AS id, value ->> 1 AS state, value ->> 2 AS attempt,
                      value ->> 3 AS record
               FROM jsonb_each(?1)) AS a
         WHERE runs.id = a.id
           AND (a.state IS NULL AND runs.state NOT IN ('succeeded', 'dead', 'cancelled')
                OR runs.state = a.state)
           AND (a.attempt IS NULL OR runs.attempt = a.attempt)
         RETURNING runs.id",
    )
    .bind(Value::Array(rows).to_string())
    .bind(ms(now))
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    moved
        .into_iter()
        .map(|id| id.parse().map_err(|e| corrupt(format!("run {id}"), e)))
        .collect()
}

pub(super) async fn await_consumer(
    writer: &SqlitePool,
    runs: &[(Uuid, u32)],
    now: DateTime<Utc>,
) -> Result<HashSet<Uuid>, StoreError> {
    if runs.is_empty() {
        return Ok(HashSet::new());
    }
    let rows: Vec<(String, u32)> = runs.iter().map(|&(id, a)| (id.to_string(), a)).collect();
    let rows = serde_json::to_string(&rows).expect("pairs serialise");
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    let moved: Vec<String> = sqlx::query_scalar(
        "UPDATE runs SET waiting_for = 'consumer', due_at = ?2 + ack_timeout_ms
         WHERE id IN (SELECT json_extract(value, '$[0]') FROM json_each(?1))
           AND state = 'dispatched'
           AND attempt = (SELECT json_extract(value, '$[1]') FROM json_each(?1)
                          WHERE json_extract(value, '$[0]') = runs.id)
         RETURNING id",
    )
    .bind(rows)
    .bind(ms(now))
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    moved
        .iter()
        .map(|id| uuid(&format!("run {id}"), id))
        .collect()
}

/// The held `buffer_one` fires whose job has no other unfinished run.
macro_rules! releasable_held {
    () => {
        concat!(
            "waiting_for = 'previous' AND state = 'scheduled'
           AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.job_id = runs.job_id AND ",
            forbidding_runs!(),
            " AND (o.waiting_for IS NULL OR o.waiting_for <> 'previous'))"
        )
    };
}

pub(super) async fn release_held(
    readers: &SqlitePool,
    writer: &SqlitePool,
    due_at: DateTime<Utc>,
) -> Result<u64, StoreError> {
    // Nearly every pass has nothing to release: a reader (WAL lets it run beside a write)
    // says so first, so a reconciler pass only queues for the one write lock when a held
    // fire can go, and does not stall behind a long write for nothing.
    let any: bool = sqlx::query_scalar(concat!(
        "SELECT EXISTS (SELECT 1 FROM runs WHERE ",
        releasable_held!(),
        ")"
    ))
    .fetch_one(readers)
    .await?;
    if !any {
        return Ok(0);
    }
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    let released = sqlx::query(concat!(
        "UPDATE runs SET waiting_for = NULL, due_at = ?1 WHERE ",
        releasable_held!()
    ))
    .bind(ms(due_at))
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok(released)
}

pub(super) async fn kill_run(
    writer: &SqlitePool,
    run_id: Uuid,
    expect: Expect,
    reason: &str,
    record: Option<&AttemptRecord>,
    dead_lettered: bool,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    let changed = sqlx::query(AssertSqlSafe(format!(
        "UPDATE runs SET state = 'dead', error = ?2, due_at = ?3,
             finished_at = COALESCE(finished_at, ?5),
             history = CASE WHEN ?4 IS NULL THEN history
                            ELSE json_insert(history, '$[#]', json(?4)) END
         WHERE id = ?1 AND {}",
        expect_sql(6)
    )))
    .bind(run_id.to_string())
    .bind(reason)
    .bind((!dead_lettered).then(|| ms(now)))
    .bind(record_text(record))
    .bind(ms(now))
    .bind(expect.state.map(RunState::as_str))
    .bind(expect.attempt)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    tx.commit().await?;
    Ok(changed)
}

pub(super) async fn mark_dead_lettered(
    writer: &SqlitePool,
    run_id: Uuid,
) -> Result<(), StoreError> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::query("UPDATE runs SET due_at = NULL WHERE id = ? AND state = 'dead'")
        .bind(run_id.to_string())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}
