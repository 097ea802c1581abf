//! The plain types the [`Store`](super::Store) trait speaks: pages and cursors, the
//! fire's inputs and outputs, what a reply did, and the conditions of run updates.

use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use chime_consumer::protocol::AttemptRecord;

use crate::domain::{Job, JobSettings, MisfirePolicy, Run, RunState, shard::ShardToken};

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

/// One page of [`Store::due_jobs`](super::Store::due_jobs).
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
    pub(crate) fn of(rows: Vec<(Uuid, DateTime<Utc>, DueCursor)>, limit: u32) -> Self {
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

/// What [`Store::fire`](super::Store::fire) did.
#[derive(Debug, Default)]
pub struct FireBatch {
    /// Runs newly recorded, ready to publish.
    pub recorded: Vec<crate::domain::DueTask>,
    /// For each job examined, the next fire time the timer should hold (None: none —
    /// paused, deleted, or finished).
    pub next_fire: Vec<(Uuid, Option<DateTime<Utc>>)>,
    /// Each job that had misfired: its policy, the due time it missed and how many
    /// fires the policy did not record (see [`Misfire`]).
    pub misfired: Vec<Misfire>,
    /// Each job fired after its due time (within grace or misfired), with the oldest
    /// due time it fired for (the stored next fire time): the timer's lateness.
    /// On-time fires armed ahead are not listed.
    pub late: Vec<(Uuid, DateTime<Utc>)>,
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

/// A job that misfired in a fire transaction (see [`crate::domain::misfire`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Misfire {
    /// The job.
    pub job: Uuid,
    /// Its misfire policy.
    pub policy: MisfirePolicy,
    /// The oldest due time it missed: the stored next fire time the plan started from.
    pub due: DateTime<Utc>,
    /// Due fire times the policy did not record (collapsed by `fire_once`, dropped by
    /// `skip`, beyond the limit of `catch_up`); see
    /// [`collapsed_fires`](crate::domain::misfire::collapsed_fires) for its bound.
    pub collapsed: u64,
}

/// What a reply did: its effect on its run and, when a result decided the run
/// (`succeeded`, `failed` for a retry, or `dead`), the run's new state.
pub type ReplyApplied = (ReplyEffect, Option<RunState>);

/// What [`Store::record_replies`](super::Store::record_replies) did with a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedReplies {
    /// What each reply did, in batch order.
    pub effects: Vec<ReplyApplied>,
    /// The transactions it committed: one per round of the batch.
    pub transactions: u32,
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
    /// Inside the store only: the reply is to a broadcast run, whose replies are per
    /// instance, and is recorded as its instance's receipt in the same round (see
    /// `store/broadcast_receipt.rs`). [`Store::record_replies`](super::Store::record_replies)
    /// returns the receipt's effect instead.
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
/// transaction; returns whether it changed anything (see [`Store::update_run`](super::Store::update_run)).
pub type RunChange<'a> = dyn Fn(&mut Run, &JobSettings) -> bool + Send + Sync + 'a;

/// A source of random draws, uniform in `[0, 1)`: the jitter of retry backoffs. The
/// caller passes it in (`&rand::random`), so the store itself draws nothing.
pub type Jitter<'a> = dyn Fn() -> f64 + Send + Sync + 'a;

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

/// A run to move to its next attempt (see [`Store::next_attempts`](super::Store::next_attempts)).
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

/// Longest history [`Store::note_on_run`](super::Store::note_on_run) appends to.
pub const MAX_NOTES: usize = 100;

/// An API token as the store keeps it: the token and the SHA-256 of its secret (hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredToken {
    /// The token.
    pub token: crate::domain::access::ApiToken,
    /// The SHA-256 of its secret, lower-case hex.
    pub secret_sha256: String,
}

/// A consumer instance as its presence messages report it, with what it is running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerInstance {
    /// Its instance id.
    pub instance: String,
    /// Its consumer group.
    pub group: String,
    /// Its zone, if it declared one.
    pub zone: Option<String>,
    /// Whether it takes the group's broadcasts.
    pub broadcast: bool,
    /// The software it reports (`name/version`), if any.
    pub version: Option<String>,
    /// Its first presence on record (since it was last pruned).
    pub first_seen: DateTime<Utc>,
    /// Its latest presence, by the receiving node's clock.
    pub last_seen: DateTime<Utc>,
    /// Runs it acked and has not finished: `acked` group, zone and sharded runs whose
    /// consumer it is, and open broadcast runs on which its receipt is `running`.
    pub running: u64,
}
