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
         dispatched_at, acked_at, finished_at, consumer, output, error, fired_by, ack_timeout_ms, \
         run_timeout_ms, due_at, history, progress, heartbeat_at, mode, zone, instances, overlap, \
         waiting_for"
    };
}

/// The runs retention may delete (given a `finished_at` bound): `succeeded`, or `dead`
/// with no dead letter pending. The same predicate as the `runs_finished` partial index
/// (migration 0005), verbatim, so both backends read through it.
macro_rules! finished_runs {
    () => {
        "state IN ('succeeded', 'dead') AND due_at IS NULL"
    };
}

/// Runs not finished yet: recorded, in flight, or waiting for a retry.
macro_rules! unfinished_runs {
    () => {
        "state IN ('scheduled', 'dispatched', 'acked', 'failed')"
    };
}

/// The runs a fire of an overlap-`forbid` job waits for: unfinished runs recorded under
/// `forbid`. The same predicate as the `runs_unfinished` partial index (PostgreSQL
/// migration 0009, SQLite 0008), verbatim, so both backends read through it.
macro_rules! forbidding_runs {
    () => {
        concat!("overlap = 'forbid' AND ", unfinished_runs!())
    };
}

pub mod postgres;
pub(crate) mod reply_plan;
mod sqlite;

use std::{collections::HashSet, sync::Arc};

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use chime_consumer::protocol::{
    AckMessage, AttemptRecord, HeartbeatMessage, ObserveMessage, PresenceMessage, Reply,
    ResultMessage, TaskMessage,
};

use crate::cluster::DEFAULT_SHARD_COUNT;
use crate::domain::{
    Job, JobSettings, LiveZones, MisfirePolicy, OverlapPolicy, Run, RunState, broadcast,
    retry::{ResultVerdict, after_result},
};

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

/// Where a page of the timer's look-ahead query resumes: an opaque position in the
/// store's index order, which need not be next-fire order (see the PostgreSQL store's
/// `due_bound`). [`DueCursor::START`] reads from the beginning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DueCursor(pub DateTime<Utc>, pub Uuid);

impl DueCursor {
    pub const START: Self = Self(DateTime::<Utc>::UNIX_EPOCH, Uuid::nil());
}

/// One page of [`Store::due_jobs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuePage {
    /// Jobs and their next fire times, in no promised order.
    pub jobs: Vec<(Uuid, DateTime<Utc>)>,
    /// Where the next page starts; `None` when this page was the last.
    pub next: Option<DueCursor>,
}

impl DuePage {
    /// A page of at most `limit` rows, each with its cursor position: full pages go on
    /// after their last row.
    fn of(rows: Vec<(Uuid, DateTime<Utc>, DueCursor)>, limit: u32) -> Self {
        let next = rows
            .last()
            .filter(|_| rows.len() >= limit as usize)
            .map(|(_, _, cursor)| *cursor);
        Self {
            jobs: rows.into_iter().map(|(id, at, _)| (id, at)).collect(),
            next,
        }
    }
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
    /// How far ahead on-time fires are armed: recorded now, published at their fire time
    /// (see [`crate::domain::misfire`]). Zero records only what is due.
    pub ahead: Duration,
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
    /// Zone jobs whose fire had no zone to run in (no zone list of their own, and no
    /// zone with live consumers); their schedule advanced.
    pub skipped_no_zone: Vec<Uuid>,
    /// Jobs that may not be armed (overlap `forbid`: whether the previous run finished
    /// is only known at the fire time). The timer holds them until their due time.
    pub unarmed: Vec<Uuid>,
}

/// What a reply did: its effect on its run and, when a result decided the run
/// (`succeeded`, `failed` for a retry, or `dead`), the run's new state.
pub type ReplyApplied = (ReplyEffect, Option<RunState>);

/// What a reply did to its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyEffect {
    /// The run changed state.
    Applied,
    /// The run exists but has moved past what the reply reports (a late duplicate).
    Stale,
    /// No such run (its job was deleted, or the reply is bogus).
    UnknownRun,
    /// Nothing was applied because the run is a broadcast run: its replies are per
    /// instance, applied with [`Store::record_broadcast_reply`].
    Broadcast,
}

