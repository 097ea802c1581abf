//! Durable state: jobs and runs, behind the [`Store`] trait with two implementations —
//! SQLite (embedded default, one node) and PostgreSQL. Each backend keeps its own SQL in
//! its own module; both pass the same test suite (`scheduler/tests/store_suite.rs`).
//!
//! The store is the source of truth. The timer only holds hints; [`Store::fire`] re-reads
//! and locks the jobs it is asked to fire and decides from the stored rows.

/// The job columns both backends read and write, in one order.
macro_rules! job_columns {
    () => {
        "id, app, name, settings, paused, version, next_fire_at, created_at, updated_at"
    };
}

/// The run columns both backends read and write, in one order.
macro_rules! run_columns {
    () => {
        "id, job_id, fire_time, shard, shard_total, attempt, state, trigger, payload, created_at, \
         dispatched_at, acked_at, finished_at, consumer, output, error, fired_by"
    };
}

pub mod postgres;
mod sqlite;
pub mod testing;

use std::{collections::HashSet, sync::Arc};

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use chime_consumer::protocol::{AckMessage, ResultMessage, TaskMessage};

use crate::cluster::DEFAULT_SHARD_COUNT;
use crate::domain::{Job, MisfirePolicy, OverlapPolicy, Run};

pub use postgres::PostgresStore;
pub use sqlite::{SingleNodeLock, SqliteStore};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another job already has this app and name.
    #[error("a job named {name:?} already exists in app {app:?}")]
    DuplicateName {
        /// The app.
        app: String,
        /// The name.
        name: String,
    },
    /// No job with this id.
    #[error("job {0} not found")]
    JobNotFound(Uuid),
    /// The job changed since the caller read it.
    #[error("job {id} is at version {current}, not {expected}")]
    VersionConflict {
        /// The job.
        id: Uuid,
        /// The version the caller expected.
        expected: i64,
        /// The stored version.
        current: i64,
    },
    /// The database URL names no supported backend.
    #[error("unsupported database url {0:?}: use sqlite://FILE or postgres://...")]
    UnsupportedUrl(String),
    /// The database failed or is unreachable.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Applying the embedded migrations failed.
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The store cannot be used by this node (SQLite is single-node).
    #[error("{0}")]
    SingleNode(String),
    /// A stored row could not be read back.
    #[error("corrupt {what}: {reason}")]
    Corrupt {
        /// Which row.
        what: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl StoreError {
    /// Whether the same operation may succeed later — the database was unreachable, busy
    /// or restarting — as opposed to the data being unacceptable to it.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Database(sqlx::Error::Database(db)) => {
                // Constraint violations and (PostgreSQL class 22) data exceptions repeat.
                let data_error = db.code().is_some_and(|code| code.starts_with("22"));
                db.kind() == sqlx::error::ErrorKind::Other && !data_error
            }
            StoreError::Database(_) => true,
            _ => false,
        }
    }
}

/// A page of the job list: jobs ordered by id (creation order).
#[derive(Debug, Clone, Default)]
pub struct JobPage {
    /// Only jobs of this app.
    pub app: Option<String>,
    /// Only jobs after this id (the previous page's last).
    pub after: Option<Uuid>,
    /// At most this many.
    pub limit: u32,
}

/// A page of a job's runs: newest fire time first.
#[derive(Debug, Clone, Default)]
pub struct RunPage {
    /// Only runs strictly before this (fire time, id) position.
    pub before: Option<(DateTime<Utc>, Uuid)>,
    /// At most this many.
    pub limit: u32,
}

/// A shard and the fencing token its lease was granted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardToken {
    /// The shard.
    pub shard: u32,
    /// The lease's fencing token.
    pub token: i64,
}

impl ShardToken {
    /// A shard with its token.
    pub fn new(shard: u32, token: i64) -> Self {
        Self { shard, token }
    }
}

/// Who is firing, and under which leases.
#[derive(Debug, Clone)]
pub struct Firing {
    /// The node recording the runs (stored on each run as `fired_by`).
    pub node: String,
    /// The shard leases the fire depends on: the transaction commits fires only for jobs
    /// whose shard this node still holds with exactly this token, unexpired by the
    /// database's clock. `None` on a single-node store, where the file lock is the fence.
    pub fence: Option<Vec<ShardToken>>,
}

