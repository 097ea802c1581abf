//! The reconciler: makes the delivery promise hold. Every pass reads the runs past their
//! `due_at` (through the `runs_due` index, so the cost follows the overdue runs, not the
//! table) of the shards this node holds, and for each:
//!
//! - `scheduled` longer than `republish_after` (publish failed, or the node stopped
//!   between commit and confirm): publish again, same attempt. On start and on gaining
//!   shards every `scheduled` run is taken at once, including fires the previous owner
//!   armed ahead of their time ([`crate::timer::TimerSettings::arming_horizon`]; the dispatcher holds
//!   those until then);
//! - `dispatched` past the ack timeout, or `acked` past the run timeout (heartbeats move
//!   it): publish again as attempt + 1, or give it up (`dead`) when attempts ran out —
//!   except a `dispatched` run whose work queue has no consumer ([`consumers`]): its
//!   task still waits in the queue, so its ack deadline moves on by another
//!   `ack_timeout` on the same attempt and it shows `waiting_for: consumer`;
//! - `failed` whose backoff elapsed: publish the next attempt;
//! - `dead` with its dead letter pending: publish the dead letter (run, job, reason,
//!   history) to the group's dead-letter queue, confirmed, then note it;
//! - a broadcast run past its ack window or an instance's deadline: decided from every
//!   instance's receipt ([`crate::domain::broadcast::settle`]).
//!
//! Ack and run deadlines are judged only up to where the result collector has got
//! through the reply queue ([`ReplyProgress`]): a deadline that passed while its
//! answer may still be queued waits, so a collector that falls behind does not turn
//! into a duplicate of every task.
//!
//! Every transition is a conditional update on the run's state and attempt, so a reply
//! arriving meanwhile wins and nothing is acted on twice. In a cluster it works only on
//! the shards this node holds; when this node gains shards it passes over them at once.
//!
//! Metrics: `chime_republishes_total{reason}`, `chime_retries_total`,
//! `chime_dead_runs_total{reason}`, `chime_dead_letters_published_total`,
//! `chime_republishes_withheld_total{reason}`, `chime_group_without_consumer{group,queue}`.

pub mod consumers;
mod dead_letters;
mod missed;
mod pass;
mod settings;

pub use pass::PassReport;
pub use settings::ReconcileSettings;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use chime_consumer::protocol::{AttemptRecord, topology};
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use self::consumers::{ConsumerWatch, Waiting};
use crate::{
    broker::ConfirmedPublisher,
    cluster::Ownership,
    dispatch::DispatchHandle,
    domain::{
        DeliveryMode, RunState,
        retry::{Missed, TimeoutVerdict, after_timeout},
    },
    results::ReplyProgress,
    store::{Expect, NextAttempt, OverdueRun, Store, StoreError},
    telemetry,
};
use pass::{PassKind, takeover_deadline, unconfirmed_cutoff};

/// Most runs examined per page.
const PASS_LIMIT: u32 = 1000;
/// How often the takeover wait looks whether its runs were answered.
const TAKEOVER_ACK_POLL: Duration = Duration::from_millis(100);

/// An overdue run to publish as its next attempt once the store has moved it.
struct Advance {
    item: OverdueRun,
    /// What its history notes (a timeout), if anything.
    record: Option<AttemptRecord>,
    counted: Counted,
}

/// Which metric a moved run counts towards.
#[derive(Clone, Copy)]
enum Counted {
    /// `chime_republishes_total{reason}`: a missed deadline.
    Republish(&'static str),
    /// `chime_retries_total`: a failed attempt's backoff elapsed.
    Retry,
}

/// The reconciler service.
pub struct Reconciler {
    store: Arc<dyn Store>,
    dispatch: DispatchHandle,
    publisher: Arc<ConfirmedPublisher>,
    ownership: Ownership,
    replies: ReplyProgress,
    settings: ReconcileSettings,
    consumers: ConsumerWatch,
}

impl Reconciler {
    /// A reconciler of `ownership`'s shards, publishing dead letters through `publisher`
    /// and judging deadlines as far as `replies` allows.
    pub fn new(
        store: Arc<dyn Store>,
        dispatch: DispatchHandle,
        publisher: Arc<ConfirmedPublisher>,
        ownership: Ownership,
        replies: ReplyProgress,
        settings: ReconcileSettings,
    ) -> Self {
        let consumers = ConsumerWatch::new(publisher.url());
        Self {
            consumers,
            store,
            dispatch,
            publisher,
            ownership,
            replies,
            settings,
        }
    }