impl ReplyEffect {
    /// The effect of a reply not applied to a run of `mode` (`None`: no such run).
    pub(crate) fn not_applied(mode: Option<&str>) -> Self {
        match mode {
            None => ReplyEffect::UnknownRun,
            Some("broadcast") => ReplyEffect::Broadcast,
            Some(_) => ReplyEffect::Stale,
        }
    }
}

/// A change to one run, decided from the run and its job's settings inside the store's
/// transaction; returns whether it changed anything (see [`Store::update_run`]).
pub type RunChange<'a> = dyn Fn(&mut Run, &JobSettings) -> bool + Send + Sync + 'a;

/// How far back a presence message counts: consumers seen since then are live.
pub fn live_since(now: DateTime<Utc>) -> DateTime<Utc> {
    now - Duration::milliseconds(chime_consumer::protocol::PRESENCE_TTL_MS as i64)
}

/// Whether firing `job` needs the live zones (a zone job without its own list).
pub fn needs_live_zones(job: &Job) -> bool {
    let target = &job.spec.settings.target;
    target.mode == crate::domain::DeliveryMode::Zone && target.zones.is_none()
}

/// A run past its `due_at`, with its job, for the reconciler.
#[derive(Debug, Clone)]
pub struct OverdueRun {
    /// The run as stored.
    pub run: Run,
    /// Its job.
    pub job: Job,
}

/// The state and attempt a conditional run update expects to find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    /// The run's state (`None`: any state but `succeeded` and `dead`).
    pub state: Option<RunState>,
    /// The run's attempt (`None`: any).
    pub attempt: Option<u32>,
}

impl Expect {
    /// Exactly this state and attempt.
    pub fn exactly(state: RunState, attempt: u32) -> Self {
        Self {
            state: Some(state),
            attempt: Some(attempt),
        }
    }

    /// Any unfinished state, any attempt.
    pub fn unfinished() -> Self {
        Self {
            state: None,
            attempt: None,
        }
    }
}

/// A run to move to its next attempt (see [`Store::next_attempts`]).
#[derive(Debug, Clone, Copy)]
pub struct NextAttempt<'a> {
    /// The run.
    pub run_id: Uuid,
    /// How it must still be for the move to happen.
    pub expect: Expect,
    /// What to note in its history, if anything.
    pub record: Option<&'a AttemptRecord>,
}

/// What asking to replay a dead-lettered run found.
#[derive(Debug, Clone)]
pub enum Replay {
    /// The run was `dead`; it is now `scheduled` as the next attempt, to be published.
    Revived(Box<OverdueRun>),
    /// The run is finished or under way already; nothing was changed.
    NotDead(RunState),
    /// No such run (its job was deleted).
    Unknown,
}

