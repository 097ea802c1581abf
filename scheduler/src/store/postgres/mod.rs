//! The PostgreSQL store: the clustered store. Batches use arrays (`= ANY`, `UNNEST`) so a
//! fire of many jobs is a handful of statements; instants are `timestamptz`. Cluster
//! coordination (nodes, shard leases, notifications) lives in [`cluster`], and applying
//! consumers' replies in [`replies`].

pub mod cluster;
mod replies;

use std::{collections::HashSet, str::FromStr, time::Duration as StdDuration};

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use sqlx::{
    AssertSqlSafe, PgConnection, PgPool, Row,
    postgres::{PgConnectOptions, PgPoolOptions, PgRow},
    types::Json,
};
use uuid::Uuid;

use chime_consumer::protocol::{AttemptRecord, DeliveryMode, Reply};

use super::{
    DueCursor, DuePage, Expect, FireBatch, Firing, JobPage, NextAttempt, OverdueRun, ReplyApplied,
    RunChange, RunPage, Store, StoreError, corrupt, decode_jobs, decode_runs,
    fire_plan::{forbidding_jobs, needs_any_live_zones},
    job_write_error, live_since, plan_batch, update_plan, with_jobs,
};
use crate::domain::broadcast::InstanceReceipt;
use crate::domain::shard::shard_of;
use crate::domain::{
    Job, JobSettings, JobSpec, LiveZones, OverlapPolicy, Run, RunState, RunTrigger, WaitingFor,
};

/// A shard list as a PostgreSQL `int[]`; `None` means every shard.
fn shard_array(shards: Option<&[u32]>) -> Option<Vec<i32>> {
    shards.map(|s| s.iter().map(|&shard| shard as i32).collect())
}

/// How long a connection may sit idle inside a transaction before the server ends it.
/// One retention batch. `= ANY(ARRAY(..))`, not `IN (..)`: planned as a join, `IN` hashed
/// the batch and read the whole table for it on every batch; the array is looked up
/// through the primary key.
macro_rules! prune_runs {
    () => {
        concat!(
            "DELETE FROM runs WHERE id = ANY(ARRAY(SELECT id FROM runs WHERE ",
            finished_runs!(),
            " AND finished_at < $1 ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
        )
    };
}

/// How far a job's next fire may run past its `due_bound` (the timer index's key)
/// before a fire moves the bound up to it. Until then fires change no indexed column and
/// are HOT updates; an every-second job moves its bound once a minute. In exchange the
/// look-ahead query also reads the jobs whose bound is in its window but whose next fire
/// is up to this much later.
const DUE_BOUND_SLACK: Duration = Duration::seconds(60);

/// Healthy transactions here never wait between statements; this bounds how long a
/// stalled node can block a takeover of its shards.
const IDLE_IN_TRANSACTION_TIMEOUT: &str = "2s";

/// Jobs and runs in PostgreSQL.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    shard_count: u32,
}

impl PostgresStore {
    /// Connects to `url`, applies migrations, and creates the cluster with
    /// `shard_count` shards unless it exists (an existing cluster keeps its count).
    pub async fn open(url: &str, shard_count: u32) -> Result<Self, StoreError> {
        // A node stalled inside a transaction (SIGSTOP, a long pause) would keep its lease
        // rows locked, and no other node could take them over; the server ends
        // such a transaction instead, and the stalled node's commit then fails.
        // JIT off: chimed's statements are short, and the reconciler's page query over a
        // large backlog is estimated above `jit_above_cost`, so every pass paid tens of
        // milliseconds of compilation for a query that runs in a few.
        let options = PgConnectOptions::from_str(url)?.options([
            (
                "idle_in_transaction_session_timeout",
                IDLE_IN_TRANSACTION_TIMEOUT,
            ),
            ("jit", "off"),
        ]);
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .acquire_timeout(StdDuration::from_secs(5))
            .connect_with(options)
            .await?;
        sqlx::migrate!("./migrations/postgres").run(&pool).await?;
        let shard_count = cluster::init(&pool, shard_count).await?;
        Ok(Self { pool, shard_count })
    }