    /// One pass over the runs of this node's shards overdue at `now` (the loop passes
    /// `Utc::now()`; tests pass any instant).
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<PassReport, StoreError> {
        let shards = self.ownership.shard_filter();
        self.pass(PassKind::Periodic, shards.as_deref(), now).await
    }

    /// Acts on the runs of `shards` that are overdue at `now` (`scheduled` ones: see
    /// [`Self::unconfirmed_cutoff`]). A pass of several pages judges each page as of
    /// `now` plus the time the pass has taken so far.
    async fn pass(
        &self,
        kind: PassKind,
        shards: Option<&[u32]>,
        now: DateTime<Utc>,
    ) -> Result<PassReport, StoreError> {
        let unconfirmed = unconfirmed_cutoff(&self.settings, kind);
        let mut report = PassReport::default();
        let mut waiting = BTreeMap::new();
        let result = if shards.is_some_and(<[u32]>::is_empty) {
            Ok(())
        } else {
            self.walk(kind, shards, now, unconfirmed, &mut waiting, &mut report)
                .await
        };
        self.consumers.after_pass(waiting).await;
        result.map(|()| report)
    }

    /// The pages of a pass (see [`Self::pass`]); the queues whose runs waited for a
    /// consumer go to `waiting`.
    async fn walk(
        &self,
        kind: PassKind,
        shards: Option<&[u32]>,
        start: DateTime<Utc>,
        unconfirmed: chrono::Duration,
        waiting: &mut BTreeMap<String, Waiting>,
        report: &mut PassReport,
    ) -> Result<(), StoreError> {
        let reason = kind.reason();
        let mut cursor = None;
        // One takeover wait per pass, however many pages it reads: the previous owner
        // published before it died, so the acks of every page come in by the same time.
        let mut ack_deadline = None;
        let started = std::time::Instant::now();
        loop {
            let now = start + chrono::Duration::from_std(started.elapsed()).unwrap_or_default();
            let cutoff = now + unconfirmed;
            let overdue = self
                .store
                .overdue_runs(now, cutoff, cursor, PASS_LIMIT, shards)
                .await?;
            let count = overdue.len();
            let judged_until = self.replies.judged_until(now);
            let before = (
                report.republished(),
                report.awaiting_mark,
                report.awaiting_replies,
            );
            cursor = overdue
                .last()
                .and_then(|item| Some((item.run.due_at?, item.run.id)));
            report.examined += count;
            let mut dead = Vec::new();
            let mut advances = Vec::new();
            let mut holds = Vec::new();
            let mut missed = Vec::new();
            let mut maybe_published = Vec::new();
            let grace = chrono::Duration::from_std(self.settings.misfire_grace)
                .unwrap_or(chrono::Duration::MAX);
            for item in overdue {
                if matches!(item.run.state, RunState::Dispatched | RunState::Acked)
                    && item.run.due_at.is_some_and(|due| due > judged_until)
                {
                    metrics::counter!(telemetry::REPUBLISHES_WITHHELD, "reason" => "replies_pending")
                        .increment(1);
                    report.awaiting_replies += 1;
                    continue;
                }
                if item.run.mode == DeliveryMode::Broadcast
                    && matches!(item.run.state, RunState::Dispatched | RunState::Acked)
                {
                    // Judged as of the collector's progress: an instance's receipt or
                    // heartbeat may still be queued.
                    self.settle_broadcast(item, judged_until, report, &mut dead)
                        .await?;
                    continue;
                }
                match item.run.state {
                    // Its task is in the queue; publishing it again would only make a
                    // duplicate, and more work for a store already behind.
                    RunState::Scheduled if self.dispatch.is_confirmed_unmarked(item.run.id) => {
                        metrics::counter!(telemetry::REPUBLISHES_WITHHELD, "reason" => "unmarked")
                            .increment(1);
                        report.awaiting_mark += 1;
                    }
                    // Left behind by a node that stopped after recording it ahead: judged
                    // by the job's misfire policy below.
                    RunState::Scheduled
                        if matches!(kind, PassKind::Start | PassKind::Takeover)
                            && missed::is_missed(&item, now, grace) =>
                    {
                        missed.push(item)
                    }
                    // The previous owner (or this node's previous process) may have
                    // published it and died before marking it: wait briefly for its ack.
                    RunState::Scheduled
                        if matches!(kind, PassKind::Start | PassKind::Takeover)
                            && item.run.fire_time <= now =>
                    {
                        maybe_published.push(item)
                    }
                    RunState::Scheduled => {
                        metrics::counter!(telemetry::REPUBLISHES, "reason" => reason).increment(1);
                        self.dispatch.resubmit([item.job.task_message(&item.run)]);
                        report.count_republished(reason);
                    }
                    RunState::Dispatched if self.nobody_consumes(&item).await => {
                        let queue = run_queue(&item).unwrap_or_default();
                        let seen = waiting.entry(queue).or_insert_with(|| Waiting {
                            group: item.job.spec.settings.target.group.clone(),
                            jobs: Default::default(),
                        });
                        seen.jobs
                            .insert(format!("{}/{}", item.job.spec.app, item.job.spec.name));
                        holds.push((item.run.id, item.run.attempt));
                    }
                    RunState::Dispatched => {
                        self.timed_out(item, Missed::Ack, now, report, &mut advances, &mut dead)
                            .await?
                    }
                    RunState::Acked => {
                        self.timed_out(item, Missed::Run, now, report, &mut advances, &mut dead)
                            .await?
                    }
                    // A failed run's backoff elapsed: publish the next attempt.
                    RunState::Failed => advances.push(Advance {
                        item,
                        record: None,
                        counted: Counted::Retry,
                    }),
                    RunState::Dead => dead.push(item),
                    RunState::Succeeded => {}
                }
            }
            let mut publish = missed::judge(self.store.as_ref(), missed, now, grace).await?;
            publish.extend(self.unanswered(maybe_published, &mut ack_deadline).await?);
            for item in publish {
                metrics::counter!(telemetry::REPUBLISHES, "reason" => reason).increment(1);
                self.dispatch.resubmit([item.job.task_message(&item.run)]);
                report.count_republished(reason);
            }
            self.advance(advances, now, report).await?;
            if !holds.is_empty() {
                let held = self.store.await_consumer(&holds, now).await?.len();
                metrics::counter!(telemetry::REPUBLISHES_WITHHELD, "reason" => "no_consumer")
                    .increment(held as u64);
                report.waiting_for_consumer += held;
            }
            report.dead_lettered += dead_letters::publish(
                self.store.as_ref(),
                &self.publisher,
                self.ownership.node(),
                dead,
            )
            .await?;
            if report.republished() + report.killed + report.waiting_for_consumer > 0 {
                info!(
                    examined = report.examined,
                    waiting_for_consumer = report.waiting_for_consumer,
                    republished = report.republished(),
                    awaiting_mark = report.awaiting_mark,
                    awaiting_replies = report.awaiting_replies,
                    dead = report.killed,
                    reasons = %report.republish_reasons(),
                    "reconciled overdue runs"
                );
            }
            // A start, takeover or first-probe pass walks every page (the cursor steps
            // past re-published `scheduled` runs, which stay overdue until confirmed). A
            // periodic pass goes on only while its pages handed nothing to the dispatcher
            // (republished or next attempt) and left nothing waiting for a mark or a
            // reply: it leaves the rest to the next pass, so an outage is not re-read
            // every second and at most a page a second goes out again.
            let moved_on = (
                report.republished(),
                report.awaiting_mark,
                report.awaiting_replies,
            ) == before;
            let walk_all = kind != PassKind::Periodic;
            if count < PASS_LIMIT as usize || cursor.is_none() || !(walk_all || moved_on) {
                return Ok(());
            }
        }
    }

