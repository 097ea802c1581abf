//! Runs on PostgreSQL: marking them dispatched, reading them, and the single-run changes
//! (broadcast receipts, notes).

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool, types::Json};
use uuid::Uuid;

use chime_consumer::protocol::AttemptRecord;

use super::rows::{MAX_SET_ROWS, record_json, run_from_row};
use crate::domain::{JobSettings, Run, RunState};
use crate::store::{MAX_NOTES, RunChange, RunPage, StoreError, corrupt};

pub(super) async fn mark_dispatched(
    pool: &PgPool,
    run_ids: &[Uuid],
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    if run_ids.is_empty() {
        return Ok(());
    }
    // Rows are locked in id order (parts in order, each sorted), as the result
    // collector locks them, so the two never deadlock. Runs no longer `scheduled`
    // (usually: their replies came first, see `dispatch::marker`) are left out by a
    // plain read first, so they are not even locked. The state is checked outside
    // the queries' WHERE on purpose: with it inside, the planner ANDed the primary key
    // with the whole partial index `runs_unfinished` (before it held only `forbid`
    // runs), reading every unfinished run (and every dead index entry) on each call. The `id = ANY($1)` and the parts'
    // size keep both statements on the primary key. Each part commits on its own:
    // marking is idempotent, and one transaction over a large backlog would hold
    // its row locks, and so the collectors, until the end.
    let mut ids = run_ids.to_vec();
    ids.sort_unstable();
    for part in ids.chunks(MAX_SET_ROWS) {
        let scheduled: Vec<Uuid> =
            sqlx::query_as::<_, (Uuid, String)>("SELECT id, state FROM runs WHERE id = ANY($1)")
                .bind(part)
                .fetch_all(pool)
                .await?
                .into_iter()
                .filter(|(_, state)| state == RunState::Scheduled.as_str())
                .map(|(id, _)| id)
                .collect();
        if scheduled.is_empty() {
            continue;
        }
        sqlx::query(
            "UPDATE runs SET state = 'dispatched', dispatched_at = $2, error = NULL, waiting_for = NULL,
                 due_at = $2 + ack_timeout_ms * interval '1 millisecond'
             FROM (SELECT id FROM runs WHERE id = ANY($1) ORDER BY id FOR UPDATE) AS locked
             WHERE runs.id = ANY($1) AND runs.id = locked.id AND runs.state = 'scheduled'",
        )
        .bind(&scheduled)
        .bind(at)
        .execute(pool)
        .await?;
    }
    Ok(())
}

pub(super) async fn note_publish_failure(
    pool: &PgPool,
    run_id: Uuid,
    reason: &str,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE runs SET error = $2 WHERE id = $1 AND state = 'scheduled'")
        .bind(run_id)
        .bind(reason)
        .execute(pool)
        .await?;
    Ok(())
}

pub(super) async fn get_run(pool: &PgPool, id: Uuid) -> Result<Option<Run>, StoreError> {
    sqlx::query(concat!(
        "SELECT ",
        run_columns!(),
        " FROM runs WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await?
    .as_ref()
    .map(run_from_row)
    .transpose()
}

pub(super) async fn list_runs(
    pool: &PgPool,
    job_id: Uuid,
    page: &RunPage,
) -> Result<Vec<Run>, StoreError> {
    let (before_time, before_id) = page.before.unzip();
    sqlx::query(concat!(
        "SELECT ",
        run_columns!(),
        " FROM runs WHERE job_id = $1
            AND ($2::timestamptz IS NULL OR (fire_time, id) < ($2, $3::uuid))
          ORDER BY fire_time DESC, id DESC LIMIT $4"
    ))
    .bind(job_id)
    .bind(before_time)
    .bind(before_id)
    .bind(i64::from(page.limit))
    .fetch_all(pool)
    .await?
    .iter()
    .map(run_from_row)
    .collect()
}

pub(super) async fn scheduled_runs(
    pool: &PgPool,
    run_ids: &[Uuid],
) -> Result<HashSet<Uuid>, StoreError> {
    if run_ids.is_empty() {
        return Ok(HashSet::new());
    }
    // The state is filtered here, not in SQL, for the reason given in
    // `mark_dispatched`: the primary key alone is the cheap path. A whole dispatch
    // batch (1 000 ids) was sometimes planned as a sequential scan, so it is asked
    // in parts of `MAX_SET_ROWS`.
    let mut scheduled = HashSet::new();
    for part in run_ids.chunks(MAX_SET_ROWS) {
        let rows: Vec<(Uuid, String)> =
            sqlx::query_as("SELECT id, state FROM runs WHERE id = ANY($1)")
                .bind(part)
                .fetch_all(pool)
                .await?;
        scheduled.extend(
            rows.into_iter()
                .filter(|(_, state)| state == RunState::Scheduled.as_str())
                .map(|(id, _)| id),
        );
    }
    Ok(scheduled)
}

pub(super) async fn fire_items(
    pool: &PgPool,
    job_id: Uuid,
    fire_time: DateTime<Utc>,
) -> Result<Vec<Run>, StoreError> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        run_columns!(),
        " FROM runs WHERE job_id = $1 AND fire_time = $2 ORDER BY shard, zone"
    ))
    .bind(job_id)
    .bind(fire_time)
    .fetch_all(pool)
    .await?;
    rows.iter().map(run_from_row).collect()
}

