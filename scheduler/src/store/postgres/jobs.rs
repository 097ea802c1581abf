//! Jobs on PostgreSQL: create, read, update (withdrawing fires armed ahead, see
//! [`crate::store::update_plan`]) and delete, each change notified to every node's timer.

use chrono::{DateTime, Utc};
use sqlx::{PgPool, types::Json};
use uuid::Uuid;

use super::cluster;
use super::rows::job_from_row;
use crate::domain::Job;
use crate::domain::shard::shard_of;
use crate::store::{StoreError, job_write_error, update_plan};

/// Tells every node's timer that a job changed (delivered when the caller's statement
/// has committed: each write here is its own transaction).
pub(super) async fn notify_job_changed(pool: &PgPool, id: Uuid) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(cluster::JOBS_CHANNEL)
        .bind(id.to_string())
        .execute(pool)
        .await?;
    Ok(())
}

pub(super) async fn insert_job(
    pool: &PgPool,
    shard_count: u32,
    job: &Job,
) -> Result<(), StoreError> {
    let result = sqlx::query(concat!(
        "INSERT INTO jobs (",
        job_columns!(),
        ", shard, due_bound) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $7)"
    ))
    .bind(job.id)
    .bind(&job.spec.app)
    .bind(&job.spec.name)
    .bind(Json(&job.spec.settings))
    .bind(job.spec.paused)
    .bind(job.version)
    .bind(job.next_fire_at)
    .bind(job.created_at)
    .bind(job.updated_at)
    .bind(shard_of(job.id, shard_count) as i32)
    .execute(pool)
    .await;
    result.map_err(|e| job_write_error(e, job))?;
    notify_job_changed(pool, job.id).await
}

