//! The timer: holds the jobs due within the look-ahead window in a [`TimerQueue`], wakes at
//! the earliest due time, and fires due jobs through the store's fire transaction, handing
//! the recorded runs to the dispatcher.
//!
//! Nothing scans all jobs: every `lookahead / 3` the timer reloads the jobs whose next fire
//! time falls inside the window (an indexed range query, so its cost follows the window,
//! not the number of jobs; reloading the whole window also heals any missed change). Job
//! changes made through the API reach the timer at once through [`TimerHandle`]: the timer
//! re-reads the changed job, so concurrent changes cannot leave it with a stale entry
//! whatever order their notices arrive in. The queue is only a hint: the fire transaction
//! re-reads each job and fires only what the stored row says is due.
//!
//! Fires are *armed* `fire_ahead` before their time: the queue orders jobs by when to
//! arm them (due time − `fire_ahead`), and the fire transaction records every on-time
//! fire up to the arming horizon. The dispatcher holds each recorded task until its fire
//! time, so a herd of jobs due together is in the store before its instant and only
//! publishing is left then. Jobs with `overlap: forbid` are not armed (whether their
//! previous run finished is only known at the fire time): the store reports them and
//! the timer holds them until they are due. A change to a job withdraws its armed fires
//! in the store (see [`Store::update_job`]) and the dispatcher re-checks the tasks it
//! holds for that job.
//!
//! In a cluster the timer holds only jobs of the shards this node leases ([`Ownership`]).
//! When the set of shards changes it drops the others and reloads its window; it fires a
//! job only while its lease is trusted, and the fire transaction re-checks the lease's
//! fencing token, so a node that lost a shard cannot record a fire for it.
//!
//! Misfires are told apart by cause ([`crate::domain::behind`]): the timer keeps since
//! when it has been responsible for each shard ([`Responsibility`]), and a job that
//! misfired with its due time inside that span was missed because this node could not
//! keep up. Those count as `cause="behind"` in `chime_timer_misfires_total` and
//! `chime_fires_collapsed_total` and give a WARN at most every 10 s ([`BehindLog`]);
//! `chime_timer_lag_seconds` says how late the latest round recorded the fires it was
//! responsible for. See docs/operations.md, "Falling behind".

pub mod behind_log;
pub mod herd;
pub mod queue;
pub mod responsibility;

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use chrono::{DateTime, Utc};
use tokio::{sync::mpsc, time::Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};
use uuid::Uuid;

use chime_consumer::backoff::Backoff;

use crate::{
    cluster::{Leases, Ownership},
    dispatch::{ChangeGuard, DispatchHandle, MAX_PENDING},
    domain::{
        Job,
        behind::{MisfireCause, lateness, misfire_cause},
    },
    store::{DueCursor, FireBatch, Firing, Store, StoreError},
    telemetry,
};
pub use behind_log::{BehindLog, MisfireTally};
use herd::RecordingPace;
pub use queue::TimerQueue;
pub use responsibility::Responsibility;

/// Most jobs fired in one store transaction.
const FIRE_BATCH: usize = 1000;
/// Page size of the look-ahead query.
const REFILL_PAGE: u32 = 1000;

/// How long a job whose lease cannot be proven right now waits before it is tried again
/// (by then membership has renewed the lease or given the shard up).
const UNPROVEN_RETRY: chrono::Duration = chrono::Duration::milliseconds(500);

/// What one round of the timer ([`Timer::fire_round`]) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// Runs recorded.
    pub recorded: usize,
    /// Jobs that misfired, by cause.
    pub misfires: MisfireTally,
    /// The latest any fire this node was responsible for was recorded after its due
    /// time (zero when every fire was on time or armed ahead): `chime_timer_lag_seconds`.
    pub lag: chrono::Duration,
}

impl Default for Round {
    fn default() -> Self {
        Self {
            recorded: 0,
            misfires: MisfireTally::default(),
            lag: chrono::Duration::zero(),
        }
    }
}

/// What the timer is told.
#[derive(Debug)]
enum Notice {
    /// The job changed; a change made on this node comes with its guard.
    Job(Uuid, Option<ChangeGuard>),
    Everything,
}