/// What [`Store::fire`] did.
#[derive(Debug, Default)]
pub struct FireBatch {
    /// Runs newly recorded, ready to publish.
    pub recorded: Vec<TaskMessage>,
    /// For each job examined, the next fire time the timer should hold (None: none —
    /// paused, deleted, or finished).
    pub next_fire: Vec<(Uuid, Option<DateTime<Utc>>)>,
    /// The policy of each job that had misfired.
    pub misfired: Vec<MisfirePolicy>,
    /// Jobs not fired because their shard's lease could not be proven; nothing was
    /// written for them.
    pub fenced: Vec<Uuid>,
    /// Jobs whose fire was skipped because their previous run has not finished (overlap
    /// policy `forbid`); their schedule advanced.
    pub skipped_overlap: Vec<Uuid>,
}

/// What a reply did to its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyEffect {
    /// The run changed state.
    Applied,
    /// The run exists but has moved past what the reply reports (a late duplicate).
    Stale,
    /// No such run (its job was deleted, or the reply is bogus).
    UnknownRun,
}

/// Jobs and runs, durably. Every method is safe to call concurrently.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Which backend this is (`sqlite` or `postgres`), for logs and metrics.
    fn backend(&self) -> &'static str;

    /// Checks the database answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Inserts a new job.
    async fn insert_job(&self, job: &Job) -> Result<(), StoreError>;

    /// A job by id.
    async fn get_job(&self, id: Uuid) -> Result<Option<Job>, StoreError>;

    /// A page of jobs.
    async fn list_jobs(&self, page: &JobPage) -> Result<Vec<Job>, StoreError>;

    /// Replaces a job's definition, pause state and version with `job`'s, if the stored
    /// version is still `expected_version`; its next fire time too when `set_next_fire`
    /// (see [`crate::domain::job::reschedules`]). Returns the job as stored.
    async fn update_job(
        &self,
        job: &Job,
        expected_version: i64,
        set_next_fire: bool,
    ) -> Result<Job, StoreError>;

    /// Deletes a job and its runs; false if it did not exist.
    async fn delete_job(&self, id: Uuid) -> Result<bool, StoreError>;

    /// Active jobs with a next fire time in `(after, before)` in (time, id) order — the
    /// timer's look-ahead query; `after` is a cursor that starts at (earliest, nil).
    /// `shards` limits it to jobs of those shards (`None`: every shard).
    async fn due_jobs(
        &self,
        after: (DateTime<Utc>, Uuid),
        before: DateTime<Utc>,
        limit: u32,
        shards: Option<&[u32]>,
    ) -> Result<Vec<(Uuid, DateTime<Utc>)>, StoreError>;

    /// In one transaction: checks `firing`'s fence, locks the given jobs, records the
    /// runs due at `now` (see [`Job::fires_due`]; a run id already recorded is skipped;
    /// a job with overlap policy `forbid` and an unfinished run fires nothing), and
    /// advances each job's next fire time. Jobs outside the fence are left untouched.
    async fn fire(
        &self,
        job_ids: &[Uuid],
        now: DateTime<Utc>,
        grace: Duration,
        firing: &Firing,
    ) -> Result<FireBatch, StoreError>;

    /// Records one run (a manual trigger); false if a run with its id exists.
    async fn insert_run(&self, run: &Run) -> Result<bool, StoreError>;

    /// Marks runs `dispatched` at `at` (only runs still `scheduled`).
    async fn mark_dispatched(&self, run_ids: &[Uuid], at: DateTime<Utc>) -> Result<(), StoreError>;

    /// Notes why a run's task is not published yet (unroutable, nacked); it stays
    /// `scheduled` and is published again.
    async fn note_publish_failure(&self, run_id: Uuid, reason: &str) -> Result<(), StoreError>;

    /// Applies a consumer's ack.
    async fn record_ack(&self, ack: &AckMessage) -> Result<ReplyEffect, StoreError>;

    /// Applies a consumer's result.
    async fn record_result(&self, result: &ResultMessage) -> Result<ReplyEffect, StoreError>;

    /// A run by id.
    async fn get_run(&self, id: Uuid) -> Result<Option<Run>, StoreError>;

    /// A page of a job's runs.
    async fn list_runs(&self, job_id: Uuid, page: &RunPage) -> Result<Vec<Run>, StoreError>;

    /// Which of `run_ids` are still `scheduled` (not confirmed, and their job not deleted):
    /// checked before publishing a task that waited in memory.
    async fn scheduled_runs(&self, run_ids: &[Uuid]) -> Result<HashSet<Uuid>, StoreError>;

    /// Runs still `scheduled` that were recorded before `before`, oldest first: their
    /// publish failed or the node stopped between commit and confirm. `shards` limits it
    /// to runs of jobs in those shards (`None`: every shard).
    async fn unconfirmed_runs(
        &self,
        before: DateTime<Utc>,
        limit: u32,
        shards: Option<&[u32]>,
    ) -> Result<Vec<TaskMessage>, StoreError>;
}

