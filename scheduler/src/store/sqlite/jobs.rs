//! Jobs on SQLite: create, read, update (withdrawing fires armed ahead, see
//! [`crate::store::update_plan`]) and delete.

use sqlx::SqlitePool;
use uuid::Uuid;

use super::rows::{job_from_row, ms, opt_ms, settings_text};
use crate::domain::Job;
use crate::domain::shard::{DEFAULT_SHARD_COUNT, shard_of};
use crate::store::{StoreError, job_write_error, update_plan};

pub(super) async fn insert_job(writer: &SqlitePool, job: &Job) -> Result<(), StoreError> {
    let result = sqlx::query(concat!(
        "INSERT INTO jobs (",
        job_columns!(),
        ", shard) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    ))
    .bind(job.id.to_string())
    .bind(&job.spec.app)
    .bind(&job.spec.name)
    .bind(settings_text(job))
    .bind(job.spec.paused)
    .bind(job.version)
    .bind(opt_ms(job.next_fire_at))
    .bind(ms(job.created_at))
    .bind(ms(job.updated_at))
    .bind(shard_of(job.id, DEFAULT_SHARD_COUNT))
    .execute(writer)
    .await;
    result.map(|_| ()).map_err(|e| job_write_error(e, job))
}

pub(super) async fn get_job(readers: &SqlitePool, id: Uuid) -> Result<Option<Job>, StoreError> {
    sqlx::query(concat!(
        "SELECT ",
        job_read_columns!(),
        " FROM jobs WHERE id = ?"
    ))
    .bind(id.to_string())
    .fetch_optional(readers)
    .await?
    .as_ref()
    .map(job_from_row)
    .transpose()
}

pub(super) async fn update_job(
    writer: &SqlitePool,
    job: &Job,
    expected_version: i64,
    set_next_fire: bool,
) -> Result<Job, StoreError> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    let stored_overlap: Option<String> =
        sqlx::query_scalar("SELECT json_extract(settings, '$.overlap') FROM jobs WHERE id = ?")
            .bind(job.id.to_string())
            .fetch_optional(&mut *tx)
            .await?
            .flatten();
    let becomes_forbid = update_plan::becomes_forbid(job, stored_overlap.as_deref());
    let updated = sqlx::query(concat!(
        "UPDATE jobs SET app = ?, name = ?, settings = ?, paused = ?, version = ?, \
         next_fire_at = CASE WHEN ? THEN ? ELSE next_fire_at END, updated_at = ?, \
         paused_reason = ? WHERE id = ? AND version = ? RETURNING ",
        job_read_columns!()
    ))
    .bind(&job.spec.app)
    .bind(&job.spec.name)
    .bind(settings_text(job))
    .bind(job.spec.paused)
    .bind(job.version)
    .bind(set_next_fire)
    .bind(opt_ms(job.next_fire_at))
    .bind(ms(job.updated_at))
    .bind(&job.paused_reason)
    .bind(job.id.to_string())
    .bind(expected_version)
    .fetch_optional(&mut *tx)
    .await;
    let row = match updated {
        Ok(row) => row,
        Err(e) => return Err(job_write_error(e, job)),
    };
    if let Some(row) = row {
        if becomes_forbid {
            // Its unfinished runs were recorded under `allow`: from now on its fires
            // wait for them too.
            sqlx::query(concat!(
                "UPDATE runs SET overlap = 'forbid'
                 WHERE job_id = ? AND overlap <> 'forbid' AND ",
                unfinished_runs!()
            ))
            .bind(job.id.to_string())
            .execute(&mut *tx)
            .await?;
        }
        let withdrawn: Vec<i64> = sqlx::query_scalar(
            "DELETE FROM runs WHERE job_id = ?1 AND fire_time > ?2 AND state = 'scheduled'
               AND attempt = 1 AND trigger = 'schedule'
             RETURNING fire_time",
        )
        .bind(job.id.to_string())
        .bind(ms(job.updated_at))
        .fetch_all(&mut *tx)
        .await?;
        let row = match update_plan::rewind_to(withdrawn, set_next_fire) {
            // Armed again from the new definition when it comes due.
            Some(earliest) => {
                sqlx::query(concat!(
                    "UPDATE jobs SET next_fire_at = CASE
                         WHEN next_fire_at IS NULL OR next_fire_at > ?2 THEN ?2
                         ELSE next_fire_at END
                     WHERE id = ?1 RETURNING ",
                    job_read_columns!()
                ))
                .bind(job.id.to_string())
                .bind(earliest)
                .fetch_one(&mut *tx)
                .await?
            }
            None => row,
        };
        let stored = job_from_row(&row)?;
        tx.commit().await?;
        return Ok(stored);
    }
    let current: Option<i64> = sqlx::query_scalar("SELECT version FROM jobs WHERE id = ?")
        .bind(job.id.to_string())
        .fetch_optional(&mut *tx)
        .await?;
    Err(update_plan::update_missed(
        job.id,
        expected_version,
        current,
    ))
}

pub(super) async fn delete_job(writer: &SqlitePool, id: Uuid) -> Result<bool, StoreError> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    let deleted = sqlx::query("DELETE FROM jobs WHERE id = ?")
        .bind(id.to_string())
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(deleted == 1)
}

