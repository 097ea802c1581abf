//! Durable state: jobs and runs, behind the [`Store`] trait with two implementations —
//! SQLite (embedded default, one node) and PostgreSQL. Each backend keeps its own SQL in
//! its own module, split into the same files by concern (`rows`, `jobs`, `fire`, `runs`,
//! `replies`, `reconcile`, `presence`, `retention`); both pass the same test suite
//! (`scheduler/tests/store_suite/`).
//!
//! This file holds the trait and [`StoreError`]. Beside it: the types the trait speaks
//! (`types.rs`), the SQL fragments both backends share (`sql.rs`), the routing of the
//! trait's methods to each backend's files (`delegate.rs`), row decoding
//! (`decode.rs`), opening a store from a URL (`open.rs`), and the decisions both backends
//! share, free of I/O: the fire batch (`fire_plan.rs`), a job update (`update_plan.rs`) and
//! a batch of replies (`reply_plan.rs`).
//!
//! The store is the source of truth. The timer only holds hints; [`Store::fire`] re-reads
//! and locks the jobs it is asked to fire and decides from the stored rows.

#[macro_use]
mod sql;
#[macro_use]
mod delegate;

mod broadcast_receipt;
mod decode;
mod fire_plan;
mod open;
pub mod postgres;
mod reply_batch;
pub(crate) mod reply_plan;
mod sqlite;
pub mod test_support;
mod types;
mod update_plan;

use std::collections::HashSet;

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use chime_consumer::protocol::{AttemptRecord, Reply};

pub use crate::domain::shard::ShardToken;
use crate::domain::{Job, LiveZones, Run};

pub(crate) use decode::{corrupt, decode_jobs, decode_runs, job_write_error, with_jobs};
pub(crate) use fire_plan::plan_batch;
pub use fire_plan::{live_since, needs_live_zones};
pub use open::{Backend, open, open_backend};
pub use postgres::PostgresStore;
pub use sqlite::{SingleNodeLock, SqliteStore};
pub use types::{
    ConsumerInstance, DueCursor, DuePage, Expect, FireBatch, Firing, Jitter, MAX_NOTES, Misfire,
    NextAttempt, OverdueRun, RecordedReplies, Replay, ReplyApplied, ReplyEffect, RunChange,
    RunPage, StoredToken,
};

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