    /// The cluster's shard count.
    pub fn shard_count(&self) -> u32 {
        self.shard_count
    }

    /// Runs one retention `DELETE` (bound to a cutoff `$1` and a row limit `$2`) as its
    /// own statement. The rows it picks are locked `SKIP LOCKED`, so nodes pruning at the
    /// same time take different rows instead of waiting on each other.
    async fn delete_batch(
        &self,
        sql: &'static str,
        cutoff: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, StoreError> {
        Ok(sqlx::query(sql)
            .bind(cutoff)
            .bind(i64::from(limit))
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    /// Tells every node's timer that a job changed (delivered when the caller's statement
    /// has committed: each write here is its own transaction).
    async fn notify_job_changed(&self, id: Uuid) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(cluster::JOBS_CHANNEL)
            .bind(id.to_string())
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

fn job_from_row(row: &PgRow) -> Result<Job, StoreError> {
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
    })
}

fn run_from_row(row: &PgRow) -> Result<Run, StoreError> {
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
        state: RunState::parse(&state).ok_or_else(|| corrupt(&what, format!("state {state:?}")))?,
        trigger: RunTrigger::parse(&trigger)
            .ok_or_else(|| corrupt(&what, format!("trigger {trigger:?}")))?,
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
        mode: {
            let name: String = row.try_get("mode")?;
            DeliveryMode::parse(&name).ok_or_else(|| corrupt(&what, format!("mode {name:?}")))?
        },
        zone: row.try_get("zone")?,
        overlap: {
            let name: String = row.try_get("overlap")?;
            OverlapPolicy::parse(&name)
                .ok_or_else(|| corrupt(&what, format!("overlap {name:?}")))?
        },
        instances: row
            .try_get::<Json<Vec<InstanceReceipt>>, _>("instances")
            .map_err(|e| corrupt(&what, e))?
            .0,
        waiting_for: RunState::parse(&state).and_then(|state| {
            WaitingFor::of(
                state,
                row.try_get::<Option<String>, _>("waiting_for")
                    .ok()?
                    .as_deref(),
            )
        }),
    })
}

fn millis(ms: i64) -> StdDuration {
    StdDuration::from_millis(ms.max(0) as u64)
}