/// Longest history [`Store::note_on_run`] appends to.
pub const MAX_NOTES: usize = 100;

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

    /// Deletes a job and its runs; false if it did not exist.
    async fn delete_job(&self, id: Uuid) -> Result<bool, StoreError>;

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

    /// Marks runs `dispatched` at `at` (only runs still `scheduled`); each must be acked
    /// within its ack timeout.
    async fn mark_dispatched(&self, run_ids: &[Uuid], at: DateTime<Utc>) -> Result<(), StoreError>;

    /// Notes why a run's task is not published yet (unroutable, nacked); it stays
    /// `scheduled` and is published again.
    async fn note_publish_failure(&self, run_id: Uuid, reason: &str) -> Result<(), StoreError>;

    /// Applies consumers' replies in order, in one transaction: acks, heartbeats and
    /// results to their runs, presence messages and observer registrations. Returns what
    /// each reply did; a failure applies none of them. Replies to broadcast runs come
    /// back as [`ReplyEffect::Broadcast`], for [`Store::record_broadcast_reply`].
    async fn record_replies(&self, batch: &[&Reply]) -> Result<Vec<ReplyApplied>, StoreError>;

    /// Applies one reply (see [`Store::record_replies`]).
    async fn record_reply(&self, reply: &Reply) -> Result<ReplyApplied, StoreError> {
        let mut applied = self.record_replies(&[reply]).await?;
        Ok(applied.pop().expect("one outcome per reply"))
    }

    /// Applies a consumer's ack of the run's current attempt; the result (or a heartbeat)
    /// is then due within the run timeout.
    async fn record_ack(&self, ack: &AckMessage) -> Result<ReplyEffect, StoreError> {
        Ok(self.record_reply(&Reply::Ack(ack.clone())).await?.0)
    }

    /// Applies a heartbeat of the run's current attempt: moves its deadline to a run
    /// timeout from now and keeps any progress.
    async fn record_heartbeat(
        &self,
        heartbeat: &HeartbeatMessage,
    ) -> Result<ReplyEffect, StoreError> {
        Ok(self
            .record_reply(&Reply::Heartbeat(heartbeat.clone()))
            .await?
            .0)
    }

    /// Applies a consumer's result as [`after_result`] decides: success, a retry after
    /// the job's backoff (`failed`), or `dead` with the dead letter pending. When applied,
    /// also returns the run's new state.
    async fn record_result(&self, result: &ResultMessage) -> Result<ReplyApplied, StoreError> {
        self.record_reply(&Reply::Result(result.clone())).await
    }

    /// A run by id.
    async fn get_run(&self, id: Uuid) -> Result<Option<Run>, StoreError>;

    /// A page of a job's runs.
    async fn list_runs(&self, job_id: Uuid, page: &RunPage) -> Result<Vec<Run>, StoreError>;

    /// Which of `run_ids` are still `scheduled` (not confirmed, and their job not deleted):
    /// checked before publishing a task that waited in memory.
    async fn scheduled_runs(&self, run_ids: &[Uuid]) -> Result<HashSet<Uuid>, StoreError>;

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

    /// [`Store::next_attempts`] for one run; false if it changed meanwhile.
    async fn next_attempt(
        &self,
        run_id: Uuid,
        expect: Expect,
        record: Option<&AttemptRecord>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let run = NextAttempt {
            run_id,
            expect,
            record,
        };
        Ok(self.next_attempts(&[run], now).await?.contains(&run_id))
    }

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

    /// Revives a `dead` run for a replay from a dead-letter queue: `scheduled` as
    /// attempt + 1, with a `replayed` entry in its history (a conditional
    /// [`Store::next_attempt`], so two concurrent replays revive it once).
    async fn replay_run(&self, run_id: Uuid, now: DateTime<Utc>) -> Result<Replay, StoreError> {
        let Some(mut run) = self.get_run(run_id).await? else {
            return Ok(Replay::Unknown);
        };
        if run.state != RunState::Dead {
            return Ok(Replay::NotDead(run.state));
        }
        let record = replay_record(run.attempt + 1, now);
        let expect = Expect::exactly(RunState::Dead, run.attempt);
        if !self
            .next_attempt(run_id, expect, Some(&record), now)
            .await?
        {
            let state = self.get_run(run_id).await?.map(|r| r.state);
            return Ok(state.map_or(Replay::Unknown, Replay::NotDead));
        }
        let Some(job) = self.get_job(run.job_id).await? else {
            return Ok(Replay::Unknown);
        };
        run.state = RunState::Scheduled;
        run.attempt += 1;
        run.due_at = Some(now);
        run.history.push(record);
        Ok(Replay::Revived(Box::new(OverdueRun { run, job })))
    }

    /// Every consumer group some job targets.
    async fn target_groups(&self) -> Result<Vec<String>, StoreError>;

    /// Locks run `run_id`, applies `change` to it (with its job's settings) and writes it
    /// back if `change` returns true. Returns whether it changed and the run as it now
    /// is; `None` if the run or its job does not exist. Used for broadcast runs, whose
    /// transitions depend on every instance's receipt ([`crate::domain::broadcast`]).
    async fn update_run(
        &self,
        run_id: Uuid,
        change: &RunChange<'_>,
    ) -> Result<Option<(bool, Run)>, StoreError>;

    /// Records a consumer instance's presence message.
    async fn record_presence(&self, presence: &PresenceMessage) -> Result<(), StoreError> {
        self.record_reply(&Reply::Presence(presence.clone()))
            .await
            .map(drop)
    }

    /// The zones whose consumers sent a presence message since `since`, by group.
    async fn live_zones(&self, since: DateTime<Utc>) -> Result<LiveZones, StoreError>;

    /// Records an observer's registration: each of its patterns is seen at `observe.at`
    /// (a pattern already seen later keeps its later time).
    async fn record_observer(&self, observe: &ObserveMessage) -> Result<(), StoreError> {
        self.record_reply(&Reply::Observe(observe.clone()))
            .await
            .map(drop)
    }

    /// Every distinct pattern some observer registered since `since`.
    async fn observed_patterns(&self, since: DateTime<Utc>) -> Result<Vec<String>, StoreError>;

    /// Every observer with a registration on record (whatever its age), by name, each
    /// once: the observers whose queues and dead-letter queues Chime knows of.
    async fn observer_names(&self) -> Result<Vec<String>, StoreError>;

    /// Appends `record` to run `run_id`'s history and changes nothing else: a note, such
    /// as a reply about the run that the collector refused. A run's history takes at most
    /// [`MAX_NOTES`] entries this way, so a misbehaving sender cannot grow it without end.
    /// False if there is no such run or its history is that long already.
    async fn note_on_run(&self, run_id: Uuid, record: &AttemptRecord) -> Result<bool, StoreError>;

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

    /// Every item (run) of job `job_id`'s fire at `fire_time`, by shard.
    async fn fire_items(
        &self,
        job_id: Uuid,
        fire_time: DateTime<Utc>,
    ) -> Result<Vec<Run>, StoreError>;

    /// Applies an ack, heartbeat or result to a broadcast run as the instance's receipt
    /// (see [`crate::domain::broadcast`]). Also returns the run's new state when the reply
    /// decided the run.
    async fn record_broadcast_reply(
        &self,
        reply: &Reply,
        now: DateTime<Utc>,
    ) -> Result<(ReplyEffect, Option<RunState>), StoreError> {
        let Some(run_id) = reply.task_id() else {
            return Ok((ReplyEffect::UnknownRun, None));
        };
        let unit = rand::random::<f64>();
        let change = |run: &mut Run, settings: &JobSettings| {
            if run.mode != crate::domain::DeliveryMode::Broadcast {
                return false;
            }
            match reply {
                Reply::Ack(ack) => broadcast::apply_ack(run, settings, ack, now),
                Reply::Heartbeat(beat) => broadcast::apply_heartbeat(run, settings, beat, now),
                Reply::Result(result) => broadcast::apply_result(run, settings, result, now, unit),
                Reply::Presence(_) | Reply::Observe(_) => false,
            }
        };
        Ok(match self.update_run(run_id, &change).await? {
            None => (ReplyEffect::UnknownRun, None),
            Some((false, _)) => (ReplyEffect::Stale, None),
            Some((true, run)) => (
                ReplyEffect::Applied,
                matches!(
                    run.state,
                    RunState::Succeeded | RunState::Failed | RunState::Dead
                )
                .then_some(run.state),
            ),
        })
    }

    /// Decides a broadcast run whose `due_at` passed (see [`broadcast::settle`]); returns
    /// the run when that finished its attempt (`succeeded`, `failed` or `dead`).
    async fn settle_broadcast(
        &self,
        run_id: Uuid,
        now: DateTime<Utc>,
    ) -> Result<Option<Run>, StoreError> {
        let unit = rand::random::<f64>();
        let change = |run: &mut Run, settings: &JobSettings| {
            let due = run.due_at;
            broadcast::settle(run, settings, now, unit).is_some() || run.due_at != due
        };
        Ok(match self.update_run(run_id, &change).await? {
            Some((true, run)) if !matches!(run.state, RunState::Dispatched | RunState::Acked) => {
                Some(run)
            }
            _ => None,
        })
    }
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
/// are skipped (the schedule still advances). Fires are armed `firing.ahead` of time,
/// except for `forbid` jobs; runs are stamped with `firing.node`.
pub(crate) fn plan_batch(
    requested: &[Uuid],
    jobs: &[Job],
    busy: &HashSet<Uuid>,
    now: DateTime<Utc>,
    grace: Duration,
    firing: &Firing,
    live: &LiveZones,
) -> FirePlanBatch {
    let node = firing.node.as_str();
    let mut plan = FirePlanBatch {
        runs: Vec::new(),
        advance: Vec::new(),
        batch: FireBatch::default(),
    };
    for job in jobs {
        let forbid = job.spec.settings.overlap == OverlapPolicy::Forbid;
        let until = if forbid { now } else { now + firing.ahead };
        if forbid {
            plan.batch.unarmed.push(job.id);
        }
        let mut fires = job.fires_due(now, until, grace, live);
        if fires.runs.is_empty() && fires.fire_times > 0 && needs_live_zones(job) {
            plan.batch.skipped_no_zone.push(job.id);
        }
        if !fires.runs.is_empty() && forbid && busy.contains(&job.id) {
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

/// What a result does to a run in `state` at `attempt` of a job with `settings`; shared
/// by both backends' result transactions.
pub(crate) fn result_verdict(
    state: RunState,
    attempt: u32,
    settings: &JobSettings,
    result: &ResultMessage,
    now: DateTime<Utc>,
) -> ResultVerdict {
    after_result(
        state,
        attempt,
        result,
        settings.max_attempts,
        &settings.backoff,
        now,
        rand::random::<f64>(),
    )
}

/// Pairs runs with their jobs (runs whose job vanished meanwhile are left out).
pub(crate) fn with_jobs(runs: Vec<Run>, jobs: Vec<Job>) -> Vec<OverdueRun> {
    let jobs: std::collections::HashMap<Uuid, Job> =
        jobs.into_iter().map(|job| (job.id, job)).collect();
    runs.into_iter()
        .filter_map(|run| {
            let job = jobs.get(&run.job_id)?.clone();
            Some(OverdueRun { run, job })
        })
        .collect()
}

/// The history entry of a replay from a dead-letter queue.
fn replay_record(attempt: u32, now: DateTime<Utc>) -> AttemptRecord {
    AttemptRecord {
        attempt,
        event: "replayed".into(),
        at: now,
        consumer: None,
        error: Some("replayed from the dead-letter queue".into()),
        retry_at: None,
    }
}

/// Decodes job rows one by one: an unreadable row is logged and left out (the fire
/// transaction then reports it as gone, and the timer drops it) instead of failing the
/// whole batch.
pub(crate) fn decode_jobs<R>(
    rows: &[R],
    decode: impl Fn(&R) -> Result<Job, StoreError>,
) -> Vec<Job> {
    decode_each(rows, decode, "job", "decode_job")
}

/// Decodes run rows one by one: an unreadable row (written around the store, e.g. an
/// unknown state) is logged, counted and left out, so it never stops a reconciler pass
/// over the other runs.
pub(crate) fn decode_runs<R>(
    rows: &[R],
    decode: impl Fn(&R) -> Result<Run, StoreError>,
) -> Vec<Run> {
    decode_each(rows, decode, "run", "decode_run")
}

/// Decodes rows one by one, logging each unreadable `row` and counting it under
/// `operation` in the store errors.
fn decode_each<R, T>(
    rows: &[R],
    decode: impl Fn(&R) -> Result<T, StoreError>,
    row: &'static str,
    operation: &'static str,
) -> Vec<T> {
    rows.iter()
        .filter_map(|r| match decode(r) {
            Ok(decoded) => Some(decoded),
            Err(error) => {
                tracing::error!(%error, row, "skipping an unreadable row");
                metrics::counter!(crate::telemetry::STORE_ERRORS, "operation" => operation)
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