/// Tells the timer about job changes. Cheap to clone.
#[derive(Debug, Clone)]
pub struct TimerHandle {
    tx: mpsc::UnboundedSender<Notice>,
}

impl TimerHandle {
    /// The job was created, changed (including pause and resume) or deleted; call after
    /// the change committed.
    pub fn job_changed(&self, id: Uuid) {
        let _ = self.tx.send(Notice::Job(id, None));
    }

    /// A change begun on this node (see [`DispatchHandle::begin_change`]) committed or
    /// failed. The guard goes on to the dispatcher after any fire this timer recorded
    /// before hearing of the change, so those tasks are checked too.
    pub fn change_done(&self, change: ChangeGuard) {
        let _ = self.tx.send(Notice::Job(change.job(), Some(change)));
    }

    /// Changes may have been missed: reload the whole window, and have the dispatcher
    /// check every task still waiting.
    pub fn reload_all(&self) {
        let _ = self.tx.send(Notice::Everything);
    }
}

/// Timer settings.
#[derive(Debug, Clone, Copy)]
pub struct TimerSettings {
    /// How far ahead jobs are held in memory.
    pub lookahead: Duration,
    /// Lateness past which a fire counts as missed.
    pub misfire_grace: Duration,
    /// How far ahead of their time fires are recorded (zero: when due).
    pub fire_ahead: Duration,
}

/// Fires are armed in slices of this fraction of `fire_ahead` (so between 90 % and
/// 100 % of it ahead), one transaction per slice rather than one per job when jobs
/// come due a few milliseconds apart.
const ARM_SLICES: i32 = 10;

/// The furthest ahead of its time a herd's fire may be armed (see `herd.rs`).
const MAX_ARMING_LEAD: Duration = Duration::from_secs(10);

impl TimerSettings {
    /// The furthest ahead of its time a fire may be armed: `fire_ahead`, or for a herd
    /// up to `MAX_ARMING_LEAD` (within half the look-ahead window); zero when arming
    /// is off.
    pub fn arming_lead(&self) -> Duration {
        if self.fire_ahead.is_zero() {
            return Duration::ZERO;
        }
        self.fire_ahead.max(MAX_ARMING_LEAD.min(self.lookahead / 2))
    }

    /// How far ahead of now one fire transaction may record runs: the arming lead plus
    /// the arming slice being popped. A node taking over shards must collect the
    /// previous owner's `scheduled` runs at least this far ahead, or armed runs are left
    /// unpublished.
    pub fn arming_horizon(&self) -> Duration {
        self.arming_lead() + self.fire_ahead / ARM_SLICES as u32
    }
}

/// The timer service.
pub struct Timer {
    store: Arc<dyn Store>,
    dispatch: DispatchHandle,
    ownership: Ownership,
    /// The leases the queue was loaded for.
    loaded_for: Arc<Leases>,
    rx: mpsc::UnboundedReceiver<Notice>,
    queue: TimerQueue,
    lookahead: chrono::Duration,
    grace: chrono::Duration,
    /// `fire_ahead`.
    ahead: chrono::Duration,
    /// Every active job due before this instant is in `queue` (or being fired).
    horizon: Option<DateTime<Utc>>,
    /// Jobs the store does not arm (`overlap: forbid`), with the fire time they wait
    /// for. Armed jobs are taken up to a slice early; these only once their time has
    /// come, since the store records nothing for them before it.
    unarmed: HashMap<Uuid, DateTime<Utc>>,
    /// Jobs taken in the current round that must not be taken again in it (their time
    /// may fall within the round's slice), with when they are due again; they go back
    /// into the queue when the round ends.
    set_aside: Vec<(Uuid, DateTime<Utc>)>,
    /// How much further than `fire_ahead` a herd may be taken up early.
    herd_lead: chrono::Duration,
    /// How fast fire transactions record runs lately.
    pace: RecordingPace,
    retry: Backoff,
    /// Since when the timer has been responsible for each shard.
    responsible: Responsibility,
    /// Misfires waiting to be logged.
    behind_log: BehindLog,
}