fn record_json(record: Option<&AttemptRecord>) -> Option<Json<&AttemptRecord>> {
    record.map(Json)
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
               AND (a.state IS NULL AND r.state NOT IN ('succeeded', 'dead') OR r.state = a.state)
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

/// Most rows one set-based statement names. Over a few hundred ids PostgreSQL may plan
/// `id = ANY(array)` on a large `runs` table as a sequential scan (it rates reading the
/// whole table about as cheap as a thousand primary-key probes), and the batch's cost
/// would then follow the table, not the batch. At this size the primary key wins.
pub(super) const MAX_SET_ROWS: usize = 100;

/// An [`Expect`] as SQL conditions on `state` and `attempt`, bound as parameters `$n` and
/// `$n+1`.
fn expect_sql(n: usize) -> String {
    format!(
        "(${n}::text IS NULL AND state NOT IN ('succeeded', 'dead') OR state = ${n}::text)
         AND (${m}::int IS NULL OR attempt = ${m}::int)",
        m = n + 1
    )
}

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

impl PostgresStore {
    async fn live_zones_in(
        conn: &mut sqlx::PgConnection,
        since: DateTime<Utc>,
    ) -> Result<LiveZones, StoreError> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT group_name, zone FROM consumers WHERE zone IS NOT NULL AND last_seen >= $1",
        )
        .bind(since)
        .fetch_all(conn)
        .await?;
        Ok(LiveZones::new(rows))
    }
}

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
    }

    /// Inserts the runs, skipping ids already recorded; returns the ids inserted.
    async fn insert(self, conn: &mut sqlx::PgConnection) -> Result<Vec<Uuid>, StoreError> {
        if self.id.is_empty() {
            return Ok(Vec::new());
        }
        let inserted = sqlx::query_scalar(
            "INSERT INTO runs (id, job_id, fire_time, shard, shard_total, attempt, state, trigger,
                               payload, created_at, fired_by, ack_timeout_ms, run_timeout_ms,
                               due_at, mode, zone, overlap)
             SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::timestamptz[], $4::int[], $5::int[],
                                  $6::int[], $7::text[], $8::text[], $9::jsonb[], $10::timestamptz[],
                                  $11::text[], $12::bigint[], $13::bigint[], $14::timestamptz[],
                                  $15::text[], $16::text[], $17::text[])
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
        .fetch_all(conn)
        .await?;
        Ok(inserted)
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn insert_job(&self, job: &Job) -> Result<(), StoreError> {
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
        .bind(shard_of(job.id, self.shard_count) as i32)
        .execute(&self.pool)
        .await;
        result.map_err(|e| job_write_error(e, job))?;
        self.notify_job_changed(job.id).await
    }

    async fn get_job(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        sqlx::query(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .as_ref()
        .map(job_from_row)
        .transpose()
    }

    async fn list_jobs(&self, page: &JobPage) -> Result<Vec<Job>, StoreError> {
        sqlx::query(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE ($1::text IS NULL OR app = $1) AND ($2::uuid IS NULL OR id > $2)
              ORDER BY id LIMIT $3"
        ))
        .bind(&page.app)
        .bind(page.after)
        .bind(i64::from(page.limit))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(job_from_row)
        .collect()
    }

    async fn update_job(
        &self,
        job: &Job,
        expected_version: i64,
        set_next_fire: bool,
    ) -> Result<Job, StoreError> {
        let mut tx = self.pool.begin().await?;
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
                 due_bound = CASE WHEN $6 THEN $7 ELSE due_bound END, updated_at = $8
             WHERE id = $9 AND version = $10 RETURNING ",
            job_columns!()
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
                            job_columns!()
                        ))
                        .bind(job.id)
                        .bind(earliest)
                        .fetch_one(&mut *tx)
                        .await?
                    }
                    None => row,
                };
                tx.commit().await?;
                self.notify_job_changed(job.id).await?;
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

    async fn delete_job(&self, id: Uuid) -> Result<bool, StoreError> {
        let deleted = sqlx::query("DELETE FROM jobs WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?
            .rows_affected();
        if deleted == 1 {
            self.notify_job_changed(id).await?;
        }
        Ok(deleted == 1)
    }

    async fn due_jobs(
        &self,
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
        .fetch_all(&self.pool)
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

    async fn fire(
        &self,
        job_ids: &[Uuid],
        now: DateTime<Utc>,
        grace: Duration,
        firing: &Firing,
    ) -> Result<FireBatch, StoreError> {
        let mut tx = self.pool.begin().await?;
        let (job_ids, fenced) = match &firing.fence {
            None => (job_ids.to_vec(), Vec::new()),
            Some(fence) => {
                // Locking the lease rows makes a takeover wait for this commit, so a fire
                // either commits under the lease or not at all.
                let proven = cluster::prove_leases(&mut tx, &firing.node, fence).await?;
                job_ids
                    .iter()
                    .copied()
                    .partition(|id| proven.contains(&shard_of(*id, self.shard_count)))
            }
        };
        let jobs = sqlx::query(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE id = ANY($1) ORDER BY id FOR UPDATE"
        ))
        .bind(&job_ids)
        .fetch_all(&mut *tx)
        .await?;
        let jobs = decode_jobs(&jobs, job_from_row);
        let forbid = forbidding_jobs(&jobs);
        let busy: HashSet<Uuid> = if forbid.is_empty() {
            HashSet::new()
        } else {
            sqlx::query_scalar(concat!(
                "SELECT DISTINCT job_id FROM runs WHERE job_id = ANY($1) AND ",
                forbidding_runs!()
            ))
            .bind(&forbid)
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .collect()
        };
        let live = if needs_any_live_zones(&jobs) {
            Self::live_zones_in(&mut tx, live_since(now)).await?
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

    async fn insert_run(&self, run: &Run) -> Result<bool, StoreError> {
        let mut columns = RunColumns::default();
        columns.push(run);
        let mut conn = self.pool.acquire().await?;
        Ok(!columns.insert(&mut conn).await?.is_empty())
    }

    async fn mark_dispatched(&self, run_ids: &[Uuid], at: DateTime<Utc>) -> Result<(), StoreError> {
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
            let scheduled: Vec<Uuid> = sqlx::query_as::<_, (Uuid, String)>(
                "SELECT id, state FROM runs WHERE id = ANY($1)",
            )
            .bind(part)
            .fetch_all(&self.pool)
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
            .execute(&self.pool)
            .await?;
        }
        Ok(())
    }

    async fn note_publish_failure(&self, run_id: Uuid, reason: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE runs SET error = $2 WHERE id = $1 AND state = 'scheduled'")
            .bind(run_id)
            .bind(reason)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn record_replies(&self, batch: &[&Reply]) -> Result<Vec<ReplyApplied>, StoreError> {
        let now = Utc::now();
        let mut tx = self.pool.begin().await?;
        let applied = replies::record_replies(&mut tx, batch, now).await?;
        tx.commit().await?;
        Ok(applied)
    }

    async fn get_run(&self, id: Uuid) -> Result<Option<Run>, StoreError> {
        sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .as_ref()
        .map(run_from_row)
        .transpose()
    }

    async fn list_runs(&self, job_id: Uuid, page: &RunPage) -> Result<Vec<Run>, StoreError> {
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
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(run_from_row)
        .collect()
    }

    async fn scheduled_runs(&self, run_ids: &[Uuid]) -> Result<HashSet<Uuid>, StoreError> {
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
                    .fetch_all(&self.pool)
                    .await?;
            scheduled.extend(
                rows.into_iter()
                    .filter(|(_, state)| state == RunState::Scheduled.as_str())
                    .map(|(id, _)| id),
            );
        }
        Ok(scheduled)
    }

    async fn overdue_runs(
        &self,
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
        .fetch_all(&self.pool)
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
            job_columns!(),
            " FROM jobs WHERE id = ANY($1)"
        ))
        .bind(&job_ids)
        .fetch_all(&self.pool)
        .await?;
        Ok(with_jobs(runs, decode_jobs(&jobs, job_from_row)))
    }

    async fn next_attempts(
        &self,
        runs: &[NextAttempt<'_>],
        now: DateTime<Utc>,
    ) -> Result<HashSet<Uuid>, StoreError> {
        if runs.is_empty() {
            return Ok(HashSet::new());
        }
        let mut sorted = runs.to_vec();
        sorted.sort_unstable_by_key(|r| r.run_id);
        let mut moved = HashSet::with_capacity(runs.len());
        let mut tx = self.pool.begin().await?;
        for part in sorted.chunks(MAX_SET_ROWS) {
            moved.extend(next_attempts_of(&mut tx, part, now).await?);
        }
        tx.commit().await?;
        Ok(moved)
    }

    async fn await_consumer(
        &self,
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
            .fetch_all(&self.pool)
            .await?;
            moved.extend(rows);
        }
        Ok(moved)
    }

    async fn kill_run(
        &self,
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
        .execute(&self.pool)
        .await?
        .rows_affected()
            == 1;
        Ok(changed)
    }

    async fn mark_dead_lettered(&self, run_id: Uuid) -> Result<(), StoreError> {
        sqlx::query("UPDATE runs SET due_at = NULL WHERE id = $1 AND state = 'dead'")
            .bind(run_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn target_groups(&self) -> Result<Vec<String>, StoreError> {
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
        .fetch_all(&self.pool)
        .await?)
    }

    async fn update_run(
        &self,
        run_id: Uuid,
        change: &RunChange<'_>,
    ) -> Result<Option<(bool, Run)>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let Some(row) = sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE id = $1 FOR UPDATE"
        ))
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(None);
        };
        let mut run = run_from_row(&row)?;
        let Some(Json(settings)) =
            sqlx::query_scalar::<_, Json<JobSettings>>("SELECT settings FROM jobs WHERE id = $1")
                .bind(run.job_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| corrupt(format!("job {}", run.job_id), e))?
        else {
            return Ok(None);
        };
        if !change(&mut run, &settings) {
            return Ok(Some((false, run)));
        }
        sqlx::query(
            "UPDATE runs SET state = $2, attempt = $3, dispatched_at = $4, acked_at = $5,
                 finished_at = $6, consumer = $7, output = $8, error = $9, due_at = $10,
                 history = $11, progress = $12, heartbeat_at = $13, instances = $14
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
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some((true, run)))
    }

    async fn live_zones(&self, since: DateTime<Utc>) -> Result<LiveZones, StoreError> {
        let mut conn = self.pool.acquire().await?;
        Self::live_zones_in(&mut conn, since).await
    }

    async fn observed_patterns(&self, since: DateTime<Utc>) -> Result<Vec<String>, StoreError> {
        let patterns =
            sqlx::query_scalar("SELECT DISTINCT pattern FROM observers WHERE last_seen >= $1")
                .bind(since)
                .fetch_all(&self.pool)
                .await?;
        Ok(patterns)
    }

    async fn observer_names(&self) -> Result<Vec<String>, StoreError> {
        let names = sqlx::query_scalar("SELECT DISTINCT name FROM observers ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        Ok(names)
    }

    async fn note_on_run(&self, run_id: Uuid, record: &AttemptRecord) -> Result<bool, StoreError> {
        let noted = sqlx::query(
            "UPDATE runs SET history = history || jsonb_build_array($2::jsonb) WHERE id = $1 AND jsonb_array_length(history) < $3",
        )
        .bind(run_id)
        .bind(record_json(Some(record)))
        .bind(super::MAX_NOTES as i32)
        .execute(&self.pool)
        .await?
        .rows_affected()
            == 1;
        Ok(noted)
    }

    async fn prune_runs(&self, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError> {
        self.delete_batch(prune_runs!(), cutoff, limit).await
    }

    async fn prune_consumers(&self, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError> {
        self.delete_batch(
            "DELETE FROM consumers WHERE instance IN (SELECT instance FROM consumers
                 WHERE last_seen < $1 ORDER BY last_seen LIMIT $2 FOR UPDATE SKIP LOCKED)",
            cutoff,
            limit,
        )
        .await
    }

    async fn prune_observers(&self, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError> {
        self.delete_batch(
            "DELETE FROM observers WHERE (name, pattern) IN (SELECT name, pattern FROM observers
                 WHERE last_seen < $1 ORDER BY last_seen LIMIT $2 FOR UPDATE SKIP LOCKED)",
            cutoff,
            limit,
        )
        .await
    }

    async fn fire_items(
        &self,
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
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }
}

impl PostgresStore {
    /// `EXPLAIN (ANALYZE, FORMAT JSON)` of one retention batch, rolled back, for tests
    /// that its cost follows the batch, not the table.
    pub async fn explain_prune_runs(
        &self,
        cutoff: DateTime<Utc>,
        limit: u32,
    ) -> Result<Value, StoreError> {
        let mut tx = self.pool.begin().await?;
        let plan: Json<Value> =
            sqlx::query_scalar(concat!("EXPLAIN (ANALYZE, FORMAT JSON) ", prune_runs!()))
                .bind(cutoff)
                .bind(i64::from(limit))
                .fetch_one(&mut *tx)
                .await?;
        tx.rollback().await?;
        Ok(plan.0)
    }

    /// `EXPLAIN (ANALYZE, FORMAT JSON)` of the reconciler's overdue-runs query, for tests
    /// that its cost follows the number of overdue runs.
    pub async fn explain_overdue(&self, shards: Option<&[u32]>) -> Result<Value, StoreError> {
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
        .fetch_one(&self.pool)
        .await?;
        Ok(plan.0)
    }
}
