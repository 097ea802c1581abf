//! The SQLite store: the embedded default for a single node. WAL journal, one writer
//! connection that every write goes through (writers queue for it instead of failing with
//! "database is locked"), a few reader connections for reads outside a write, and
//! `BEGIN IMMEDIATE` for every write transaction. Instants are stored as unix
//! milliseconds. Consumers' replies are applied in [`replies`].

mod replies;

use std::{collections::HashSet, path::PathBuf, str::FromStr, time::Duration as StdDuration};

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use sqlx::{
    AssertSqlSafe, Executor, Row, Sqlite, SqliteConnection, SqlitePool,
    sqlite::{
        SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
    },
};
use uuid::Uuid;

use chime_consumer::protocol::{AttemptRecord, DeliveryMode, Reply};

use super::{
    DueCursor, DuePage, Expect, FireBatch, Firing, JobPage, NextAttempt, OverdueRun, ReplyApplied,
    RunChange, RunPage, Store, StoreError, corrupt, decode_jobs, decode_runs,
    fire_plan::{forbidding_jobs, needs_any_live_zones},
    job_write_error, live_since, plan_batch, update_plan, with_jobs,
};
use crate::domain::shard::{DEFAULT_SHARD_COUNT, shard_of};
use crate::domain::{
    Job, JobSettings, JobSpec, LiveZones, OverlapPolicy, Run, RunState, RunTrigger, WaitingFor,
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

/// Reader connections, for reads that are not part of a write (API reads, the timer's
/// refill, the reconciler's scan).
const READERS: u32 = 3;

/// The writer's page cache, in KiB (SQLite's default is 2 000): a fire touches a leaf of
/// each `runs` index at a random place, and leaves read back from the OS cost a system
/// call each. Pages are only held once touched, so an idle node stays small.
const WRITER_CACHE_KIB: u32 = 32 * 1024;

/// Jobs and runs in a SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// The one connection that writes. SQLite runs one write transaction at a time; when
    /// several connections compete, the losers poll in SQLite's busy handler, sleeping
    /// 1–100 ms between tries, and every commit throws away the other connections' page
    /// caches. Queued here instead, the next writer starts the moment the last one
    /// commits, and the writer's cache stays warm.
    writer: SqlitePool,
    /// Connections for reads outside a write transaction; WAL lets them run beside it.
    readers: SqlitePool,
    file: Option<PathBuf>,
}

/// Held while a `chimed` runs on a SQLite file: an exclusive OS lock on `FILE.lock`,
/// released by the kernel when the process exits, however it exits.
#[derive(Debug)]
pub struct SingleNodeLock {
    _file: std::fs::File,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `url` and applies migrations.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?;
        let file = Some(options.get_filename().to_path_buf())
            .filter(|path| !path.as_os_str().is_empty() && path.as_os_str() != ":memory:");
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(StdDuration::from_secs(10))
            .foreign_keys(true);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(
                options
                    .clone()
                    .pragma("cache_size", format!("-{WRITER_CACHE_KIB}")),
            )
            .await?;
        sqlx::migrate!("./migrations/sqlite").run(&writer).await?;
        let readers = SqlitePoolOptions::new()
            .max_connections(READERS)
            .connect_with(options)
            .await?;
        let store = Self {
            writer,
            readers,
            file,
        };
        store.backfill_shards().await?;
        Ok(store)
    }

    /// Takes the file's single-node lock: SQLite cannot coordinate nodes, so a second
    /// `chimed` on the same file is refused instead of firing everything twice.
    pub fn lock_single_node(&self) -> Result<SingleNodeLock, StoreError> {
        let Some(db) = &self.file else {
            return Err(StoreError::SingleNode(
                "an in-memory SQLite store cannot be shared; nothing to lock".into(),
            ));
        };
        let mut lock_path = db.clone().into_os_string();
        lock_path.push(".lock");
        let lock_path = PathBuf::from(lock_path);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| {
                StoreError::SingleNode(format!("cannot open {}: {e}", lock_path.display()))
            })?;
        match file.try_lock() {
            Ok(()) => Ok(SingleNodeLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::SingleNode(format!(
                "another chimed is already running on {} (it holds {}); SQLite is single-node: \
                 stop it, or use PostgreSQL (CHIME_DATABASE_URL=postgres://...) to run a cluster",
                db.display(),
                lock_path.display()
            ))),
            Err(std::fs::TryLockError::Error(e)) => Err(StoreError::SingleNode(format!(
                "cannot lock {}: {e}",
                lock_path.display()
            ))),
        }
    }

    /// Gives jobs created before shards existed their shard.
    async fn backfill_shards(&self) -> Result<(), StoreError> {
        let ids: Vec<String> = sqlx::query_scalar("SELECT id FROM jobs WHERE shard IS NULL")
            .fetch_all(&self.readers)
            .await?;
        if ids.is_empty() {
            return Ok(());
        }
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        for id in ids {
            let shard = shard_of(uuid("job", &id)?, DEFAULT_SHARD_COUNT);
            sqlx::query("UPDATE jobs SET shard = ? WHERE id = ?")
                .bind(shard)
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// A shard list as the JSON array `json_each` reads; `None` means every shard.
fn shard_list(shards: Option<&[u32]>) -> Option<String> {
    shards.map(|s| serde_json::to_string(s).expect("numbers serialise"))
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn opt_ms(t: Option<DateTime<Utc>>) -> Option<i64> {
    t.map(ms)
}

fn instant(what: &str, v: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_millis(v).ok_or_else(|| corrupt(what, format!("bad instant {v}")))
}

fn opt_instant(what: &str, v: Option<i64>) -> Result<Option<DateTime<Utc>>, StoreError> {
    v.map(|v| instant(what, v)).transpose()
}

fn uuid(what: &str, text: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|e| corrupt(what, e))
}

fn json(what: &str, text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt(what, e))
}

fn job_from_row(row: &SqliteRow) -> Result<Job, StoreError> {
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
    })
}