impl Timer {
    /// A timer firing through `store` into `dispatch`, and the handle that feeds it changes.
    pub fn new(
        store: Arc<dyn Store>,
        dispatch: DispatchHandle,
        ownership: Ownership,
        settings: TimerSettings,
    ) -> (TimerHandle, Self) {
        let (tx, rx) = mpsc::unbounded_channel();
        let timer = Self {
            store,
            dispatch,
            loaded_for: ownership.current(),
            ownership,
            rx,
            queue: TimerQueue::new(),
            lookahead: chrono::Duration::from_std(settings.lookahead).expect("bounded lookahead"),
            grace: chrono::Duration::from_std(settings.misfire_grace).expect("bounded grace"),
            ahead: chrono::Duration::from_std(settings.fire_ahead).expect("bounded fire_ahead"),
            horizon: None,
            unarmed: HashMap::new(),
            set_aside: Vec::new(),
            herd_lead: chrono::Duration::from_std(
                settings.arming_lead().saturating_sub(settings.fire_ahead),
            )
            .expect("bounded arming lead"),
            pace: RecordingPace::default(),
            retry: Backoff::new(Duration::from_millis(100), Duration::from_secs(5)),
            responsible: Responsibility::default(),
            behind_log: BehindLog::default(),
        };
        (TimerHandle { tx }, timer)
    }