pub(super) async fn target_groups(readers: &SqlitePool) -> Result<Vec<String>, StoreError> {
    // A skip scan of `jobs_target_group`: one index probe per group, not a read of
    // every job.
    Ok(sqlx::query_scalar(
        "WITH RECURSIVE groups(grp) AS (
             SELECT min(json_extract(settings, '$.target.group')) FROM jobs
             UNION ALL
             SELECT (SELECT min(json_extract(settings, '$.target.group')) FROM jobs
                     WHERE json_extract(settings, '$.target.group') > groups.grp)
             FROM groups WHERE groups.grp IS NOT NULL
         )
         SELECT grp FROM groups WHERE grp IS NOT NULL",
    )
    .fetch_all(readers)
    .await?)
}

/// Stores `jobs` in one `BEGIN IMMEDIATE` transaction with one multi-row insert (their
/// columns travel as one JSON array of rows, read with `jsonb_each`, as the fire batch's
/// runs do). Returns the indices of the jobs whose app and name were taken (by a stored
/// job or an earlier one of `jobs`); when there are any, the transaction is rolled back
/// and nothing is stored.
pub(super) async fn insert_jobs(
    writer: &SqlitePool,
    jobs: &[Job],
) -> Result<Vec<usize>, StoreError> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<serde_json::Value> = jobs
        .iter()
        .map(|job| {
            serde_json::json!([
                job.id.to_string(),
                job.spec.app,
                job.spec.name,
                settings_text(job),
                job.spec.paused,
                job.version,
                opt_ms(job.next_fire_at),
                ms(job.created_at),
                ms(job.updated_at),
                shard_of(job.id, DEFAULT_SHARD_COUNT),
            ])
        })
        .collect();
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    let inserted: Vec<String> = sqlx::query_scalar(concat!(
        "INSERT INTO jobs (",
        job_columns!(),
        ", shard) SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, \
         value ->> 5, value ->> 6, value ->> 7, value ->> 8, value ->> 9 \
         FROM jsonb_each(?) WHERE true ON CONFLICT DO NOTHING RETURNING id"
    ))
    .bind(serde_json::Value::Array(rows).to_string())
    .fetch_all(&mut *tx)
    .await?;
    if inserted.len() == jobs.len() {
        tx.commit().await?;
        return Ok(Vec::new());
    }
    tx.rollback().await?;
    let inserted: std::collections::HashSet<&str> = inserted.iter().map(String::as_str).collect();
    Ok((0..jobs.len())
        .filter(|&i| !inserted.contains(jobs[i].id.to_string().as_str()))
        .collect())
}

pub(super) async fn count_app_jobs(readers: &SqlitePool, app: &str) -> Result<u64, StoreError> {
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE app = ?")
        .bind(app)
        .fetch_one(readers)
        .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

pub(super) async fn app_uses_group(
    readers: &SqlitePool,
    app: &str,
    group: &str,
) -> Result<bool, StoreError> {
    // Through `jobs_target_group`: the group's jobs, not the app's.
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM jobs
                        WHERE json_extract(settings, '$.target.group') = ?2 AND app = ?1)",
    )
    .bind(app)
    .bind(group)
    .fetch_one(readers)
    .await?)
}

pub(super) async fn app_groups(readers: &SqlitePool, app: &str) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT DISTINCT json_extract(settings, '$.target.group') FROM jobs WHERE app = ?",
    )
    .bind(app)
    .fetch_all(readers)
    .await?)
}
