//! One pipelined batch: withdraw tasks that went stale while waiting, declare new groups,
//! publish every task, await all confirms, then record the outcome of each.

use std::{collections::HashSet, time::Duration};

use chrono::Utc;
use futures_util::future::{join, join_all};
use lapin::{BasicProperties, Channel, Confirmation, options::BasicPublishOptions};
use tracing::{error, warn};
use uuid::Uuid;

use chime_consumer::protocol::topology;

use super::{CONFIRM_TIMEOUT, Dispatcher, MAX_BATCH, Outgoing};
use crate::telemetry;

/// A task that waited in memory longer than this is checked against the store before it
/// is published: its job may have been deleted, or the reconciler's copy may be of a run
/// already confirmed.
const RECHECK_AFTER: Duration = Duration::from_secs(1);

/// Why a batch stopped early, and which of its tasks go back to the queue.
pub(super) struct Broken {
    pub(super) reason: String,
    pub(super) retry: HashSet<Uuid>,
}

impl Dispatcher {
    /// Publishes up to [`MAX_BATCH`] pending tasks. Err means the channel is unusable; the
    /// tasks not confirmed are back at the front of `pending`.
    pub(super) async fn publish_next_batch(&mut self, channel: &Channel) -> Result<(), String> {
        let take = self.pending.len().min(MAX_BATCH);
        let batch: Vec<Outgoing> = self.pending.drain(..take).collect();
        let batch = self.drop_unowned(batch);
        let mut batch = self.withdraw_stale(batch).await;
        let result = self.publish(channel, &mut batch).await;
        let retry = match &result {
            Ok(()) => HashSet::new(),
            Err(broken) => broken.retry.clone(),
        };
        for outgoing in batch.into_iter().rev() {
            if retry.contains(&outgoing.task.task_id) {
                self.pending.push_front(outgoing);
            } else {
                self.queued.remove(&outgoing.task.task_id);
            }
        }
        metrics::gauge!(telemetry::DISPATCH_PENDING).set(self.pending.len() as f64);
        result.map_err(|broken| broken.reason)
    }

    /// Drops fenced tasks whose shard lease this node no longer trusts; their runs stay
    /// `scheduled` for the shard's owner to publish.
    fn drop_unowned(&mut self, batch: Vec<Outgoing>) -> Vec<Outgoing> {
        let leases = self.ownership.current();
        let now = std::time::Instant::now();
        let (keep, unowned): (Vec<_>, Vec<_>) = batch
            .into_iter()
            .partition(|o| !o.fenced || leases.trusts(self.ownership.shard_of(o.task.job_id), now));
        if !unowned.is_empty() {
            warn!(
                tasks = unowned.len(),
                "not publishing tasks of shards this node no longer trusts"
            );
            metrics::counter!(telemetry::DISPATCH_UNOWNED).increment(unowned.len() as u64);
            for outgoing in &unowned {
                self.queued.remove(&outgoing.task.task_id);
            }
        }
        keep
    }

    /// Drops tasks whose runs are no longer `scheduled` (confirmed meanwhile, or their job
    /// deleted). Only tasks that waited, or came from the reconciler, are checked, so the
    /// fresh fires of the hot path cost no extra query.
    async fn withdraw_stale(&mut self, batch: Vec<Outgoing>) -> Vec<Outgoing> {
        let suspect: Vec<Uuid> = batch
            .iter()
            .filter(|o| !o.first || o.since.elapsed() > RECHECK_AFTER)
            .map(|o| o.task.task_id)
            .collect();
        if suspect.is_empty() {
            return batch;
        }
        let still = match self.store.scheduled_runs(&suspect).await {
            Ok(still) => still,
            Err(error) => {
                // Publishing anyway is safe: at worst a duplicate, absorbed by idempotency.
                warn!(%error, "cannot check waiting tasks against the store; publishing them");
                return batch;
            }
        };
        let suspect: HashSet<Uuid> = suspect.into_iter().collect();
        let (keep, stale): (Vec<_>, Vec<_>) = batch
            .into_iter()
            .partition(|o| !suspect.contains(&o.task.task_id) || still.contains(&o.task.task_id));
        for outgoing in &stale {
            self.queued.remove(&outgoing.task.task_id);
        }
        if !stale.is_empty() {
            metrics::counter!(telemetry::DISPATCH_WITHDRAWN).increment(stale.len() as u64);
        }
        keep
    }