    /// Runs until `cancel` fires.
    pub async fn run(mut self, cancel: CancellationToken) {
        let refill_every = (self.lookahead / 3).to_std().expect("positive lookahead");
        let mut next_refill = Instant::now();
        let mut leases = self.ownership.subscribe();
        loop {
            let current = self.ownership.current();
            if !current.same_shards(&self.loaded_for) {
                // Shards came or went: keep only jobs of held shards, then load the window
                // for the new set (a newly held shard's overdue jobs fire now, following
                // their misfire policy).
                let ownership = self.ownership.clone();
                self.queue
                    .retain(|job| current.get(ownership.shard_of(job)).is_some());
                self.unarmed
                    .retain(|job, _| current.get(ownership.shard_of(*job)).is_some());
                self.loaded_for = current;
                next_refill = Instant::now();
            }
            if Instant::now() >= next_refill {
                next_refill = match self.refill(Utc::now()).await {
                    Ok(()) => Instant::now() + refill_every,
                    Err(error) => {
                        let delay = self.retry.next_delay();
                        warn!(%error, retry_in_ms = delay.as_millis() as u64, "timer cannot load due jobs");
                        metrics::counter!(telemetry::STORE_ERRORS, "operation" => "due_jobs")
                            .increment(1);
                        Instant::now() + delay
                    }
                };
            }
            // A herd loaded or changed since the last round must be woken for too.
            let herd_wake = self.herd_plan(Utc::now()).wake_at;
            let wake = self
                .queue
                .next_due()
                .into_iter()
                .chain(herd_wake)
                .map(instant_of)
                .fold(next_refill, Instant::min);
            tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                Some(notice) = self.rx.recv() => match notice {
                    Notice::Job(job, change) => self.reload(job, change).await,
                    Notice::Everything => {
                        self.dispatch.changes_missed();
                        next_refill = Instant::now();
                    }
                },
                Ok(()) = leases.changed() => {}
                () = tokio::time::sleep_until(wake) => {}
            }
            if self.horizon.is_some() {
                self.fire_due(Utc::now()).await;
            }
        }
    }

    /// Fires every job due at `now`, arming those due within `fire_ahead` (and the
    /// current slice), and a herd further on that must be recorded early to be recorded
    /// in time; returns how many runs were recorded.
    pub async fn fire_due(&mut self, now: DateTime<Utc>) -> usize {
        self.fire_round(now).await.recorded
    }

    /// One round: [`Timer::fire_due`], saying also which jobs misfired and why, and how
    /// late the fires this node was responsible for were recorded.
    pub async fn fire_round(&mut self, now: DateTime<Utc>) -> Round {
        let take_through = self.herd_plan(now).take_through.max(now + self.slice());
        if take_through > now + self.slice() {
            debug!(
                ahead_ms = (take_through - now).num_milliseconds(),
                queued = self.queue.len(),
                "taking up a herd early"
            );
        }
        let mut round = Round::default();
        loop {
            let due = self.queue.pop_due(take_through, FIRE_BATCH);
            if due.is_empty() {
                break;
            }
            let due = self.not_before_their_time(due);
            let due = self.only_trusted(due, now);
            if due.is_empty() {
                continue;
            }
            // A big herd takes a while to record: judge each batch at the real time.
            match self
                .fire(&due, Utc::now().max(now), take_through, &mut round)
                .await
            {
                Ok(n) => round.recorded += n,
                Err(error) => {
                    // Nothing is recorded until the store answers: whatever misfires
                    // meanwhile is an outage, not this node falling behind.
                    self.responsible.interrupt_all();
                    let delay = self.retry.next_delay();
                    error!(%error, jobs = due.len(), retry_in_ms = delay.as_millis() as u64,
                        "cannot record fires; retrying");
                    metrics::counter!(telemetry::STORE_ERRORS, "operation" => "fire").increment(1);
                    let retry_at = now + chrono::Duration::from_std(delay).expect("bounded delay");
                    for job in due {
                        self.queue.set(job, Some(retry_at));
                    }
                    break;
                }
            }
        }
        for (job, at) in std::mem::take(&mut self.set_aside) {
            self.queue.set(job, Some(at));
        }
        metrics::gauge!(telemetry::TIMER_JOBS).set(self.queue.len() as f64);
        metrics::gauge!(telemetry::TIMER_LAG).set(round.lag.num_milliseconds() as f64 / 1000.0);
        self.behind_log.note(&round.misfires);
        if let Some(said) = self.behind_log.due(std::time::Instant::now()) {
            log_misfires(&said);
        }
        round
    }

    /// Keeps the jobs that may be fired now; sets aside until the round is over the
    /// unarmed jobs taken early with the slice. Fired early, they would record nothing
    /// and come straight back, round after round.
    fn not_before_their_time(&mut self, due: Vec<Uuid>) -> Vec<Uuid> {
        if self.unarmed.is_empty() {
            return due;
        }
        let now = Utc::now();
        let mut ready = Vec::with_capacity(due.len());
        for job in due {
            match self.unarmed.get(&job) {
                Some(at) if *at > now => self.set_aside.push((job, *at)),
                _ => ready.push(job),
            }
        }
        ready
    }

    /// Which herd in the queue must be taken up by `now` to be recorded in time, and
    /// when the next one must be.
    fn herd_plan(&self, now: DateTime<Utc>) -> herd::Lead {
        herd::lead(
            now,
            self.queue.crowds(),
            &self.pace,
            self.herd_lead,
            MAX_PENDING as u64,
        )
    }

    /// One arming slice: jobs whose arm time falls within it are armed together.
    fn slice(&self) -> chrono::Duration {
        self.ahead / ARM_SLICES
    }

    /// Keeps the jobs whose shard lease is trusted; jobs of held but unproven shards wait
    /// a moment, jobs of shards not held leave the queue.
    fn only_trusted(&mut self, due: Vec<Uuid>, now: DateTime<Utc>) -> Vec<Uuid> {
        let leases = self.ownership.current();
        let at = std::time::Instant::now();
        let mut trusted = Vec::with_capacity(due.len());
        for job in due {
            let shard = self.ownership.shard_of(job);
            if leases.trusts(shard, at) {
                trusted.push(job);
            } else if leases.get(shard).is_some() {
                // Not acting for the shard now: misfires until it is reloaded are not
                // this node falling behind.
                self.responsible.interrupt(shard);
                // Not before the round ends: the retry may fall within its slice.
                self.set_aside.push((job, now + UNPROVEN_RETRY));
            }
        }
        trusted
    }

    /// Fires `jobs`, taken up to `take_through` (their arming times are at or before it).
    async fn fire(
        &mut self,
        jobs: &[Uuid],
        now: DateTime<Utc>,
        take_through: DateTime<Utc>,
        round: &mut Round,
    ) -> Result<usize, StoreError> {
        let firing = Firing {
            node: self.ownership.node().to_string(),
            fence: self
                .ownership
                .current()
                .fence(jobs.iter().map(|job| self.ownership.shard_of(*job))),
            // A job taken up anywhere in the current slice, or with a herd, is armed in
            // full.
            ahead: self.ahead + (take_through - now).max(self.slice()),
        };
        let started = std::time::Instant::now();
        let batch = self.store.fire(jobs, now, self.grace, &firing).await?;
        self.pace.observe(batch.recorded.len(), started.elapsed());
        metrics::counter!(telemetry::FIRE_TRANSACTIONS).increment(1);
        self.retry.reset();
        if !batch.fenced.is_empty() {
            warn!(
                jobs = batch.fenced.len(),
                "fire refused: shard lease no longer proven"
            );
            metrics::counter!(telemetry::FIRES_FENCED).increment(batch.fenced.len() as u64);
            self.set_aside
                .extend(batch.fenced.iter().map(|job| (*job, now + UNPROVEN_RETRY)));
        }
        if !batch.skipped_no_zone.is_empty() {
            warn!(
                jobs = ?batch.skipped_no_zone,
                "fires skipped: zone jobs found no zone with live consumers"
            );
            metrics::counter!(telemetry::FIRES_SKIPPED, "reason" => "no_live_zone")
                .increment(batch.skipped_no_zone.len() as u64);
        }
        if !batch.skipped_overlap.is_empty() {
            debug!(
                jobs = batch.skipped_overlap.len(),
                "fires skipped: previous run unfinished"
            );
            metrics::counter!(telemetry::FIRES_SKIPPED, "reason" => "overlap")
                .increment(batch.skipped_overlap.len() as u64);
        }
        self.judge_lateness(&batch, now, round);
        let unarmed: HashSet<Uuid> = batch.unarmed.into_iter().collect();
        for (job, next) in batch.next_fire {
            self.apply(job, next, !unarmed.contains(&job));
        }
        let recorded = batch.recorded.len();
        metrics::counter!(telemetry::FIRES, "trigger" => "schedule").increment(recorded as u64);
        debug!(jobs = jobs.len(), recorded, "fired");
        self.dispatch.submit_fenced(batch.recorded);
        Ok(recorded)
    }

    /// Counts the batch's misfires by cause and notes how late the fires this node was
    /// responsible for were recorded.
    fn judge_lateness(&self, batch: &FireBatch, now: DateTime<Utc>, round: &mut Round) {
        let leases = self.ownership.current();
        let cause = |job: Uuid, due: DateTime<Utc>| {
            let since = self
                .responsible
                .since(self.ownership.shard_of(job), &leases);
            misfire_cause(due, since)
        };
        for misfire in &batch.misfired {
            let (policy, why) = (misfire.policy.as_str(), cause(misfire.job, misfire.due));
            metrics::counter!(telemetry::MISFIRES, "policy" => policy).increment(1);
            metrics::counter!(telemetry::TIMER_MISFIRES, "cause" => why.as_str(), "policy" => policy)
                .increment(1);
            metrics::counter!(telemetry::FIRES_COLLAPSED, "cause" => why.as_str(), "policy" => policy)
                .increment(misfire.collapsed);
            let late_ms = lateness(misfire.due, now).num_milliseconds();
            round.misfires.count(why, misfire.collapsed, late_ms);
        }
        for (job, due) in &batch.late {
            if cause(*job, *due) == MisfireCause::Behind {
                round.lag = round.lag.max(lateness(*due, now));
            }
        }
    }

    /// Loads every active job whose next fire time falls before `now + lookahead`.
    pub async fn refill(&mut self, now: DateTime<Utc>) -> Result<(), StoreError> {
        // The leases the window is loaded for: from `now`, this timer is responsible for
        // the jobs of their shards.
        let leases = self.ownership.current();
        match self.load_window(now, &leases).await {
            Ok(()) => {
                self.responsible.loaded(&leases, now);
                Ok(())
            }
            Err(error) => {
                self.responsible.interrupt_all();
                Err(error)
            }
        }
    }

    /// [`Timer::refill`] for the shards of `leases`.
    async fn load_window(&mut self, now: DateTime<Utc>, leases: &Leases) -> Result<(), StoreError> {
        let new_horizon = now + self.lookahead;
        let mut cursor = DueCursor::START;
        let shards: Option<Vec<u32>> = leases.is_fenced().then(|| leases.shards().collect());
        if shards.as_ref().is_some_and(Vec::is_empty) {
            self.horizon = Some(new_horizon);
            return Ok(());
        }
        loop {
            let page = self
                .store
                .due_jobs(cursor, new_horizon, REFILL_PAGE, shards.as_deref())
                .await?;
            for (job, at) in &page.jobs {
                // Still unarmed if the store's fire time is the one it was reported
                // unarmed for; any other time is news (a missed change) and is armed.
                let armable = self.unarmed.get(job) != Some(at);
                if armable {
                    self.unarmed.remove(job);
                }
                self.queue
                    .set(*job, Some(arm_time(*at, self.ahead, armable)));
            }
            match page.next {
                Some(next) => cursor = next,
                None => break,
            }
        }
        self.horizon = Some(new_horizon.max(self.horizon.unwrap_or(new_horizon)));
        metrics::gauge!(telemetry::TIMER_JOBS).set(self.queue.len() as f64);
        Ok(())
    }

    /// Takes a changed job's stored state. If the store cannot say, the job is woken soon
    /// and the fire transaction, which reads the row, decides.
    async fn reload(&mut self, job: Uuid, change: Option<ChangeGuard>) {
        // Whatever the change, the tasks already armed for this job are checked against
        // the store again before they go out (the change may have withdrawn them).
        self.dispatch.job_changed(job, change);
        match self.store.get_job(job).await {
            Ok(stored) => self.apply(job, stored.as_ref().and_then(Job::timer_entry), true),
            Err(error) => {
                warn!(%error, %job, "cannot read a changed job; checking it when due");
                self.apply(job, Some(Utc::now() + chrono::Duration::seconds(1)), false);
            }
        }
    }

    /// Holds `job`, due at `at`, if that falls inside the loaded window (otherwise the
    /// next refill will load it): to be armed ahead of time if `armable`, else at `at`.
    fn apply(&mut self, job: Uuid, at: Option<DateTime<Utc>>, armable: bool) {
        let held = self
            .ownership
            .current()
            .get(self.ownership.shard_of(job))
            .is_some();
        let inside = at.filter(|at| held && self.horizon.is_some_and(|h| *at < h));
        match inside.filter(|_| !armable) {
            Some(due) => self.unarmed.insert(job, due),
            None => self.unarmed.remove(&job),
        };
        self.queue
            .set(job, inside.map(|due| arm_time(due, self.ahead, armable)));
    }
}

/// Logs what misfired since the last line: a WARN when this node fell behind, an INFO
/// for jobs nobody ran at their due time (they are expected after a restart or takeover).
fn log_misfires(said: &MisfireTally) {
    if said.behind_jobs > 0 {
        warn!(
            jobs = said.behind_jobs,
            fires_collapsed = said.behind_collapsed,
            worst_late_ms = said.worst_behind_ms,
            hint = "this node cannot keep up; see docs/operations.md#falling-behind",
            "timer is falling behind: jobs misfired while this node held them"
        );
    }
    if said.outage_jobs > 0 {
        info!(
            jobs = said.outage_jobs,
            fires_collapsed = said.outage_collapsed,
            "jobs missed fires while no node ran them (a restart, takeover or store outage); their misfire policies applied"
        );
    }
}

/// When the timer takes up a job due at `due`: `ahead` earlier if it may be armed.
fn arm_time(due: DateTime<Utc>, ahead: chrono::Duration, armable: bool) -> DateTime<Utc> {
    if armable { due - ahead } else { due }
}

fn instant_of(at: DateTime<Utc>) -> Instant {
    let delay = (at - Utc::now()).to_std().unwrap_or(Duration::ZERO);
    Instant::now() + delay
}
