//! What the reconciler reads and writes on PostgreSQL: overdue runs, next attempts, runs
//! given up, and runs waiting for a consumer.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{AssertSqlSafe, PgConnection, PgPool, types::Json};
use uuid::Uuid;

use chime_consumer::protocol::AttemptRecord;

use super::rows::{MAX_SET_ROWS, expect_sql, job_from_row, record_json, run_from_row, shard_array};
use crate::domain::RunState;
use crate::store::{
    Expect, NextAttempt, OverdueRun, StoreError, decode_jobs, decode_runs, with_jobs,
};

/// The reconciler's filter: `due_at` past `$1` (`scheduled` runs: past `$2`, which may
/// be later than `$1` when armed fires are taken over), jobs of the shards in `$3` (or
/// every shard when NULL), after the cursor (`$5`, `$6`) unless NULL, most overdue
/// first, at most `$4`.
macro_rules! overdue_filter {
    () => {
        "WHERE due_at < GREATEST($1, $2)
           AND (CASE WHEN state = 'scheduled' THEN due_at < $2 ELSE due_at < $1 END)
           AND ($3::int[] IS NULL OR EXISTS (SELECT 1 FROM jobs j WHERE j.id = runs.job_id
                                             AND j.shard = ANY($3)))
           AND ($5::timestamptz IS NULL OR (due_at, id) > ($5, $6::uuid))
         ORDER BY due_at, id LIMIT $4"
    };
}