fn run_from_row(row: &SqliteRow) -> Result<Run, StoreError> {
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
        state: RunState::parse(&state).ok_or_else(|| corrupt(&what, format!("state {state:?}")))?,
        trigger: RunTrigger::parse(&trigger)
            .ok_or_else(|| corrupt(&what, format!("trigger {trigger:?}")))?,
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
        mode: mode(&what, &row.try_get::<String, _>("mode")?)?,
        zone: row.try_get("zone")?,
        instances: serde_json::from_str(&row.try_get::<String, _>("instances")?)
            .map_err(|e| corrupt(&what, e))?,
        overlap: {
            let name: String = row.try_get("overlap")?;
            OverlapPolicy::parse(&name)
                .ok_or_else(|| corrupt(&what, format!("overlap {name:?}")))?
        },
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

fn record_text(record: Option<&AttemptRecord>) -> Option<String> {
    record.map(|r| serde_json::to_string(r).expect("records serialise"))
}

/// An [`Expect`] as SQL conditions on `state` and `attempt`, bound as parameters `n` and
/// `n + 1`.
fn expect_sql(n: usize) -> String {
    format!(
        "(?{n} IS NULL AND state NOT IN ('succeeded', 'dead') OR state = ?{n})
         AND (?{m} IS NULL OR attempt = ?{m})",
        m = n + 1
    )
}

fn settings_text(job: &Job) -> String {
    serde_json::to_string(&job.spec.settings).expect("job settings serialise")
}

/// Records `runs` and returns the ids of those that were new (one already recorded is
/// left as it is). Their columns travel as one JSON array of rows, so a whole fire batch costs two
/// round trips to sqlx's SQLite worker thread instead of one per run: at a few thousand
/// fires a second those hand-offs, not SQLite, were the writer's cost. The rows are read
/// with `jsonb_each`, not `json_each`: `json_each` renders a row to text for every
/// `value ->> N` and each extraction looks the text up again, 27 times a run.
/// Call it inside a `BEGIN IMMEDIATE` transaction, so nothing records a run between the
/// check and the insert.
async fn insert_runs(
    conn: &mut SqliteConnection,
    runs: &[&Run],
) -> Result<HashSet<Uuid>, StoreError> {
    if runs.is_empty() {
        return Ok(HashSet::new());
    }
    let ids = serde_json::to_string(&runs.iter().map(|run| run.id).collect::<Vec<_>>())
        .expect("uuids serialise");
    let existing: Vec<String> =
        sqlx::query_scalar("SELECT id FROM runs WHERE id IN (SELECT value FROM json_each(?))")
            .bind(&ids)
            .fetch_all(&mut *conn)
            .await?;
    let existing = existing
        .iter()
        .map(|id| uuid("run", id))
        .collect::<Result<HashSet<_>, _>>()?;
    let new: Vec<Value> = runs
        .iter()
        .filter(|run| !existing.contains(&run.id))
        .map(|run| run_row(run))
        .collect();
    if !new.is_empty() {
        sqlx::query(concat!(
            "INSERT INTO runs (",
            run_columns!(),
            ") SELECT \
             value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, \
             value ->> 6, value ->> 7, value ->> 8, value ->> 9, value ->> 10, value ->> 11, \
             value ->> 12, value ->> 13, value ->> 14, value ->> 15, value ->> 16, value ->> 17, \
             value ->> 18, value ->> 19, value ->> 20, value ->> 21, value ->> 22, value ->> 23, \
             value ->> 24, value ->> 25, value ->> 26, NULL \
             FROM jsonb_each(?) WHERE true ON CONFLICT (id) DO NOTHING"
        ))
        .bind(Value::Array(new).to_string())
        .execute(&mut *conn)
        .await?;
    }
    Ok(runs
        .iter()
        .map(|run| run.id)
        .filter(|id| !existing.contains(id))
        .collect())
}

/// `run`'s columns in [`run_columns`] order, as [`insert_runs`] reads them.
fn run_row(run: &Run) -> Value {
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
    ])
}