/// Opens the store at `url` (`sqlite://FILE` or `postgres://...`) and applies migrations;
/// a new PostgreSQL cluster gets the default shard count.
pub async fn open(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match open_backend(url, DEFAULT_SHARD_COUNT).await? {
        Backend::Sqlite(store) => Arc::new(store),
        Backend::Postgres(store) => Arc::new(store),
    })
}

/// A store with its concrete backend, for what only one backend does: PostgreSQL
/// coordinates a cluster, SQLite is locked to one node.
#[derive(Debug, Clone)]
pub enum Backend {
    /// The embedded single-node store.
    Sqlite(SqliteStore),
    /// The clustered store.
    Postgres(PostgresStore),
}

impl Backend {
    /// The store behind the common trait.
    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            Backend::Sqlite(store) => Arc::new(store.clone()),
            Backend::Postgres(store) => Arc::new(store.clone()),
        }
    }
}

/// Opens the backend at `url`; a new PostgreSQL cluster is created with `shard_count`
/// shards (an existing one keeps its own).
pub async fn open_backend(url: &str, shard_count: u32) -> Result<Backend, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(Backend::Sqlite(SqliteStore::open(url).await?))
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        Ok(Backend::Postgres(
            PostgresStore::open(url, shard_count).await?,
        ))
    } else {
        Err(StoreError::UnsupportedUrl(url.to_string()))
    }
}

/// A fire transaction's plan: runs to insert and next fire times to write.
pub(crate) struct FirePlanBatch {
    /// Runs to insert, with their tasks.
    pub runs: Vec<(Run, TaskMessage)>,
    /// Jobs whose next fire time moves, and where to.
    pub advance: Vec<(Uuid, Option<DateTime<Utc>>)>,
    /// The timer's view, returned to the caller once the transaction commits.
    pub batch: FireBatch,
}

/// Runs the locked job rows through [`Job::fires_due`]; shared by both backends' fire
/// transactions. `requested` ids with no row (deleted jobs) leave the timer. Jobs in
/// `busy` have an unfinished run: if their overlap policy is `forbid`, their due fires
/// are skipped (the schedule still advances). Runs are stamped with `node`.
pub(crate) fn plan_batch(
    requested: &[Uuid],
    jobs: &[Job],
    busy: &HashSet<Uuid>,
    now: DateTime<Utc>,
    grace: Duration,
    node: &str,
) -> FirePlanBatch {
    let mut plan = FirePlanBatch {
        runs: Vec::new(),
        advance: Vec::new(),
        batch: FireBatch::default(),
    };
    for job in jobs {
        let mut fires = job.fires_due(now, grace);
        if !fires.runs.is_empty()
            && job.spec.settings.overlap == OverlapPolicy::Forbid
            && busy.contains(&job.id)
        {
            fires.runs.clear();
            plan.batch.skipped_overlap.push(job.id);
        }
        if fires.misfired {
            plan.batch.misfired.push(job.spec.settings.misfire);
        }
        if fires.next_fire_at != job.next_fire_at {
            plan.advance.push((job.id, fires.next_fire_at));
        }
        plan.batch
            .next_fire
            .push((job.id, fires.next_fire_at.filter(|_| !job.spec.paused)));
        plan.runs.extend(fires.runs.into_iter().map(|mut run| {
            run.fired_by = Some(node.to_string());
            let task = job.task_message(&run);
            (run, task)
        }));
    }
    for id in requested {
        if !jobs.iter().any(|job| job.id == *id) {
            plan.batch.next_fire.push((*id, None));
        }
    }
    plan
}

/// Decodes job rows one by one: an unreadable row is logged and left out (the fire
/// transaction then reports it as gone, and the timer drops it) instead of failing the
/// whole batch.
pub(crate) fn decode_jobs<R>(
    rows: &[R],
    decode: impl Fn(&R) -> Result<Job, StoreError>,
) -> Vec<Job> {
    rows.iter()
        .filter_map(|row| match decode(row) {
            Ok(job) => Some(job),
            Err(error) => {
                tracing::error!(%error, "skipping an unreadable job row");
                metrics::counter!(crate::telemetry::STORE_ERRORS, "operation" => "decode_job")
                    .increment(1);
                None
            }
        })
        .collect()
}

fn corrupt(what: impl Into<String>, reason: impl ToString) -> StoreError {
    StoreError::Corrupt {
        what: what.into(),
        reason: reason.to_string(),
    }
}

/// The error of a failed write of `job`: the unique (app, name) key means a duplicate name.
fn job_write_error(error: sqlx::Error, job: &Job) -> StoreError {
    match &error {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::DuplicateName {
            app: job.spec.app.clone(),
            name: job.spec.name.clone(),
        },
        _ => error.into(),
    }
}