    async fn publish(&mut self, channel: &Channel, batch: &mut [Outgoing]) -> Result<(), Broken> {
        self.declare_groups(channel, batch).await?;
        let published_at = Utc::now();
        for outgoing in batch.iter_mut() {
            outgoing.task.published_at = published_at;
        }
        let batch = &*batch;
        let mut confirms = Vec::with_capacity(batch.len());
        let mut copies = Vec::with_capacity(batch.len());
        let mut sent = Vec::with_capacity(batch.len());
        let leases = self.ownership.current();
        for outgoing in batch {
            let task = &outgoing.task;
            // Checked again per task, right before it goes out: a node frozen in the
            // middle of a batch must not wake up and publish for shards it lost.
            if outgoing.fenced
                && !leases.trusts(
                    self.ownership.shard_of(task.job_id),
                    std::time::Instant::now(),
                )
            {
                metrics::counter!(telemetry::DISPATCH_UNOWNED).increment(1);
                continue;
            }
            sent.push(outgoing);
            let body = task.to_vec();
            let properties = BasicProperties::default()
                .with_content_type("application/json".into())
                .with_delivery_mode(2)
                .with_message_id(task.task_id.to_string().into())
                .with_timestamp(published_at.timestamp() as u64)
                .with_app_id(self.ownership.node().into());
            let (exchange, routing_key) = topology::task_route(task);
            let confirm = channel
                .basic_publish(
                    exchange.into(),
                    routing_key.as_str().into(),
                    BasicPublishOptions {
                        mandatory: topology::task_is_mandatory(task),
                        ..BasicPublishOptions::default()
                    },
                    &body,
                    properties.clone(),
                )
                .await
                .map_err(|e| Broken {
                    reason: format!("publishing: {e}"),
                    retry: ids(batch),
                })?;
            confirms.push(confirm);
            // The publish/subscribe copy for observers: never mandatory (no observer is
            // normal), and its fate never touches the run.
            let copy = channel
                .basic_publish(
                    topology::TOPIC_EXCHANGE.into(),
                    topology::topic_routing_key(&task.app, &task.job)
                        .as_str()
                        .into(),
                    BasicPublishOptions::default(),
                    &body,
                    properties,
                )
                .await
                .map_err(|e| Broken {
                    reason: format!("publishing: {e}"),
                    retry: ids(batch),
                })?;
            copies.push(copy);
        }
        let (outcomes, copied) =
            tokio::time::timeout(CONFIRM_TIMEOUT, join(join_all(confirms), join_all(copies)))
                .await
                .map_err(|_| Broken {
                    reason: format!("no confirms within {CONFIRM_TIMEOUT:?}"),
                    retry: ids(batch),
                })?;
        let lost_copies = copied
            .iter()
            .filter(|c| !matches!(c, Ok(Confirmation::Ack(None))))
            .count();
        if lost_copies > 0 {
            warn!(
                copies = lost_copies,
                "the broker did not confirm some observer copies"
            );
            metrics::counter!(telemetry::TOPIC_COPIES_LOST).increment(lost_copies as u64);
        }

        let mut confirmed = Vec::with_capacity(batch.len());
        let mut broken: Option<Broken> = None;
        for (outgoing, outcome) in sent.into_iter().zip(outcomes) {
            let task = &outgoing.task;
            match outcome {
                Ok(Confirmation::Ack(None)) | Ok(Confirmation::NotRequested) => {
                    confirmed.push(task.task_id);
                    metrics::counter!(telemetry::PUBLISHES, "outcome" => "confirmed").increment(1);
                    if outgoing.first {
                        let lateness = (published_at - task.fire_time)
                            .num_microseconds()
                            .unwrap_or(0);
                        metrics::histogram!(telemetry::FIRE_LATENESS)
                            .record(lateness.max(0) as f64 / 1e6);
                    }
                }
                Ok(Confirmation::Ack(Some(returned))) => {
                    let queue = topology::task_queue(task).unwrap_or_default();
                    let reason = format!(
                        "unroutable: {} (queue {queue:?} is not bound)",
                        returned.reply_text
                    );
                    warn!(run_id = %task.task_id, %queue, "task unroutable; will publish again");
                    metrics::counter!(telemetry::PUBLISHES, "outcome" => "unroutable").increment(1);
                    // Someone deleted the queue: declare it again before the next publish.
                    self.declared.remove(&destination(task));
                    self.note_failure(task.task_id, &reason).await;
                }
                Ok(Confirmation::Nack(_)) => {
                    warn!(run_id = %task.task_id, "broker nacked the task; will publish again");
                    metrics::counter!(telemetry::PUBLISHES, "outcome" => "nacked").increment(1);
                    self.note_failure(task.task_id, "nacked by the broker")
                        .await;
                }
                Err(error) => {
                    metrics::counter!(telemetry::PUBLISHES, "outcome" => "failed").increment(1);
                    let broken = broken.get_or_insert_with(|| Broken {
                        reason: error.to_string(),
                        retry: HashSet::new(),
                    });
                    broken.retry.insert(task.task_id);
                }
            }
        }
        if !confirmed.is_empty()
            && let Err(error) = self.store.mark_dispatched(&confirmed, Utc::now()).await
        {
            // The tasks are out; the reconciler will publish them again (at least once).
            error!(%error, runs = confirmed.len(), "could not mark runs dispatched");
            metrics::counter!(telemetry::STORE_ERRORS, "operation" => "mark_dispatched")
                .increment(1);
        }
        broken.map_or(Ok(()), Err)
    }