/// One part (at most [`MAX_SET_ROWS`], sorted by id) of [`Store::next_attempts`].
async fn next_attempts_of(
    conn: &mut PgConnection,
    runs: &[NextAttempt<'_>],
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>, StoreError> {
    let ids: Vec<Uuid> = runs.iter().map(|r| r.run_id).collect();
    let states: Vec<Option<&str>> = runs
        .iter()
        .map(|r| r.expect.state.map(RunState::as_str))
        .collect();
    let attempts: Vec<Option<i32>> = runs
        .iter()
        .map(|r| r.expect.attempt.map(|a| a as i32))
        .collect();
    let records: Vec<Option<String>> = runs
        .iter()
        .map(|r| {
            r.record
                .map(|record| serde_json::to_string(record).expect("records serialise"))
        })
        .collect();
    // Rows are locked in id order first, as the marker and the collector lock them;
    // `r.id = ANY($1)` keeps the update on the primary key (see [`MAX_SET_ROWS`]).
    let moved: Vec<Uuid> = sqlx::query_scalar(
        "UPDATE runs r SET state = 'scheduled', attempt = r.attempt + 1, due_at = $5,
                 dispatched_at = NULL, acked_at = NULL, finished_at = NULL, heartbeat_at = NULL,
                 progress = NULL,
                 history = CASE WHEN a.record IS NULL THEN r.history
                                ELSE r.history || jsonb_build_array(a.record::jsonb) END
             FROM (SELECT id FROM runs WHERE id = ANY($1) ORDER BY id FOR UPDATE) AS locked,
                  UNNEST($1::uuid[], $2::text[], $3::int[], $4::text[])
                      AS a(id, state, attempt, record)
             WHERE r.id = ANY($1) AND r.id = locked.id AND a.id = locked.id
               AND (a.state IS NULL AND r.state NOT IN ('succeeded', 'dead', 'cancelled') OR r.state = a.state)
               AND (a.attempt IS NULL OR r.attempt = a.attempt)
             RETURNING r.id",
    )
    .bind(&ids)
    .bind(&states)
    .bind(&attempts)
    .bind(&records)
    .bind(now)
    .fetch_all(conn)
    .await?;
    Ok(moved)
}

/// `EXPLAIN (ANALYZE, FORMAT JSON)` of the reconciler's overdue-runs query, for tests
/// that its cost follows the number of overdue runs.
pub(super) async fn explain_overdue(
    pool: &PgPool,
    shards: Option<&[u32]>,
) -> Result<Value, StoreError> {
    let now = Utc::now();
    let plan: Json<Value> = sqlx::query_scalar(concat!(
        "EXPLAIN (ANALYZE, FORMAT JSON) SELECT ",
        run_columns!(),
        " FROM runs ",
        overdue_filter!()
    ))
    .bind(now)
    .bind(now)
    .bind(shard_array(shards))
    .bind(1000_i64)
    .bind(None::<DateTime<Utc>>)
    .bind(None::<Uuid>)
    .fetch_one(pool)
    .await?;
    Ok(plan.0)
}

pub(super) async fn overdue_runs(
    pool: &PgPool,
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
    .bind(now)
    .bind(unconfirmed_before)
    .bind(shard_array(shards))
    .bind(i64::from(limit))
    .bind(after.map(|(at, _)| at))
    .bind(after.map(|(_, id)| id))
    .fetch_all(pool)
    .await?;
    let runs = decode_runs(&runs, run_from_row);
    if runs.is_empty() {
        return Ok(Vec::new());
    }
    let job_ids: Vec<Uuid> = runs
        .iter()
        .map(|run| run.job_id)
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let jobs = sqlx::query(concat!(
        "SELECT ",
        job_read_columns!(),
        " FROM jobs WHERE id = ANY($1)"
    ))
    .bind(&job_ids)
    .fetch_all(pool)
    .await?;
    Ok(with_jobs(runs, decode_jobs(&jobs, job_from_row)))
}

pub(super) async fn next_attempts(
    pool: &PgPool,
    runs: &[NextAttempt<'_>],
    now: DateTime<Utc>,
) -> Result<HashSet<Uuid>, StoreError> {
    if runs.is_empty() {
        return Ok(HashSet::new());
    }
    let mut sorted = runs.to_vec();
    sorted.sort_unstable_by_key(|r| r.run_id);
    let mut moved = HashSet::with_capacity(runs.len());
    let mut tx = pool.begin().await?;
    for part in sorted.chunks(MAX_SET_ROWS) {
        moved.extend(next_attempts_of(&mut tx, part, now).await?);
    }
    tx.commit().await?;
    Ok(moved)
}

/// `_reads`: the SQLite store asks its readers first whether anything can be released; on
/// PostgreSQL an UPDATE that matches nothing takes no lock, so it goes straight to it.
pub(super) async fn release_held(
    _reads: &PgPool,
    pool: &PgPool,
    due_at: DateTime<Utc>,
) -> Result<u64, StoreError> {
    Ok(sqlx::query(concat!(
        "UPDATE runs SET waiting_for = NULL, due_at = $1
         WHERE waiting_for = 'previous' AND state = 'scheduled'
           AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.job_id = runs.job_id AND ",
        forbidding_runs!(),
        " AND (o.waiting_for IS NULL OR o.waiting_for <> 'previous'))"
    ))
    .bind(due_at)
    .execute(pool)
    .await?
    .rows_affected())
}

pub(super) async fn await_consumer(
    pool: &PgPool,
    runs: &[(Uuid, u32)],
    now: DateTime<Utc>,
) -> Result<HashSet<Uuid>, StoreError> {
    let mut sorted = runs.to_vec();
    sorted.sort_unstable();
    let mut moved = HashSet::with_capacity(sorted.len());
    for part in sorted.chunks(MAX_SET_ROWS) {
        let (ids, attempts): (Vec<Uuid>, Vec<i32>) =
            part.iter().map(|&(id, a)| (id, a as i32)).unzip();
        let rows: Vec<Uuid> = sqlx::query_scalar(
            "UPDATE runs r SET waiting_for = 'consumer',
                 due_at = $3 + r.ack_timeout_ms * interval '1 millisecond'
             FROM (SELECT id FROM runs WHERE id = ANY($1) ORDER BY id FOR UPDATE) AS locked,
                  UNNEST($1::uuid[], $2::int[]) AS w(id, attempt)
             WHERE r.id = ANY($1) AND r.id = locked.id AND w.id = locked.id
               AND r.state = 'dispatched' AND r.attempt = w.attempt
             RETURNING r.id",
        )
        .bind(&ids)
        .bind(&attempts)
        .bind(now)
        .fetch_all(pool)
        .await?;
        moved.extend(rows);
    }
    Ok(moved)
}

pub(super) async fn kill_run(
    pool: &PgPool,
    run_id: Uuid,
    expect: Expect,
    reason: &str,
    record: Option<&AttemptRecord>,
    dead_lettered: bool,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let changed = sqlx::query(AssertSqlSafe(format!(
        "UPDATE runs SET state = 'dead', error = $2, due_at = $3,
             finished_at = COALESCE(finished_at, $5),
             history = CASE WHEN $4::jsonb IS NULL THEN history
                            ELSE history || jsonb_build_array($4::jsonb) END
         WHERE id = $1 AND {}",
        expect_sql(6)
    )))
    .bind(run_id)
    .bind(reason)
    .bind((!dead_lettered).then_some(now))
    .bind(record_json(record))
    .bind(now)
    .bind(expect.state.map(RunState::as_str))
    .bind(expect.attempt.map(|a| a as i32))
    .execute(pool)
    .await?
    .rows_affected()
        == 1;
    Ok(changed)
}

pub(super) async fn mark_dead_lettered(pool: &PgPool, run_id: Uuid) -> Result<(), StoreError> {
    sqlx::query("UPDATE runs SET due_at = NULL WHERE id = $1 AND state = 'dead'")
        .bind(run_id)
        .execute(pool)
        .await?;
    Ok(())
}
