//! The [`Reconciler`] service: its loop ([`Reconciler::run`]: a start pass, a pass on
//! gaining shards, one after the collector's first probe, then one every `interval`) and
//! one pass ([`Reconciler::run_once`]), which walks the overdue runs page by page and
//! sorts each into what is done with it; the steps live beside it ([`super::attempts`],
//! [`super::broadcasts`], [`super::takeover`], [`super::missed`],
//! [`super::dead_letters`], [`super::consumers`]).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{
    attempts::{self, Advance},
    broadcasts,
    consumers::{self, ConsumerWatch, Waiting},
    dead_letters, missed,
    report::PassReport,
    settings::{PassKind, ReconcileSettings, unconfirmed_cutoff},
    takeover,
};
use crate::{
    broker::ConfirmedPublisher,
    cluster::Ownership,
    dispatch::DispatchHandle,
    domain::{DeliveryMode, RunState, retry::Missed},
    results::ReplyProgress,
    store::{Store, StoreError},
    telemetry,
};

/// Most runs examined per page.
const PASS_LIMIT: u32 = 1000;

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
    /// [`unconfirmed_cutoff`]). A pass of several pages judges each page as of
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
            // Not in a start-up or takeover pass: there a released fire whose time is
            // long past would be judged by the misfire policy as if left behind.
            let release = matches!(kind, PassKind::Periodic | PassKind::FirstProbe);
            match self.release_held(release, now, &mut report).await {
                Ok(()) => {
                    self.walk(kind, shards, now, unconfirmed, &mut waiting, &mut report)
                        .await
                }
                Err(e) => Err(e),
            }
        };
        self.consumers.after_pass(waiting).await;
        result.map(|()| report)
    }

    /// Releases (if `release`) the held `buffer_one` fires whose job's previous run
    /// finished, already as overdue as a `scheduled` run the pass re-publishes (whatever
    /// node holds the job's shard publishes it; releasing is idempotent, so every node
    /// may do it).
    async fn release_held(
        &self,
        release: bool,
        now: DateTime<Utc>,
        report: &mut PassReport,
    ) -> Result<(), StoreError> {
        if !release {
            return Ok(());
        }
        let republish_after = chrono::Duration::from_std(self.settings.republish_after)
            .unwrap_or_else(|_| chrono::Duration::zero());
        let due_at = now - republish_after - chrono::Duration::milliseconds(1);
        let released = self.store.release_held(due_at).await? as usize;
        if released > 0 {
            metrics::counter!(telemetry::HELD_RELEASED).increment(released as u64);
            debug!(released, "released held buffer_one fires");
        }
        report.released += released;
        Ok(())
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
                    broadcasts::settle_overdue(
                        self.store.as_ref(),
                        item,
                        judged_until,
                        report,
                        &mut dead,
                    )
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
                            && item.job.due_time(item.run.fire_time, item.run.trigger) <= now =>
                    {
                        maybe_published.push(item)
                    }
                    RunState::Scheduled => {
                        metrics::counter!(telemetry::REPUBLISHES, "reason" => reason).increment(1);
                        self.dispatch.resubmit([item.job.due_task(&item.run)]);
                        report.count_republished(reason);
                    }
                    RunState::Dispatched if self.consumers.nobody_consumes(&item).await => {
                        let queue = consumers::run_queue(&item).unwrap_or_default();
                        let seen = waiting.entry(queue).or_insert_with(|| Waiting {
                            group: item.job.spec.settings.target.group.clone(),
                            jobs: Default::default(),
                        });
                        seen.jobs
                            .insert(format!("{}/{}", item.job.spec.app, item.job.spec.name));
                        holds.push((item.run.id, item.run.attempt));
                    }
                    RunState::Dispatched => {
                        attempts::timed_out(
                            self.store.as_ref(),
                            item,
                            Missed::Ack,
                            now,
                            report,
                            &mut advances,
                            &mut dead,
                        )
                        .await?
                    }
                    RunState::Acked => {
                        attempts::timed_out(
                            self.store.as_ref(),
                            item,
                            Missed::Run,
                            now,
                            report,
                            &mut advances,
                            &mut dead,
                        )
                        .await?
                    }
                    // A failed run's backoff elapsed: publish the next attempt.
                    RunState::Failed => advances.push(Advance::retry(item)),
                    RunState::Dead => dead.push(item),
                    // Finished: nothing is due (a cancelled run has no `due_at`; one read
                    // just before it was cancelled is left alone).
                    RunState::Succeeded | RunState::Cancelled => {}
                }
            }
            let mut publish = missed::judge(self.store.as_ref(), missed, now, grace).await?;
            publish.extend(
                takeover::unanswered(
                    self.store.as_ref(),
                    self.settings.takeover_ack_wait,
                    maybe_published,
                    &mut ack_deadline,
                )
                .await?,
            );
            for item in publish {
                metrics::counter!(telemetry::REPUBLISHES, "reason" => reason).increment(1);
                self.dispatch.resubmit([item.job.due_task(&item.run)]);
                report.count_republished(reason);
            }
            attempts::advance(self.store.as_ref(), &self.dispatch, advances, now, report).await?;
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