/// A batch of replies that failed part way: the rounds before the failing one are
/// committed, and the replies they applied must not be applied again.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct RepliesFailed {
    /// The replies applied, by batch index, with what each did.
    pub applied: Vec<(usize, ReplyApplied)>,
    /// The transactions committed before the failure.
    pub transactions: u32,
    /// Why the failing round was not applied (none of its replies were).
    #[source]
    pub error: StoreError,
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

    /// A page of the job list: the jobs matching `filter`, in its order, after its
    /// position (see [`crate::domain::JobFilter`]).
    async fn search_jobs(&self, filter: &crate::domain::JobFilter) -> Result<Vec<Job>, StoreError>;

    /// Replaces a job's definition, pause state and version with `job`'s, if the stored
    /// version is still `expected_version`; its next fire time too when `set_next_fire`
    /// (see [`crate::domain::job::reschedules`]). Fires armed ahead of time and not yet
    /// due (first attempts of scheduled fires after `job.updated_at`, still `scheduled`)
    /// are withdrawn: deleted, and unless the next fire time is set anew it moves back to
    /// the earliest of them, so they are armed again from the new definition (or not at
    /// all, if the job is now paused). Returns the job as stored.
    async fn update_job(
        &self,
        job: &Job,
        expected_version: i64,
        set_next_fire: bool,
    ) -> Result<Job, StoreError>;

    /// The running jobs of `shards` (`None`: every shard) that pause on failure and
    /// whose last `pause_after_failures` finished runs recorded since their last change
    /// all ended `dead` (see [`crate::domain::failure_pause`]): the jobs to pause.
    async fn failing_jobs(&self, shards: Option<&[u32]>) -> Result<Vec<Job>, StoreError>;

    /// Deletes a job and its runs; false if it did not exist.
    async fn delete_job(&self, id: Uuid) -> Result<bool, StoreError>;

    /// Every consumer group some job targets.
    async fn target_groups(&self) -> Result<Vec<String>, StoreError>;

    /// Active jobs with a next fire time before `before`, at most `limit` of them from
    /// `after` on — the timer's look-ahead query, paged through [`DuePage::next`].
    /// `shards` limits it to jobs of those shards (`None`: every shard).
    async fn due_jobs(
        &self,
        after: DueCursor,
        before: DateTime<Utc>,
        limit: u32,
        shards: Option<&[u32]>,
    ) -> Result<DuePage, StoreError>;

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

    /// In one transaction: records backfilled `runs` of job `job_id` (a run id already
    /// recorded is left as it is) and returns the ids of those that were new; `None`,
    /// recording nothing, when `require_idle` and the job has an unfinished run. Fails
    /// with [`StoreError::JobNotFound`] when the job is gone.
    async fn insert_backfill(
        &self,
        job_id: Uuid,
        runs: &[Run],
        require_idle: bool,
    ) -> Result<Option<HashSet<Uuid>>, StoreError>;

    /// Marks runs `dispatched` at `at` (only runs still `scheduled`); each must be acked
    /// within its ack timeout.
    async fn mark_dispatched(&self, run_ids: &[Uuid], at: DateTime<Utc>) -> Result<(), StoreError>;

    /// Notes why a run's task is not published yet (unroutable, nacked); it stays
    /// `scheduled` and is published again.
    async fn note_publish_failure(&self, run_id: Uuid, reason: &str) -> Result<(), StoreError>;

    /// Which of `run_ids` are still `scheduled` (not confirmed, and their job not deleted):
    /// checked before publishing a task that waited in memory.
    async fn scheduled_runs(&self, run_ids: &[Uuid]) -> Result<HashSet<Uuid>, StoreError>;

    /// A run by id.
    async fn get_run(&self, id: Uuid) -> Result<Option<Run>, StoreError>;

    /// A page of a job's runs.
    async fn list_runs(&self, job_id: Uuid, page: &RunPage) -> Result<Vec<Run>, StoreError>;

    /// A page of runs across jobs matching `filter`, newest fire time first (run id
    /// breaking ties): see [`RunFilter`](crate::domain::RunFilter). Each main filter reads
    /// through its own index (migrations `*_run_search.sql`).
    async fn search_runs(&self, filter: &crate::domain::RunFilter) -> Result<Vec<Run>, StoreError>;

    /// The runs whose fire time is in `[from, until]` (of `apps` only, when given; an
    /// empty list matches nothing), counted by minute of fire time, state, retry and
    /// lateness bucket (see [`crate::domain::run_stats`]), in no particular order.
    async fn run_stats(
        &self,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
        apps: Option<&[String]>,
    ) -> Result<Vec<crate::domain::run_stats::RunCount>, StoreError>;

    /// Every item (run) of job `job_id`'s fire at `fire_time`, by shard.
    async fn fire_items(
        &self,
        job_id: Uuid,
        fire_time: DateTime<Utc>,
    ) -> Result<Vec<Run>, StoreError>;

    /// Applies consumers' replies in order: acks, heartbeats and results to their runs
    /// (to a broadcast run as its instance's receipt, decided by
    /// [`crate::domain::broadcast`]), presence messages and observer registrations.
    /// Returns what each reply did and how many transactions that took. The batch is
    /// applied in rounds, one transaction each (see `store/reply_plan.rs`): on
    /// PostgreSQL, a transaction that updates one run twice takes a key-share lock on its
    /// job again, in task order, which would deadlock with a fire locking the same jobs
    /// in job order; within a round each run is written once. A failing round stops the
    /// batch: [`RepliesFailed`] says what the rounds before it applied (they stay
    /// committed) and none of the rest is applied. `now` stamps what the replies change
    /// (deadlines, retry times); `jitter` draws each retry's jitter.
    async fn record_replies(
        &self,
        batch: &[&Reply],
        now: DateTime<Utc>,
        jitter: &Jitter<'_>,
    ) -> Result<RecordedReplies, RepliesFailed>;

    /// Locks run `run_id`, applies `change` to it (with its job's settings) and writes it
    /// back if `change` returns true. Returns whether it changed and the run as it now
    /// is; `None` if the run or its job does not exist. Used to settle broadcast runs,
    /// whose transitions depend on every instance's receipt ([`crate::domain::broadcast`]).
    async fn update_run(
        &self,
        run_id: Uuid,
        change: &RunChange<'_>,
    ) -> Result<Option<(bool, Run)>, StoreError>;

    /// Appends `record` to run `run_id`'s history and changes nothing else: a note, such
    /// as a reply about the run that the collector refused. A run's history takes at most
    /// [`MAX_NOTES`] entries this way, so a misbehaving sender cannot grow it without end.
    /// False if there is no such run or its history is that long already.
    async fn note_on_run(&self, run_id: Uuid, record: &AttemptRecord) -> Result<bool, StoreError>;

    /// Runs past their `due_at` at `now`, most overdue first, with their jobs — except
    /// `scheduled` runs, which are overdue once their `due_at` is before
    /// `unconfirmed_before` (before `now` for a periodic pass; after it when a takeover
    /// collects the fires the previous owner armed ahead of time). Reads only through
    /// the `due_at` index, so the cost follows the number of overdue runs. `shards`
    /// limits it to jobs in those shards; `after` is the (`due_at`, id) of the previous
    /// page's last run.
    async fn overdue_runs(
        &self,
        now: DateTime<Utc>,
        unconfirmed_before: DateTime<Utc>,
        after: Option<(DateTime<Utc>, Uuid)>,
        limit: u32,
        shards: Option<&[u32]>,
    ) -> Result<Vec<OverdueRun>, StoreError>;

    /// Moves each run found as its `expect` to `scheduled` as attempt + 1, due now,
    /// noting its `record` in its history, in one statement. Returns the runs moved; the
    /// others changed meanwhile.
    async fn next_attempts(
        &self,
        runs: &[NextAttempt<'_>],
        now: DateTime<Utc>,
    ) -> Result<HashSet<Uuid>, StoreError>;

    /// Gives up a run found as `expect`: `dead` with `reason`, noting `record`. Unless
    /// `dead_lettered` (the broker already put it in a dead-letter queue), the dead
    /// letter is pending until [`Store::mark_dead_lettered`]. False if the run changed.
    async fn kill_run(
        &self,
        run_id: Uuid,
        expect: Expect,
        reason: &str,
        record: Option<&AttemptRecord>,
        dead_lettered: bool,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// Notes that a dead run's dead letter was confirmed by the broker.
    async fn mark_dead_lettered(&self, run_id: Uuid) -> Result<(), StoreError>;

    /// For each `(run, attempt)` still `dispatched` at that attempt: moves its ack
    /// deadline to `now` + its `ack_timeout` without using an attempt and notes that it
    /// waits for a consumer ([`crate::domain::WaitingFor::Consumer`]): its work queue
    /// had none, so its task is still queued. Returns the runs it moved.
    async fn await_consumer(
        &self,
        runs: &[(Uuid, u32)],
        now: DateTime<Utc>,
    ) -> Result<HashSet<Uuid>, StoreError>;

    /// Releases the held `buffer_one` fires ([`crate::domain::WaitingFor::Previous`])
    /// whose job has no other unfinished run: they stay `scheduled` with `due_at` set to
    /// `due_at` and no longer wait, so the reconciler publishes them as overdue. A run
    /// released already is left as it is. Returns how many it released.
    async fn release_held(&self, due_at: DateTime<Utc>) -> Result<u64, StoreError>;

    /// The zones whose consumers sent a presence message since `since`, by group.
    async fn live_zones(&self, since: DateTime<Utc>) -> Result<LiveZones, StoreError>;

    /// The consumer instances last heard from at or after `since`, by group and instance,
    /// each with the runs it is running ([`ConsumerInstance::running`], counted through
    /// the `runs_running` and `runs_in_flight` indexes). `group` narrows it to one group.
    async fn consumers(
        &self,
        since: DateTime<Utc>,
        group: Option<&str>,
    ) -> Result<Vec<ConsumerInstance>, StoreError>;

    /// Runs published and not acked yet (`dispatched`), by their job's target group: the
    /// work queued for each group's consumers. Groups with none are left out.
    async fn queued_by_group(&self) -> Result<Vec<(String, u64)>, StoreError>;

    /// Every distinct pattern some observer registered since `since`.
    async fn observed_patterns(&self, since: DateTime<Utc>) -> Result<Vec<String>, StoreError>;

    /// Every observer with a registration on record (whatever its age), by name, each
    /// once: the observers whose queues and dead-letter queues Chime knows of.
    async fn observer_names(&self) -> Result<Vec<String>, StoreError>;

    /// Deletes at most `limit` finished runs — `succeeded`, or `dead` with the dead letter
    /// no longer pending — that finished before `cutoff`, oldest first, in one short
    /// transaction that reads through the `runs_finished` index. Returns how many; fewer
    /// than `limit` means none is left (on PostgreSQL: none that another node is not
    /// deleting at the same moment). Unfinished runs and dead runs whose dead letter is
    /// pending are never deleted.
    async fn prune_runs(&self, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError>;

    /// Deletes at most `limit` consumer instances last heard from before `cutoff`, oldest
    /// first, in one short transaction. Returns how many.
    async fn prune_consumers(&self, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError>;

    /// Deletes at most `limit` observer patterns last registered before `cutoff`, oldest
    /// first, in one short transaction. Returns how many.
    async fn prune_observers(&self, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError>;

    /// Stores new jobs, all or none, in one transaction, each announced to the timers as
    /// [`Store::insert_job`] announces one. Returns the indices in `jobs` of those whose
    /// app and name are taken (by a stored job or an earlier job of `jobs`); when any
    /// are, nothing is stored.
    async fn insert_jobs(&self, jobs: &[Job]) -> Result<Vec<usize>, StoreError>;

    /// Appends entries to the audit trail, in one transaction.
    async fn insert_audit(
        &self,
        entries: &[crate::domain::audit::AuditEntry],
    ) -> Result<(), StoreError>;

    /// Audit entries matching `query`, newest first.
    async fn list_audit(
        &self,
        query: &crate::domain::audit::AuditQuery,
    ) -> Result<Vec<crate::domain::audit::AuditEntry>, StoreError>;

    /// Deletes up to `limit` audit entries older than `cutoff`; returns how many.
    async fn prune_audit(&self, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError>;

    /// How many jobs app `app` has.
    async fn count_app_jobs(&self, app: &str) -> Result<u64, StoreError>;

    /// Whether a job of app `app` targets group `group`.
    async fn app_uses_group(&self, app: &str, group: &str) -> Result<bool, StoreError>;

    /// The distinct groups app `app`'s jobs target.
    async fn app_groups(&self, app: &str) -> Result<Vec<String>, StoreError>;

    /// Stores a new API token (its secret's hash only). False when its name is taken
    /// (revoked tokens keep their names).
    async fn insert_token(&self, token: &StoredToken) -> Result<bool, StoreError>;

    /// Every API token, revoked ones included, by name.
    async fn list_tokens(&self) -> Result<Vec<StoredToken>, StoreError>;

    /// Revokes token `name` at `at` (a revoked token keeps its first revocation time).
    /// None when no token has that name.
    async fn revoke_token(
        &self,
        name: &str,
        at: DateTime<Utc>,
    ) -> Result<Option<crate::domain::access::ApiToken>, StoreError>;
}