impl SqliteStore {
    /// Runs one retention `DELETE` (bound to a cutoff `?1` and a row limit `?2`) in its
    /// own short write transaction; returns the rows deleted.
    async fn delete_batch(
        &self,
        sql: &'static str,
        cutoff: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        let deleted = sqlx::query(sql)
            .bind(ms(cutoff))
            .bind(limit)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(deleted)
    }

    async fn live_zones_in<'e, E: Executor<'e, Database = Sqlite>>(
        executor: E,
        since: DateTime<Utc>,
    ) -> Result<LiveZones, StoreError> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT group_name, zone FROM consumers WHERE zone IS NOT NULL AND last_seen >= ?",
        )
        .bind(ms(since))
        .fetch_all(executor)
        .await?;
        Ok(LiveZones::new(rows))
    }
}

fn mode(what: &str, name: &str) -> Result<DeliveryMode, StoreError> {
    DeliveryMode::parse(name).ok_or_else(|| corrupt(what, format!("mode {name:?}")))
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.readers).await?;
        Ok(())
    }

    async fn insert_job(&self, job: &Job) -> Result<(), StoreError> {
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
        .execute(&self.writer)
        .await;
        result.map(|_| ()).map_err(|e| job_write_error(e, job))
    }

    async fn get_job(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        sqlx::query(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE id = ?"
        ))
        .bind(id.to_string())
        .fetch_optional(&self.readers)
        .await?
        .as_ref()
        .map(job_from_row)
        .transpose()
    }

    async fn list_jobs(&self, page: &JobPage) -> Result<Vec<Job>, StoreError> {
        sqlx::query(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE (?1 IS NULL OR app = ?1) AND (?2 IS NULL OR id > ?2) ORDER BY id LIMIT ?3"
        ))
        .bind(&page.app)
        .bind(page.after.map(|id| id.to_string()))
        .bind(page.limit)
        .fetch_all(&self.readers)
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
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        let stored_overlap: Option<String> =
            sqlx::query_scalar("SELECT json_extract(settings, '$.overlap') FROM jobs WHERE id = ?")
                .bind(job.id.to_string())
                .fetch_optional(&mut *tx)
                .await?
                .flatten();
        let becomes_forbid = update_plan::becomes_forbid(job, stored_overlap.as_deref());
        let updated = sqlx::query(concat!(
            "UPDATE jobs SET app = ?, name = ?, settings = ?, paused = ?, version = ?, \
             next_fire_at = CASE WHEN ? THEN ? ELSE next_fire_at END, updated_at = ? \
             WHERE id = ? AND version = ? RETURNING ",
            job_columns!()
        ))
        .bind(&job.spec.app)
        .bind(&job.spec.name)
        .bind(settings_text(job))
        .bind(job.spec.paused)
        .bind(job.version)
        .bind(set_next_fire)
        .bind(opt_ms(job.next_fire_at))
        .bind(ms(job.updated_at))
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
                        job_columns!()
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

    async fn delete_job(&self, id: Uuid) -> Result<bool, StoreError> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        let deleted = sqlx::query("DELETE FROM jobs WHERE id = ?")
            .bind(id.to_string())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(deleted == 1)
    }

    async fn due_jobs(
        &self,
        after: DueCursor,
        before: DateTime<Utc>,
        limit: u32,
        shards: Option<&[u32]>,
    ) -> Result<DuePage, StoreError> {
        let rows = sqlx::query(
            "SELECT id, next_fire_at FROM jobs
             WHERE paused = 0 AND next_fire_at IS NOT NULL
               AND (next_fire_at, id) > (?1, ?2) AND next_fire_at < ?3
               AND (?5 IS NULL OR shard IN (SELECT value FROM json_each(?5)))
             ORDER BY next_fire_at, id LIMIT ?4",
        )
        .bind(ms(after.0))
        .bind(after.1.to_string())
        .bind(ms(before))
        .bind(limit)
        .bind(shard_list(shards))
        .fetch_all(&self.readers)
        .await?;
        let rows = rows
            .iter()
            .map(|row| {
                let id: String = row.try_get("id")?;
                let id = uuid("job", &id)?;
                let at = instant("job", row.try_get("next_fire_at")?)?;
                Ok((id, at, DueCursor(at, id)))
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
        // Single node: the file lock (see `lock_single_node`) is the fence.
        let ids = serde_json::to_string(&job_ids).expect("uuids serialise");
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        let jobs = sqlx::query(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE id IN (SELECT value FROM json_each(?))"
        ))
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?;
        let jobs = decode_jobs(&jobs, job_from_row);
        // Only jobs that forbid overlap need to know about unfinished runs.
        let forbid = forbidding_jobs(&jobs);
        let busy: Vec<String> = if forbid.is_empty() {
            Vec::new()
        } else {
            sqlx::query_scalar(concat!(
                "SELECT DISTINCT job_id FROM runs
                 WHERE job_id IN (SELECT value FROM json_each(?)) AND ",
                forbidding_runs!()
            ))
            .bind(serde_json::to_string(&forbid).expect("uuids serialise"))
            .fetch_all(&mut *tx)
            .await?
        };
        let busy = busy
            .iter()
            .map(|id| uuid("run", id))
            .collect::<Result<HashSet<_>, _>>()?;
        let live = if needs_any_live_zones(&jobs) {
            Self::live_zones_in(&mut *tx, live_since(now)).await?
        } else {
            LiveZones::default()
        };
        let plan = plan_batch(job_ids, &jobs, &busy, now, grace, firing, &live);
        let runs: Vec<&Run> = plan.runs().collect();
        let inserted = insert_runs(&mut tx, &runs).await?;
        if !plan.advance.is_empty() {
            let advance: Vec<Value> = plan
                .advance
                .iter()
                .map(|(id, next)| serde_json::json!([id.to_string(), opt_ms(*next)]))
                .collect();
            sqlx::query(
                "UPDATE jobs SET next_fire_at = a.next
                 FROM (SELECT value ->> 0 AS id, value ->> 1 AS next FROM jsonb_each(?)) AS a
                 WHERE jobs.id = a.id",
            )
            .bind(Value::Array(advance).to_string())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(plan.into_batch(&inserted, Vec::new()))
    }

    async fn insert_run(&self, run: &Run) -> Result<bool, StoreError> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        let inserted = insert_runs(&mut tx, &[run]).await?;
        tx.commit().await?;
        Ok(!inserted.is_empty())
    }

    async fn mark_dispatched(&self, run_ids: &[Uuid], at: DateTime<Utc>) -> Result<(), StoreError> {
        if run_ids.is_empty() {
            return Ok(());
        }
        let ids = serde_json::to_string(&run_ids).expect("uuids serialise");
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query(
            "UPDATE runs SET state = 'dispatched', dispatched_at = ?1, error = NULL, waiting_for = NULL,
                 due_at = ?1 + ack_timeout_ms
             WHERE id IN (SELECT value FROM json_each(?2)) AND state = 'scheduled'",
        )
        .bind(ms(at))
        .bind(ids)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn note_publish_failure(&self, run_id: Uuid, reason: &str) -> Result<(), StoreError> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("UPDATE runs SET error = ? WHERE id = ? AND state = 'scheduled'")
            .bind(reason)
            .bind(run_id.to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn record_replies(&self, batch: &[&Reply]) -> Result<Vec<ReplyApplied>, StoreError> {
        let now = Utc::now();
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        let applied = replies::record_replies(&mut tx, batch, now).await?;
        tx.commit().await?;
        Ok(applied)
    }

    async fn get_run(&self, id: Uuid) -> Result<Option<Run>, StoreError> {
        sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE id = ?"
        ))
        .bind(id.to_string())
        .fetch_optional(&self.readers)
        .await?
        .as_ref()
        .map(run_from_row)
        .transpose()
    }

    async fn list_runs(&self, job_id: Uuid, page: &RunPage) -> Result<Vec<Run>, StoreError> {
        let (before_time, before_id) = match page.before {
            Some((t, id)) => (Some(ms(t)), Some(id.to_string())),
            None => (None, None),
        };
        sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE job_id = ?1 AND (?2 IS NULL OR (fire_time, id) < (?2, ?3))
              ORDER BY fire_time DESC, id DESC LIMIT ?4"
        ))
        .bind(job_id.to_string())
        .bind(before_time)
        .bind(before_id)
        .bind(page.limit)
        .fetch_all(&self.readers)
        .await?
        .iter()
        .map(run_from_row)
        .collect()
    }

    async fn scheduled_runs(&self, run_ids: &[Uuid]) -> Result<HashSet<Uuid>, StoreError> {
        if run_ids.is_empty() {
            return Ok(HashSet::new());
        }
        let ids = serde_json::to_string(&run_ids).expect("uuids serialise");
        let rows: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM runs WHERE id IN (SELECT value FROM json_each(?)) AND state = 'scheduled'",
        )
        .bind(ids)
        .fetch_all(&self.readers)
        .await?;
        rows.iter().map(|id| uuid("run", id)).collect()
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
        .bind(ms(now))
        .bind(ms(unconfirmed_before))
        .bind(shard_list(shards))
        .bind(limit)
        .bind(after.map(|(at, _)| ms(at)))
        .bind(after.map(|(_, id)| id.to_string()))
        .fetch_all(&self.readers)
        .await?;
        let runs = decode_runs(&runs, run_from_row);
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let job_ids: HashSet<Uuid> = runs.iter().map(|run| run.job_id).collect();
        let jobs = sqlx::query(concat!(
            "SELECT ",
            job_columns!(),
            " FROM jobs WHERE id IN (SELECT value FROM json_each(?))"
        ))
        .bind(serde_json::to_string(&job_ids).expect("uuids serialise"))
        .fetch_all(&self.readers)
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
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
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
               AND (a.state IS NULL AND runs.state NOT IN ('succeeded', 'dead')
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

    async fn await_consumer(
        &self,
        runs: &[(Uuid, u32)],
        now: DateTime<Utc>,
    ) -> Result<HashSet<Uuid>, StoreError> {
        if runs.is_empty() {
            return Ok(HashSet::new());
        }
        let rows: Vec<(String, u32)> = runs.iter().map(|&(id, a)| (id.to_string(), a)).collect();
        let rows = serde_json::to_string(&rows).expect("pairs serialise");
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
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

    async fn kill_run(
        &self,
        run_id: Uuid,
        expect: Expect,
        reason: &str,
        record: Option<&AttemptRecord>,
        dead_lettered: bool,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
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

    async fn mark_dead_lettered(&self, run_id: Uuid) -> Result<(), StoreError> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("UPDATE runs SET due_at = NULL WHERE id = ? AND state = 'dead'")
            .bind(run_id.to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn target_groups(&self) -> Result<Vec<String>, StoreError> {
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
        .fetch_all(&self.readers)
        .await?)
    }

    async fn update_run(
        &self,
        run_id: Uuid,
        change: &RunChange<'_>,
    ) -> Result<Option<(bool, Run)>, StoreError> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        let Some(row) = sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE id = ?"
        ))
        .bind(run_id.to_string())
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(None);
        };
        let mut run = run_from_row(&row)?;
        let Some(settings) =
            sqlx::query_scalar::<_, String>("SELECT settings FROM jobs WHERE id = ?")
                .bind(run.job_id.to_string())
                .fetch_optional(&mut *tx)
                .await?
        else {
            return Ok(None);
        };
        let settings: JobSettings = serde_json::from_str(&settings)
            .map_err(|e| corrupt(format!("job {}", run.job_id), e))?;
        if !change(&mut run, &settings) {
            return Ok(Some((false, run)));
        }
        sqlx::query(
            "UPDATE runs SET state = ?2, attempt = ?3, dispatched_at = ?4, acked_at = ?5,
                 finished_at = ?6, consumer = ?7, output = ?8, error = ?9, due_at = ?10,
                 history = ?11, progress = ?12, heartbeat_at = ?13, instances = ?14
             WHERE id = ?1",
        )
        .bind(run.id.to_string())
        .bind(run.state.as_str())
        .bind(run.attempt)
        .bind(opt_ms(run.dispatched_at))
        .bind(opt_ms(run.acked_at))
        .bind(opt_ms(run.finished_at))
        .bind(&run.consumer)
        .bind(run.output.as_ref().map(Value::to_string))
        .bind(&run.error)
        .bind(opt_ms(run.due_at))
        .bind(serde_json::to_string(&run.history).expect("history serialises"))
        .bind(
            run.progress
                .as_ref()
                .map(|p| serde_json::to_string(p).expect("progress serialises")),
        )
        .bind(opt_ms(run.heartbeat_at))
        .bind(serde_json::to_string(&run.instances).expect("receipts serialise"))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some((true, run)))
    }

    async fn live_zones(&self, since: DateTime<Utc>) -> Result<LiveZones, StoreError> {
        Self::live_zones_in(&self.readers, since).await
    }

    async fn observed_patterns(&self, since: DateTime<Utc>) -> Result<Vec<String>, StoreError> {
        let patterns =
            sqlx::query_scalar("SELECT DISTINCT pattern FROM observers WHERE last_seen >= ?")
                .bind(ms(since))
                .fetch_all(&self.readers)
                .await?;
        Ok(patterns)
    }

    async fn observer_names(&self) -> Result<Vec<String>, StoreError> {
        let names = sqlx::query_scalar("SELECT DISTINCT name FROM observers ORDER BY name")
            .fetch_all(&self.readers)
            .await?;
        Ok(names)
    }

    async fn note_on_run(&self, run_id: Uuid, record: &AttemptRecord) -> Result<bool, StoreError> {
        let mut tx = self.writer.begin_with("BEGIN IMMEDIATE").await?;
        let noted = sqlx::query(
            "UPDATE runs SET history = json_insert(history, '$[#]', json(?2)) WHERE id = ?1 AND json_array_length(history) < ?3",
        )
        .bind(run_id.to_string())
        .bind(record_text(Some(record)))
        .bind(super::MAX_NOTES as i64)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        tx.commit().await?;
        Ok(noted)
    }

    async fn prune_runs(&self, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError> {
        self.delete_batch(
            concat!(
                "DELETE FROM runs WHERE id IN (SELECT id FROM runs WHERE ",
                finished_runs!(),
                " AND finished_at < ?1 ORDER BY finished_at LIMIT ?2)"
            ),
            cutoff,
            limit,
        )
        .await
    }

    async fn prune_consumers(&self, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError> {
        self.delete_batch(
            "DELETE FROM consumers WHERE instance IN (SELECT instance FROM consumers
                 WHERE last_seen < ?1 ORDER BY last_seen LIMIT ?2)",
            cutoff,
            limit,
        )
        .await
    }

    async fn prune_observers(&self, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError> {
        self.delete_batch(
            "DELETE FROM observers WHERE rowid IN (SELECT rowid FROM observers
                 WHERE last_seen < ?1 ORDER BY last_seen LIMIT ?2)",
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
            " FROM runs WHERE job_id = ? AND fire_time = ? ORDER BY shard, zone"
        ))
        .bind(job_id.to_string())
        .bind(ms(fire_time))
        .fetch_all(&self.readers)
        .await?;
        rows.iter().map(run_from_row).collect()
    }
}

impl SqliteStore {
    /// The query plan of the reconciler's overdue-runs query, one line per step, as
    /// `EXPLAIN QUERY PLAN` prints it (for tests that its cost follows the overdue runs).
    pub async fn explain_overdue(&self, shards: Option<&[u32]>) -> Result<Vec<String>, StoreError> {
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
        .fetch_all(&self.readers)
        .await?;
        rows.iter()
            .map(|row| Ok(row.try_get::<String, _>("detail")?))
            .collect()
    }
}