    /// Of the previous owner's `scheduled` runs whose fire time has passed (found by a
    /// takeover or start pass), those still `scheduled` after waiting up to
    /// the `takeover_ack_wait` setting for their acks: a task the dead node published reaches a
    /// live consumer within milliseconds, and its ack makes the run `acked`; publishing
    /// it again would hand a second copy to another instance, whose idempotency store
    /// (in memory by default) may not know it. Those answered meanwhile are counted in
    /// `chime_republishes_withheld_total{reason="takeover_answered"}`.
    ///
    /// The wait ends at `deadline`, which the pass's first page to wait sets; later pages
    /// wait only for what is left of it, so a takeover of many pages waits
    /// `takeover_ack_wait` once, not once per page.
    async fn unanswered(
        &self,
        items: Vec<OverdueRun>,
        deadline: &mut Option<tokio::time::Instant>,
    ) -> Result<Vec<OverdueRun>, StoreError> {
        if items.is_empty() || self.settings.takeover_ack_wait.is_zero() {
            return Ok(items);
        }
        let ids: Vec<uuid::Uuid> = items.iter().map(|i| i.run.id).collect();
        let deadline = takeover_deadline(
            deadline,
            tokio::time::Instant::now(),
            self.settings.takeover_ack_wait,
        );
        let mut still = self.store.scheduled_runs(&ids).await?;
        while !still.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(
                TAKEOVER_ACK_POLL
                    .min(deadline.saturating_duration_since(tokio::time::Instant::now())),
            )
            .await;
            let left: Vec<uuid::Uuid> = still.iter().copied().collect();
            still = self.store.scheduled_runs(&left).await?;
        }
        let answered = items.len() - still.len();
        if answered > 0 {
            metrics::counter!(telemetry::REPUBLISHES_WITHHELD, "reason" => "takeover_answered")
                .increment(answered as u64);
            info!(
                answered,
                left = still.len(),
                "runs taken over were answered while waiting; not publishing them again"
            );
        }
        Ok(items
            .into_iter()
            .filter(|i| still.contains(&i.run.id))
            .collect())
    }

