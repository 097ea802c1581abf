//! The fire path on PostgreSQL: the timer's look-ahead query and the fire transaction,
//! which proves the shard leases, locks the jobs and records the runs
//! [`crate::store::fire_plan`] decides on.

use std::collections::HashSet;

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::cluster;
use super::presence::live_zones_in;
use super::rows::{job_from_row, shard_array};
use crate::domain::shard::shard_of;
use crate::domain::{LiveZones, Run};
use crate::store::{
    DueCursor, DuePage, FireBatch, Firing, StoreError, decode_jobs,
    fire_plan::{Busy, needs_any_live_zones, waiting_jobs},
    live_since, plan_batch,
};

/// How far a job's next fire may run past its `due_bound` (the timer index's key)
/// before a fire moves the bound up to it. Until then fires change no indexed column and
/// are HOT updates; an every-second job moves its bound once a minute. In exchange the
/// look-ahead query also reads the jobs whose bound is in its window but whose next fire
/// is up to this much later.
const DUE_BOUND_SLACK: Duration = Duration::seconds(60);

/// Column arrays of a batch of runs, for one `INSERT ... SELECT FROM UNNEST`.
#[derive(Default)]
struct RunColumns {
    id: Vec<Uuid>,
    job_id: Vec<Uuid>,
    fire_time: Vec<DateTime<Utc>>,
    shard: Vec<i32>,
    shard_total: Vec<i32>,
    attempt: Vec<i32>,
    state: Vec<String>,
    trigger: Vec<String>,
    payload: Vec<Value>,
    created_at: Vec<DateTime<Utc>>,
    fired_by: Vec<Option<String>>,
    ack_timeout_ms: Vec<i64>,
    run_timeout_ms: Vec<i64>,
    due_at: Vec<Option<DateTime<Utc>>>,
    mode: Vec<String>,
    zone: Vec<Option<String>>,
    overlap: Vec<&'static str>,
    waiting_for: Vec<Option<&'static str>>,
}

impl RunColumns {
    fn push(&mut self, run: &Run) {
        self.id.push(run.id);
        self.job_id.push(run.job_id);
        self.fire_time.push(run.fire_time);
        self.shard.push(run.shard as i32);
        self.shard_total.push(run.shard_total as i32);
        self.attempt.push(run.attempt as i32);
        self.state.push(run.state.as_str().to_string());
        self.trigger.push(run.trigger.as_str().to_string());
        self.payload.push(run.payload.clone());
        self.created_at.push(run.created_at);
        self.fired_by.push(run.fired_by.clone());
        self.ack_timeout_ms.push(run.ack_timeout.as_millis() as i64);
        self.run_timeout_ms.push(run.run_timeout.as_millis() as i64);
        self.due_at.push(run.due_at);
        self.mode.push(run.mode.as_str().to_string());
        self.zone.push(run.zone.clone());
        self.overlap.push(run.overlap.as_str());
        self.waiting_for.push(run.waiting_for.map(|w| w.as_str()));
    }

    /// Inserts the runs, skipping ids already recorded; returns the ids inserted.
    async fn insert(self, conn: &mut sqlx::PgConnection) -> Result<Vec<Uuid>, StoreError> {
        if self.id.is_empty() {
            return Ok(Vec::new());
        }
        let inserted = sqlx::query_scalar(
            "INSERT INTO runs (id, job_id, fire_time, shard, shard_total, attempt, state, trigger,
                               payload, created_at, fired_by, ack_timeout_ms, run_timeout_ms,
                               due_at, mode, zone, overlap, waiting_for)
             SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::timestamptz[], $4::int[], $5::int[],
                                  $6::int[], $7::text[], $8::text[], $9::jsonb[], $10::timestamptz[],
                                  $11::text[], $12::bigint[], $13::bigint[], $14::timestamptz[],
                                  $15::text[], $16::text[], $17::text[], $18::text[])
             ON CONFLICT (id) DO NOTHING
             RETURNING id",
        )
        .bind(self.id)
        .bind(self.job_id)
        .bind(self.fire_time)
        .bind(self.shard)
        .bind(self.shard_total)
        .bind(self.attempt)
        .bind(self.state)
        .bind(self.trigger)
        .bind(self.payload)
        .bind(self.created_at)
        .bind(self.fired_by)
        .bind(self.ack_timeout_ms)
        .bind(self.run_timeout_ms)
        .bind(self.due_at)
        .bind(self.mode)
        .bind(self.zone)
        .bind(self.overlap)
        .bind(self.waiting_for)
        .fetch_all(conn)
        .await?;
        Ok(inserted)
    }
}

pub(super) async fn due_jobs(
    pool: &PgPool,
    after: DueCursor,
    before: DateTime<Utc>,
    limit: u32,
    shards: Option<&[u32]>,
) -> Result<DuePage, StoreError> {
    // Pages follow the index (`due_bound`, id); a job whose bound is inside the window
    // but whose next fire is not is read and left out.
    let rows = sqlx::query(
        "SELECT id, next_fire_at, due_bound FROM jobs
         WHERE NOT paused AND due_bound IS NOT NULL
           AND (due_bound, id) > ($1, $2) AND due_bound < $3 AND next_fire_at < $3
           AND ($5::int[] IS NULL OR shard = ANY($5))
         ORDER BY due_bound, id LIMIT $4",
    )
    .bind(after.0)
    .bind(after.1)
    .bind(before)
    .bind(i64::from(limit))
    .bind(shard_array(shards))
    .fetch_all(pool)
    .await?;
    let rows = rows
        .iter()
        .map(|row| {
            let id = row.try_get("id")?;
            Ok((
                id,
                row.try_get("next_fire_at")?,
                DueCursor(row.try_get("due_bound")?, id),
            ))
        })
        .collect::<Result<_, StoreError>>()?;
    Ok(DuePage::of(rows, limit))
}

