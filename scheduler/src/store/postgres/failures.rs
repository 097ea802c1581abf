//! Pause on failure on PostgreSQL: which jobs have tripped their `pause_after_failures`
//! (see [`crate::domain::failure_pause`]). Reads only; the pause is a job update.

use sqlx::{PgPool, Row};

use super::rows::{job_from_row, shard_array};
use crate::domain::{Job, RunState, failure_pause};
use crate::store::{StoreError, decode::run_state};

/// The running jobs of `shards` (`None`: every shard) with `pause_after_failures` set
/// whose newest finished runs recorded since their last change trip it. One read of
/// the jobs (through the partial index `jobs_pause_on_failure`), then per such job one
/// walk of `runs_by_job`, newest fire first, that stops after `pause_after_failures`
/// finished runs or [`failure_pause::WALK_PAST`] more runs, whichever comes first.
pub(super) async fn failing_jobs(
    pool: &PgPool,
    shards: Option<&[u32]>,
) -> Result<Vec<Job>, StoreError> {
    let jobs = sqlx::query(concat!(
        "SELECT ",
        job_read_columns!(),
        " FROM jobs WHERE NOT paused AND settings->>'pause_after_failures' IS NOT NULL
            AND ($1::int4[] IS NULL OR shard = ANY($1)) ORDER BY id"
    ))
    .bind(shard_array(shards))
    .fetch_all(pool)
    .await?
    .iter()
    .map(job_from_row)
    .collect::<Result<Vec<Job>, StoreError>>()?;
    let mut failing = Vec::new();
    for job in jobs {
        let Some(limit) = job.spec.settings.pause_after_failures else {
            continue;
        };
        let rows = sqlx::query(
            "SELECT id, state FROM (
                 SELECT id, state, created_at, fire_time FROM runs WHERE job_id = $1
                 ORDER BY fire_time DESC, id DESC LIMIT $4
             ) newest
             WHERE created_at > $2 AND state IN ('succeeded', 'dead')
             ORDER BY fire_time DESC, id DESC LIMIT $3",
        )
        .bind(job.id)
        .bind(job.updated_at)
        .bind(i64::from(limit))
        .bind(i64::from(limit) + failure_pause::WALK_PAST)
        .fetch_all(pool)
        .await?;
        let states = rows
            .iter()
            .map(|row| {
                let id: uuid::Uuid = row.try_get("id")?;
                run_state(&format!("run {id}"), &row.try_get::<String, _>("state")?)
            })
            .collect::<Result<Vec<RunState>, StoreError>>()?;
        if failure_pause::trips(limit, &states) {
            failing.push(job);
        }
    }
    Ok(failing)
}