    /// Whether `item`'s work queue is known to have no consumer (a broadcast run has no
    /// work queue: see [`consumers`]).
    async fn nobody_consumes(&self, item: &OverdueRun) -> bool {
        match run_queue(item) {
            Some(queue) => self.consumers.has_none(&queue).await,
            None => false,
        }
    }

    /// A run missed its ack or run deadline: the next attempt (added to `advances`), or
    /// `dead`.
    async fn timed_out(
        &self,
        mut item: OverdueRun,
        missed: Missed,
        now: DateTime<Utc>,
        report: &mut PassReport,
        advances: &mut Vec<Advance>,
        dead: &mut Vec<OverdueRun>,
    ) -> Result<(), StoreError> {
        let run = &item.run;
        let limit = match missed {
            Missed::Ack => run.ack_timeout,
            Missed::Run => run.run_timeout,
        };
        let expect = Expect::exactly(run.state, run.attempt);
        let verdict = after_timeout(
            missed,
            run.attempt,
            limit,
            run.consumer.as_deref(),
            item.job.spec.settings.max_attempts,
            now,
        );
        match verdict {
            TimeoutVerdict::Republish { record } => advances.push(Advance {
                item,
                record: Some(record),
                counted: Counted::Republish(missed.event()),
            }),
            TimeoutVerdict::Dead { reason, record } => {
                if self
                    .store
                    .kill_run(run.id, expect, &reason, Some(&record), false, now)
                    .await?
                {
                    warn!(run_id = %run.id, job = %item.job.spec.name, %reason, "run given up");
                    metrics::counter!(telemetry::DEAD_RUNS, "reason" => missed.event())
                        .increment(1);
                    item.run.state = RunState::Dead;
                    item.run.error = Some(reason);
                    item.run.history.push(record);
                    report.killed += 1;
                    dead.push(item);
                }
            }
        }
        Ok(())
    }

    /// A broadcast run's ack window closed or a running instance's deadline passed:
    /// decide it from the instances' receipts (see [`crate::domain::broadcast`]).
    async fn settle_broadcast(
        &self,
        item: OverdueRun,
        now: DateTime<Utc>,
        report: &mut PassReport,
        dead: &mut Vec<OverdueRun>,
    ) -> Result<(), StoreError> {
        let Some(run) = self.store.settle_broadcast(item.run.id, now).await? else {
            return Ok(());
        };
        match run.state {
            RunState::Dead => {
                warn!(run_id = %run.id, job = %item.job.spec.name, error = ?run.error, "broadcast run given up");
                metrics::counter!(telemetry::DEAD_RUNS, "reason" => "broadcast").increment(1);
                report.killed += 1;
                dead.push(OverdueRun { run, job: item.job });
            }
            RunState::Failed => metrics::counter!(telemetry::RETRIES_SCHEDULED).increment(1),
            _ => {}
        }
        Ok(())
    }