    /// Declares the destinations (work queues, see [`topology::declare_task_destination`])
    /// of `batch` not yet declared on this channel. A declaration the broker refuses (a
    /// queue of that name exists with other arguments) closes the channel: that
    /// destination's tasks are noted and left to the reconciler, the others go back to
    /// the queue for the next channel.
    async fn declare_groups(
        &mut self,
        channel: &Channel,
        batch: &[Outgoing],
    ) -> Result<(), Broken> {
        for outgoing in batch {
            let task = &outgoing.task;
            let key = destination(task);
            if self.declared.contains(&key) {
                continue;
            }
            let declared = match topology::declare_task_destination(channel, task).await {
                // The scheduler learns from these notices which tasks the broker
                // dead-lettered (delivery limit reached); every queue of a group
                // dead-letters into the group's dead-letter queue.
                Ok(()) => topology::declare_dead_letter_notices(channel, Some(&task.group)).await,
                Err(e) => Err(e),
            };
            if let Err(e) = declared {
                let reason = format!("cannot declare the destination {key:?}: {e}");
                error!(destination = %key, error = %e, "cannot declare a task destination; its tasks wait");
                let mut retry = HashSet::new();
                for o in batch {
                    if destination(&o.task) == key {
                        self.note_failure(o.task.task_id, &reason).await;
                    } else {
                        retry.insert(o.task.task_id);
                    }
                }
                return Err(Broken { reason, retry });
            }
            self.declared.insert(key);
        }
        Ok(())
    }

    async fn note_failure(&self, run_id: Uuid, reason: &str) {
        if let Err(error) = self.store.note_publish_failure(run_id, reason).await {
            error!(%error, %run_id, "could not note a publish failure");
            metrics::counter!(telemetry::STORE_ERRORS, "operation" => "note_publish_failure")
                .increment(1);
        }
    }
}

/// What a task is published into: its work queue, or for a broadcast the group's
/// broadcast route.
fn destination(task: &chime_consumer::protocol::TaskMessage) -> String {
    topology::task_queue(task).unwrap_or_else(|| format!("broadcast:{}", task.group))
}

fn ids(batch: &[Outgoing]) -> HashSet<Uuid> {
    batch.iter().map(|o| o.task.task_id).collect()
}