pub(super) async fn fire(
    pool: &PgPool,
    shard_count: u32,
    job_ids: &[Uuid],
    now: DateTime<Utc>,
    grace: Duration,
    firing: &Firing,
) -> Result<FireBatch, StoreError> {
    let mut tx = pool.begin().await?;
    let (job_ids, fenced) = match &firing.fence {
        None => (job_ids.to_vec(), Vec::new()),
        Some(fence) => {
            // Locking the lease rows makes a takeover wait for this commit, so a fire
            // either commits under the lease or not at all.
            let proven = cluster::prove_leases(&mut tx, &firing.node, fence).await?;
            job_ids
                .iter()
                .copied()
                .partition(|id| proven.contains(&shard_of(*id, shard_count)))
        }
    };
    let jobs = sqlx::query(concat!(
        "SELECT ",
        job_read_columns!(),
        " FROM jobs WHERE id = ANY($1) ORDER BY id FOR UPDATE"
    ))
    .bind(&job_ids)
    .fetch_all(&mut *tx)
    .await?;
    let jobs = decode_jobs(&jobs, job_from_row);
    let waiting = waiting_jobs(&jobs);
    let rows: Vec<(Uuid, bool)> = if waiting.is_empty() {
        Vec::new()
    } else {
        sqlx::query_as(concat!(
            "SELECT job_id, coalesce(bool_or(",
            held_run!(),
            "), false) FROM runs WHERE job_id = ANY($1) AND ",
            forbidding_runs!(),
            " GROUP BY job_id"
        ))
        .bind(&waiting)
        .fetch_all(&mut *tx)
        .await?
    };
    let mut busy = Busy::default();
    for (id, held) in rows {
        busy.running.insert(id);
        if held {
            busy.held.insert(id);
        }
    }
    let live = if needs_any_live_zones(&jobs) {
        live_zones_in(&mut tx, live_since(now)).await?
    } else {
        LiveZones::default()
    };
    let plan = plan_batch(&job_ids, &jobs, &busy, now, grace, firing, &live);
    let mut columns = RunColumns::default();
    for run in plan.runs() {
        columns.push(run);
    }
    let inserted: HashSet<Uuid> = columns.insert(&mut tx).await?.into_iter().collect();
    if !plan.advance.is_empty() {
        let (ids, nexts): (Vec<Uuid>, Vec<Option<DateTime<Utc>>>) =
            plan.advance.iter().copied().unzip();
        // The bound stays unless the next fire runs past its slack, so most fires change
        // no indexed column and PostgreSQL updates the job in place.
        sqlx::query(
            "UPDATE jobs SET next_fire_at = u.next,
                 due_bound = CASE WHEN u.next >= due_bound AND u.next < due_bound + $3
                                  THEN due_bound ELSE u.next END
             FROM UNNEST($1::uuid[], $2::timestamptz[]) AS u(id, next)
             WHERE jobs.id = u.id",
        )
        .bind(ids)
        .bind(nexts)
        .bind(DUE_BOUND_SLACK)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(plan.into_batch(&inserted, fenced))
}

/// See [`crate::store::Store::insert_backfill`]. The job row is locked `FOR KEY SHARE`
/// (as a fire locks it), so a delete waits and two `forbid` backfills of one job are
/// checked one after the other.
pub(super) async fn insert_backfill(
    pool: &PgPool,
    job_id: Uuid,
    runs: &[Run],
    require_idle: bool,
) -> Result<Option<HashSet<Uuid>>, StoreError> {
    let mut tx = pool.begin().await?;
    let lock = if require_idle {
        "SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE"
    } else {
        "SELECT 1 FROM jobs WHERE id = $1 FOR KEY SHARE"
    };
    let exists: Option<i32> = sqlx::query_scalar(lock)
        .bind(job_id)
        .fetch_optional(&mut *tx)
        .await?;
    if exists.is_none() {
        return Err(StoreError::JobNotFound(job_id));
    }
    if require_idle {
        let busy: Option<i32> = sqlx::query_scalar(concat!(
            "SELECT 1 FROM runs WHERE job_id = $1 AND ",
            unfinished_runs!(),
            " LIMIT 1"
        ))
        .bind(job_id)
        .fetch_optional(&mut *tx)
        .await?;
        if busy.is_some() {
            return Ok(None);
        }
    }
    let mut columns = RunColumns::default();
    for run in runs {
        columns.push(run);
    }
    let inserted: HashSet<Uuid> = columns.insert(&mut tx).await?.into_iter().collect();
    tx.commit().await?;
    Ok(Some(inserted))
}

pub(super) async fn insert_run(pool: &PgPool, run: &Run) -> Result<bool, StoreError> {
    let mut columns = RunColumns::default();
    columns.push(run);
    let mut conn = pool.acquire().await?;
    Ok(!columns.insert(&mut conn).await?.is_empty())
}