    /// Moves `advances` to their next attempt in one store call and publishes those
    /// still as they were read (a reply that arrived meanwhile wins).
    async fn advance(
        &self,
        advances: Vec<Advance>,
        now: DateTime<Utc>,
        report: &mut PassReport,
    ) -> Result<(), StoreError> {
        let runs: Vec<NextAttempt<'_>> = advances
            .iter()
            .map(|a| NextAttempt {
                run_id: a.item.run.id,
                expect: Expect::exactly(a.item.run.state, a.item.run.attempt),
                record: a.record.as_ref(),
            })
            .collect();
        let moved = self.store.next_attempts(&runs, now).await?;
        let mut tasks = Vec::with_capacity(moved.len());
        for Advance {
            mut item, counted, ..
        } in advances
        {
            if !moved.contains(&item.run.id) {
                continue;
            }
            match counted {
                Counted::Republish(reason) => {
                    metrics::counter!(telemetry::REPUBLISHES, "reason" => reason).increment(1);
                    report.count_republished(reason);
                }
                Counted::Retry => {
                    metrics::counter!(telemetry::RETRIES).increment(1);
                    report.count_republished("retry");
                }
            }
            item.run.attempt += 1;
            tasks.push(item.job.task_message(&item.run));
        }
        self.dispatch.resubmit(tasks);
        Ok(())
    }

    /// Runs a pass at once (taking everything a previous process left), another as
    /// soon as the collector's first probe is back, then every `interval` until
    /// `cancel` fires; on gaining shards, passes over them at once.
    pub async fn run(self, cancel: CancellationToken) {
        let mut leases = self.ownership.subscribe();
        let mut known: BTreeSet<u32> = BTreeSet::new();
        let mut started = false;
        let mut probe_seen = false;
        let mut first_probe_pass = false;
        let mut next_pass = tokio::time::Instant::now();
        loop {
            let held: BTreeSet<u32> = self.ownership.current().shards().collect();
            let gained: Vec<u32> = held.difference(&known).copied().collect();
            known = held;
            if !gained.is_empty() && started {
                // The previous owner may have recorded runs it never got confirmed.
                let shards = self.ownership.shard_filter().map(|_| gained.clone());
                if !self.report(
                    self.pass(PassKind::Takeover, shards.as_deref(), Utc::now())
                        .await,
                ) {
                    // Taken over again at the next wake-up, armed runs included.
                    for shard in &gained {
                        known.remove(shard);
                    }
                }
            }
            if tokio::time::Instant::now() >= next_pass || first_probe_pass {
                // The first pass takes over what a previous process left.
                let shards = self.ownership.shard_filter();
                let kind = match (started, first_probe_pass) {
                    (false, _) => PassKind::Start,
                    (true, true) => PassKind::FirstProbe,
                    (true, false) => PassKind::Periodic,
                };
                first_probe_pass = false;
                // A failed first pass is repeated as a first pass.
                started |= self.report(self.pass(kind, shards.as_deref(), Utc::now()).await);
                next_pass = tokio::time::Instant::now() + self.settings.interval;
            }
            tokio::select! {
                () = cancel.cancelled() => {
                    self.publisher.close().await;
                    self.consumers.close().await;
                    return;
                }
                () = tokio::time::sleep_until(next_pass) => {}
                Ok(()) = leases.changed() => {}
                // The first pass ran before the collector knew how far it had read, and
                // judged no deadline: judge them now rather than an interval later.
                () = self.replies.first_probe(), if !probe_seen => {
                    probe_seen = true;
                    first_probe_pass = true;
                }
            }
        }
    }

    /// Logs and counts a failed pass; returns whether the pass succeeded.
    fn report(&self, result: Result<PassReport, StoreError>) -> bool {
        if let Err(error) = &result {
            warn!(%error, "reconciler pass failed");
            metrics::counter!(telemetry::STORE_ERRORS, "operation" => "reconcile").increment(1);
        }
        result.is_ok()
    }
}

/// The work queue that holds `item`'s task (None for a broadcast run).
fn run_queue(item: &OverdueRun) -> Option<String> {
    let group = &item.job.spec.settings.target.group;
    match (item.run.mode, item.run.zone.as_deref()) {
        (DeliveryMode::Broadcast, _) => None,
        (DeliveryMode::Zone, Some(zone)) => Some(topology::zone_queue(group, zone)),
        _ => Some(topology::group_queue(group)),
    }
}

#[cfg(test)]
mod tests;