pub(super) async fn get_job(pool: &PgPool, id: Uuid) -> Result<Option<Job>, StoreError> {
    sqlx::query(concat!(
        "SELECT ",
        job_read_columns!(),
        " FROM jobs WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await?
    .as_ref()
    .map(job_from_row)
    .transpose()
}

pub(super) async fn update_job(
    pool: &PgPool,
    job: &Job,
    expected_version: i64,
    set_next_fire: bool,
) -> Result<Job, StoreError> {
    let mut tx = pool.begin().await?;
    let stored_overlap: Option<String> =
        sqlx::query_scalar("SELECT settings->>'overlap' FROM jobs WHERE id = $1 FOR UPDATE")
            .bind(job.id)
            .fetch_optional(&mut *tx)
            .await?
            .flatten();
    let becomes_forbid = update_plan::becomes_forbid(job, stored_overlap.as_deref());
    let updated = sqlx::query(concat!(
        "UPDATE jobs SET app = $1, name = $2, settings = $3, paused = $4, version = $5,
             next_fire_at = CASE WHEN $6 THEN $7 ELSE next_fire_at END,
             due_bound = CASE WHEN $6 THEN $7 ELSE due_bound END, updated_at = $8,
             paused_reason = $11
         WHERE id = $9 AND version = $10 RETURNING ",
        job_read_columns!()
    ))
    .bind(&job.spec.app)
    .bind(&job.spec.name)
    .bind(Json(&job.spec.settings))
    .bind(job.spec.paused)
    .bind(job.version)
    .bind(set_next_fire)
    .bind(job.next_fire_at)
    .bind(job.updated_at)
    .bind(job.id)
    .bind(expected_version)
    .bind(&job.paused_reason)
    .fetch_optional(&mut *tx)
    .await;
    match updated {
        Ok(Some(row)) => {
            if becomes_forbid {
                // Its unfinished runs were recorded under `allow`: from now on its
                // fires wait for them too.
                sqlx::query(concat!(
                    "UPDATE runs SET overlap = 'forbid'
                     WHERE job_id = $1 AND overlap <> 'forbid' AND ",
                    unfinished_runs!()
                ))
                .bind(job.id)
                .execute(&mut *tx)
                .await?;
            }
            let withdrawn: Vec<DateTime<Utc>> = sqlx::query_scalar(
                "DELETE FROM runs WHERE job_id = $1 AND fire_time > $2 AND state = 'scheduled'
                   AND attempt = 1 AND trigger = 'schedule'
                 RETURNING fire_time",
            )
            .bind(job.id)
            .bind(job.updated_at)
            .fetch_all(&mut *tx)
            .await?;
            let row = match update_plan::rewind_to(withdrawn, set_next_fire) {
                // Armed again from the new definition when it comes due.
                Some(earliest) => {
                    sqlx::query(concat!(
                        "UPDATE jobs SET next_fire_at = LEAST(next_fire_at, $2),
                             due_bound = LEAST(due_bound, $2)
                         WHERE id = $1 RETURNING ",
                        job_read_columns!()
                    ))
                    .bind(job.id)
                    .bind(earliest)
                    .fetch_one(&mut *tx)
                    .await?
                }
                None => row,
            };
            tx.commit().await?;
            notify_job_changed(pool, job.id).await?;
            return job_from_row(&row);
        }
        Ok(None) => {}
        Err(e) => return Err(job_write_error(e, job)),
    }
    let current: Option<i64> = sqlx::query_scalar("SELECT version FROM jobs WHERE id = $1")
        .bind(job.id)
        .fetch_optional(&mut *tx)
        .await?;
    Err(update_plan::update_missed(
        job.id,
        expected_version,
        current,
    ))
}

pub(super) async fn delete_job(pool: &PgPool, id: Uuid) -> Result<bool, StoreError> {
    let deleted = sqlx::query("DELETE FROM jobs WHERE id = $1")
        .bind(id)
        .execute(pool)
        .await?
        .rows_affected();
    if deleted == 1 {
        notify_job_changed(pool, id).await?;
    }
    Ok(deleted == 1)
}

pub(super) async fn target_groups(pool: &PgPool) -> Result<Vec<String>, StoreError> {
    // A skip scan of `jobs_target_group`: one index probe per group, not a read of
    // every job.
    Ok(sqlx::query_scalar(
        "WITH RECURSIVE groups AS (
             (SELECT settings->'target'->>'group' AS grp FROM jobs
              ORDER BY settings->'target'->>'group' LIMIT 1)
             UNION ALL
             SELECT (SELECT settings->'target'->>'group' FROM jobs
                     WHERE settings->'target'->>'group' > groups.grp
                     ORDER BY settings->'target'->>'group' LIMIT 1)
             FROM groups WHERE groups.grp IS NOT NULL
         )
         SELECT grp FROM groups WHERE grp IS NOT NULL",
    )
    .fetch_all(pool)
    .await?)
}

/// Stores `jobs` in one transaction with one multi-row insert (`UNNEST` of one array per
/// column) and announces each to every node's timer, delivered at commit. Returns the
/// indices of the jobs whose app and name were taken (by a stored job or an earlier one
/// of `jobs`); when there are any, the transaction is rolled back and nothing is stored.
pub(super) async fn insert_jobs(
    pool: &PgPool,
    shard_count: u32,
    jobs: &[Job],
) -> Result<Vec<usize>, StoreError> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = jobs.iter().map(|job| job.id).collect();
    let apps: Vec<&str> = jobs.iter().map(|job| job.spec.app.as_str()).collect();
    let names: Vec<&str> = jobs.iter().map(|job| job.spec.name.as_str()).collect();
    let settings: Vec<Json<&crate::domain::JobSettings>> =
        jobs.iter().map(|job| Json(&job.spec.settings)).collect();
    let paused: Vec<bool> = jobs.iter().map(|job| job.spec.paused).collect();
    let versions: Vec<i64> = jobs.iter().map(|job| job.version).collect();
    let next: Vec<Option<DateTime<Utc>>> = jobs.iter().map(|job| job.next_fire_at).collect();
    let created: Vec<DateTime<Utc>> = jobs.iter().map(|job| job.created_at).collect();
    let updated: Vec<DateTime<Utc>> = jobs.iter().map(|job| job.updated_at).collect();
    let shards: Vec<i32> = ids
        .iter()
        .map(|id| shard_of(*id, shard_count) as i32)
        .collect();
    let mut tx = pool.begin().await?;
    let inserted: Vec<Uuid> = sqlx::query_scalar(concat!(
        "INSERT INTO jobs (",
        job_columns!(),
        ", shard, due_bound)
         SELECT id, app, name, settings, paused, version, next_fire_at, created_at,
                updated_at, shard, next_fire_at
         FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::bool[], $6::int8[],
                     $7::timestamptz[], $8::timestamptz[], $9::timestamptz[], $10::int4[])
              AS j(id, app, name, settings, paused, version, next_fire_at, created_at,
                   updated_at, shard)
         ON CONFLICT DO NOTHING RETURNING id"
    ))
    .bind(&ids)
    .bind(&apps)
    .bind(&names)
    .bind(&settings)
    .bind(&paused)
    .bind(&versions)
    .bind(&next)
    .bind(&created)
    .bind(&updated)
    .bind(&shards)
    .fetch_all(&mut *tx)
    .await?;
    if inserted.len() < jobs.len() {
        tx.rollback().await?;
        let inserted: std::collections::HashSet<Uuid> = inserted.into_iter().collect();
        return Ok((0..jobs.len())
            .filter(|&i| !inserted.contains(&jobs[i].id))
            .collect());
    }
    sqlx::query("SELECT pg_notify($1, id::text) FROM UNNEST($2::uuid[]) AS id")
        .bind(cluster::JOBS_CHANNEL)
        .bind(&ids)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Vec::new())
}

pub(super) async fn count_app_jobs(pool: &PgPool, app: &str) -> Result<u64, StoreError> {
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE app = $1")
        .bind(app)
        .fetch_one(pool)
        .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

pub(super) async fn app_uses_group(
    pool: &PgPool,
    app: &str,
    group: &str,
) -> Result<bool, StoreError> {
    // Through `jobs_target_group`: the group's jobs, not the app's.
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM jobs WHERE settings->'target'->>'group' = $2 AND app = $1)",
    )
    .bind(app)
    .bind(group)
    .fetch_one(pool)
    .await?)
}

pub(super) async fn app_groups(pool: &PgPool, app: &str) -> Result<Vec<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT DISTINCT settings->'target'->>'group' FROM jobs WHERE app = $1")
            .bind(app)
            .fetch_all(pool)
            .await?,
    )
}