pub(super) async fn update_run(
    pool: &PgPool,
    run_id: Uuid,
    change: &RunChange<'_>,
) -> Result<Option<(bool, Run)>, StoreError> {
    let mut tx = pool.begin().await?;
    let Some((mut run, settings)) = lock_run(&mut tx, run_id).await? else {
        return Ok(None);
    };
    if !change(&mut run, &settings) {
        return Ok(Some((false, run)));
    }
    write_run(&mut tx, &run).await?;
    tx.commit().await?;
    Ok(Some((true, run)))
}

/// Locks run `run_id` and reads it with its job's settings; `None` if the run or its
/// job does not exist.
pub(super) async fn lock_run(
    conn: &mut PgConnection,
    run_id: Uuid,
) -> Result<Option<(Run, JobSettings)>, StoreError> {
    let Some(row) = sqlx::query(concat!(
        "SELECT ",
        run_columns!(),
        " FROM runs WHERE id = $1 FOR UPDATE"
    ))
    .bind(run_id)
    .fetch_optional(&mut *conn)
    .await?
    else {
        return Ok(None);
    };
    let run = run_from_row(&row)?;
    let Some(Json(settings)) =
        sqlx::query_scalar::<_, Json<JobSettings>>("SELECT settings FROM jobs WHERE id = $1")
            .bind(run.job_id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| corrupt(format!("job {}", run.job_id), e))?
    else {
        return Ok(None);
    };
    Ok(Some((run, settings)))
}

/// Writes back what a single-run change may alter of `run` (locked by [`lock_run`]).
pub(super) async fn write_run(conn: &mut PgConnection, run: &Run) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE runs SET state = $2, attempt = $3, dispatched_at = $4, acked_at = $5,
             finished_at = $6, consumer = $7, output = $8, error = $9, due_at = $10,
             history = $11, progress = $12, heartbeat_at = $13, instances = $14,
             cancelled_by = $15
         WHERE id = $1",
    )
    .bind(run.id)
    .bind(run.state.as_str())
    .bind(run.attempt as i32)
    .bind(run.dispatched_at)
    .bind(run.acked_at)
    .bind(run.finished_at)
    .bind(&run.consumer)
    .bind(&run.output)
    .bind(&run.error)
    .bind(run.due_at)
    .bind(Json(&run.history))
    .bind(run.progress.as_ref().map(Json))
    .bind(run.heartbeat_at)
    .bind(Json(&run.instances))
    .bind(&run.cancelled_by)
    .execute(conn)
    .await?;
    Ok(())
}

pub(super) async fn note_on_run(
    pool: &PgPool,
    run_id: Uuid,
    record: &AttemptRecord,
) -> Result<bool, StoreError> {
    let noted = sqlx::query(
        "UPDATE runs SET history = history || jsonb_build_array($2::jsonb) WHERE id = $1 AND jsonb_array_length(history) < $3",
    )
    .bind(run_id)
    .bind(record_json(Some(record)))
    .bind(MAX_NOTES as i32)
    .execute(pool)
    .await?
    .rows_affected()
        == 1;
    Ok(noted)
}
