//! One pipelined batch: withdraw tasks that went stale while waiting, declare new groups,
//! publish every task, and hand back the future of its confirms ([`InFlight`]); once
//! they arrive, [`Publishing::settle`] records the outcome of each. [`Publishing`] is the
//! state this needs (what is queued or in flight, the destinations declared or refused,
//! the marker); the dispatcher owns it and hands it each batch.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    pin::Pin,
    sync::Arc,
    time::Duration,
};

use chrono::{DateTime, Utc};
use futures_util::future::{join, join_all};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, PublisherConfirm,
    options::BasicPublishOptions,
};
use tracing::{error, warn};
use uuid::Uuid;

use chime_consumer::protocol::{TaskMessage, topology};

use super::{
    marker::{Marker, Unpublishable},
    observed::ObservedTopics,
    outgoing::Outgoing,
};
use crate::{broker, cluster::Ownership, store::Store, telemetry};

/// How long a batch's confirms may take before the channel is considered broken.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(15);

/// A fresh fire that waited in memory longer than this (a long broker outage) is checked
/// against the store before it is published, whatever else was heard meanwhile. The
/// changes that make a waiting fire stale reach the dispatcher as they happen (a change
/// on this node, another node's notice, or word that notices were missed), so a wait
/// alone is only a last resort. It is far longer than a herd takes to drain: checked
/// after one second, most of a 100 000-job herd was read back in parts of 100 on the
/// publishing path, and that alone held the herd to about 74 % of the broker's ceiling.
const RECHECK_AFTER: Duration = Duration::from_secs(30);

/// How long a destination the broker refused to declare is not asked again: its tasks
/// are given up at once meanwhile.
const REFUSAL_MEMORY: Duration = Duration::from_secs(30);

/// Why a batch stopped early, and which of its tasks go back to the queue.
pub(super) struct Broken {
    pub(super) reason: String,
    pub(super) retry: Vec<Outgoing>,
}

type Confirms = Vec<Result<Confirmation, lapin::Error>>;

/// A published batch whose confirms are on their way.
pub(super) type InFlight = Pin<Box<dyn Future<Output = Confirmed> + Send>>;

/// A published batch with its confirms (or the timeout that ended the wait).
pub(super) struct Confirmed {
    sent: Vec<Outgoing>,
    published_at: DateTime<Utc>,
    outcomes: Result<(Confirms, Confirms), tokio::time::error::Elapsed>,
}

/// What publishing batches needs of the dispatcher's state.
pub(super) struct Publishing {
    pub(super) store: Arc<dyn Store>,
    ownership: Ownership,
    /// Ids pending, held or in flight, so a re-submission is not published twice.
    pub(super) queued: HashSet<Uuid>,
    /// Tasks published and awaiting their confirms.
    pub(super) in_flight: usize,
    /// Groups declared on the current connection.
    pub(super) declared: HashSet<String>,
    /// Destinations the broker refused to declare, when, and why (see
    /// [`REFUSAL_MEMORY`]).
    refused: HashMap<String, (std::time::Instant, String)>,
    /// Writes publish outcomes to the store (set while running).
    pub(super) marker: Option<Marker>,
    /// The `user_id` stamped on tasks: the connection's user, when the URL tells it.
    user_id: Option<String>,
    /// Which tasks get an observer copy.
    observed: ObservedTopics,
}

impl Publishing {
    /// Nothing queued, in flight or declared yet.
    pub(super) fn new(
        store: Arc<dyn Store>,
        ownership: Ownership,
        observed: ObservedTopics,
        user_id: Option<String>,
    ) -> Self {
        Self {
            user_id,
            store,
            ownership,
            queued: HashSet::new(),
            in_flight: 0,
            declared: HashSet::new(),
            refused: HashMap::new(),
            marker: None,
            observed,
        }
    }

    /// Publishes `batch` (due tasks free to go out) without waiting for their confirms.
    /// None if every task was withdrawn; Err means the channel is unusable (the batch's
    /// tasks are in the error, to go back to the queue).
    pub(super) async fn publish_batch(
        &mut self,
        connection: &Connection,
        channel: &Channel,
        batch: Vec<Outgoing>,
    ) -> Result<Option<InFlight>, Broken> {
        let batch = self.drop_unowned(batch);
        let batch = self.withdraw_stale(batch).await;
        let batch = self.refuse_unpublishable(batch);
        if batch.is_empty() {
            return Ok(None);
        }
        let in_flight = self.publish(connection, channel, batch).await?;
        Ok(Some(in_flight))
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

    /// Drops tasks whose runs are no longer `scheduled` (confirmed meanwhile, withdrawn
    /// by a job change, or their job deleted). Only tasks that came from the reconciler,
    /// whose job changed (or may have) while they waited, or that waited very long are
    /// checked, so the fresh fires of the hot path cost no extra query.
    async fn withdraw_stale(&mut self, batch: Vec<Outgoing>) -> Vec<Outgoing> {
        let suspect: Vec<Uuid> = batch
            .iter()
            .filter(|o| !o.first || o.recheck || o.since.elapsed() > RECHECK_AFTER)
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
        let suspect: std::collections::HashSet<Uuid> = suspect.into_iter().collect();
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

    /// Gives up tasks that can never be published (a derived broker name over 255
    /// bytes, or an invalid one: a job written into the store around the API's checks),
    /// so one bad run never breaks the channel, or the process, for the others.
    fn refuse_unpublishable(&mut self, batch: Vec<Outgoing>) -> Vec<Outgoing> {
        let now = std::time::Instant::now();
        self.refused
            .retain(|_, (at, _)| now.duration_since(*at) < REFUSAL_MEMORY);
        let mut publishable = Vec::with_capacity(batch.len());
        for outgoing in batch {
            if let Err(error) = topology::check_task(&outgoing.task) {
                let reason = format!("cannot publish: {error}");
                self.give_up(&outgoing.task, error.reason(), reason);
            } else if let Some((_, reason)) = self.refused_destination(&outgoing.task) {
                let reason = reason.clone();
                self.give_up(&outgoing.task, "destination_refused", reason);
            } else {
                publishable.push(outgoing);
            }
        }
        publishable
    }

    /// Why `task`'s destination was refused lately, if it was. Most of the time nothing
    /// was, and the destination's name (an allocation per task) is not even built.
    fn refused_destination(&self, task: &TaskMessage) -> Option<&(std::time::Instant, String)> {
        if self.refused.is_empty() {
            return None;
        }
        self.refused.get(&destination(task))
    }

    /// Gives up `task`'s run: it can never be published, for `reason` (`label` in the
    /// metric).
    fn give_up(&mut self, task: &TaskMessage, label: &'static str, reason: String) {
        warn!(run_id = %task.task_id, job_id = %task.job_id, group = %task.group, %reason,
            "giving up a run whose task cannot be published");
        metrics::counter!(telemetry::RUNS_UNPUBLISHABLE, "reason" => label).increment(1);
        self.queued.remove(&task.task_id);
        self.marker().unpublishable(Unpublishable {
            run: task.task_id,
            attempt: task.attempt,
            reason,
        });
    }

    async fn publish(
        &mut self,
        connection: &Connection,
        channel: &Channel,
        mut batch: Vec<Outgoing>,
    ) -> Result<InFlight, Broken> {
        batch = self.declare_groups(connection, channel, batch).await?;
        let published_at = Utc::now();
        let leases = self.ownership.current();
        let mut messages = Vec::with_capacity(batch.len());
        let mut going = Vec::with_capacity(batch.len());
        for mut outgoing in batch {
            outgoing.task.published_at = published_at;
            let task = &outgoing.task;
            // Checked again per task, right before the batch goes out: a node frozen in
            // the middle of a batch must not wake up and publish for shards it lost.
            if outgoing.fenced
                && !leases.trusts(
                    self.ownership.shard_of(task.job_id),
                    std::time::Instant::now(),
                )
            {
                metrics::counter!(telemetry::DISPATCH_UNOWNED).increment(1);
                self.queued.remove(&task.task_id);
                continue;
            }
            messages.push(TaskPublish::of(
                task,
                published_at,
                self.ownership.node(),
                self.observed.wants_copy(&task.app, &task.job),
                self.user_id.as_deref(),
            ));
            going.push(outgoing);
        }
        // Every publish of the batch starts before any is awaited: lapin then writes the
        // batch's frames to the socket together, where awaiting each publish in turn
        // cost a hand-off to its I/O thread and a write per task.
        let published = join_all(messages.iter().map(|message| message.publish(channel))).await;
        let mut confirms = Vec::with_capacity(going.len());
        let mut copies = Vec::with_capacity(going.len());
        let mut failure = None;
        for (published, copied) in published {
            match (published, copied) {
                (Ok(confirm), copied) => {
                    confirms.push(confirm);
                    match copied {
                        Some(Ok(copy)) => copies.push(copy),
                        Some(Err(e)) => failure = failure.or(Some(e)),
                        None => {}
                    }
                }
                (Err(e), _) => failure = failure.or(Some(e)),
            }
        }
        if let Some(e) = failure {
            // Everything not yet confirmed goes back; what was published may go out
            // twice (absorbed by idempotency).
            return Err(Broken {
                reason: format!("publishing: {e}"),
                retry: going,
            });
        }
        let sent = going;
        self.in_flight += sent.len();
        Ok(Box::pin(async move {
            let outcomes =
                tokio::time::timeout(CONFIRM_TIMEOUT, join(join_all(confirms), join_all(copies)))
                    .await;
            Confirmed {
                sent,
                published_at,
                outcomes,
            }
        }))
    }

    /// Records a batch's confirms: confirmed runs are marked `dispatched`, refused ones
    /// noted (the reconciler publishes them again). Err if the channel broke; the
    /// unconfirmed tasks are in the error.
    pub(super) fn settle(&mut self, confirmed: Confirmed) -> Result<(), Broken> {
        let Confirmed {
            sent,
            published_at,
            outcomes,
        } = confirmed;
        self.in_flight -= sent.len();
        let (outcomes, copied) = match outcomes {
            Ok(outcomes) => outcomes,
            Err(_) => {
                return Err(Broken {
                    reason: format!("no confirms within {CONFIRM_TIMEOUT:?}"),
                    retry: sent,
                });
            }
        };
        metrics::counter!(telemetry::TOPIC_COPIES).increment(copied.len() as u64);
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

        let mut confirmed = Vec::with_capacity(sent.len());
        let mut broken: Option<Broken> = None;
        // Looked up once per batch: a labelled metric's lookup builds and hashes its key.
        let lateness_histogram = metrics::histogram!(telemetry::FIRE_LATENESS);
        for (outgoing, outcome) in sent.into_iter().zip(outcomes) {
            let task = &outgoing.task;
            let id = task.task_id;
            match outcome {
                Ok(Confirmation::Ack(None)) | Ok(Confirmation::NotRequested) => {
                    confirmed.push(id);
                    if outgoing.first {
                        // Judged against when it was due: a jittered fire is not late
                        // for its jitter.
                        let lateness = (published_at - outgoing.due)
                            .num_microseconds()
                            .unwrap_or(0);
                        lateness_histogram.record(lateness.max(0) as f64 / 1e6);
                    }
                }
                Ok(Confirmation::Ack(Some(returned))) => {
                    let queue = topology::task_queue(task).unwrap_or_default();
                    let reason = format!(
                        "unroutable: {} (queue {queue:?} is not bound)",
                        returned.reply_text
                    );
                    warn!(run_id = %id, %queue, "task unroutable; will publish again");
                    metrics::counter!(telemetry::PUBLISHES, "outcome" => "unroutable").increment(1);
                    // Someone deleted the queue: declare it again before the next publish.
                    self.declared.remove(&destination(task));
                    self.marker().failed(id, reason);
                }
                Ok(Confirmation::Nack(_)) => {
                    warn!(run_id = %id, "broker nacked the task; will publish again");
                    metrics::counter!(telemetry::PUBLISHES, "outcome" => "nacked").increment(1);
                    self.marker().failed(id, "nacked by the broker");
                }
                Err(error) => {
                    metrics::counter!(telemetry::PUBLISHES, "outcome" => "failed").increment(1);
                    let broken = broken.get_or_insert_with(|| Broken {
                        reason: error.to_string(),
                        retry: Vec::new(),
                    });
                    broken.retry.push(outgoing);
                    continue;
                }
            }
            self.queued.remove(&id);
        }
        if !confirmed.is_empty() {
            metrics::counter!(telemetry::PUBLISHES, "outcome" => "confirmed")
                .increment(confirmed.len() as u64);
        }
        self.marker().dispatched(confirmed, Utc::now());
        broken.map_or(Ok(()), Err)
    }

    fn marker(&self) -> &Marker {
        self.marker
            .as_ref()
            .expect("the marker runs while the dispatcher runs")
    }

    /// Declares the destinations (work queues, see [`topology::declare_task_destination`])
    /// of `batch` not yet declared on this channel. A declaration the broker refuses (a
    /// queue of that name exists with other arguments) closes the channel: that
    /// destination's tasks are noted and left to the reconciler, the others go back to
    /// the queue for the next channel.
    async fn declare_groups(
        &mut self,
        connection: &Connection,
        channel: &Channel,
        batch: Vec<Outgoing>,
    ) -> Result<Vec<Outgoing>, Broken> {
        let mut refused = None;
        for outgoing in &batch {
            let task = &outgoing.task;
            let key = destination(task);
            if self.declared.contains(&key) {
                continue;
            }
            let declared = match topology::declare_task_destination(connection, channel, task).await
            {
                // The scheduler learns from these notices which tasks the broker
                // dead-lettered (delivery limit reached); every queue of a group
                // dead-letters into the group's dead-letter queue.
                Ok(()) => topology::declare_dead_letter_notices(channel, Some(&task.group)).await,
                Err(e) => Err(e),
            };
            match declared {
                Ok(()) => {
                    self.declared.insert(key);
                }
                Err(e) => {
                    refused = Some((key, e));
                    break;
                }
            }
        }
        let Some((key, e)) = refused else {
            return Ok(batch);
        };
        let reason = format!("cannot declare the destination {key:?}: {e}");
        let (refused, retry): (Vec<_>, Vec<_>) =
            batch.into_iter().partition(|o| destination(&o.task) == key);
        if broker::is_refusal(&e) {
            // The broker refuses this destination itself (a queue of that name with other
            // arguments, no permission): publishing its tasks again would only break the
            // channel again, for every other task too. For a while its next tasks are
            // given up without asking again.
            warn!(destination = %key, error = %e, "the broker refuses a task destination; giving up its tasks");
            self.refused
                .insert(key.clone(), (std::time::Instant::now(), reason.clone()));
            for outgoing in refused {
                self.give_up(&outgoing.task, "destination_refused", reason.clone());
            }
        } else {
            error!(destination = %key, error = %e, "cannot declare a task destination; its tasks wait");
            for outgoing in refused {
                self.queued.remove(&outgoing.task.task_id);
                self.marker().failed(outgoing.task.task_id, reason.clone());
            }
        }
        Err(Broken { reason, retry })
    }
}

/// What a task is published into: its work queue, or for a broadcast the group's
/// broadcast route.
fn destination(task: &TaskMessage) -> String {
    topology::task_queue(task).unwrap_or_else(|| format!("broadcast:{}", task.group))
}

/// The routing key of `task`'s observer copy, if it fits; a copy that cannot be sent is
/// counted as lost and the task goes out without it.
fn copy_key(task: &TaskMessage) -> Option<String> {
    match topology::check_topic_key(&task.app, &task.job) {
        Ok(()) => Some(topology::topic_routing_key(&task.app, &task.job)),
        Err(error) => {
            warn!(run_id = %task.task_id, %error, "not sending an observer copy whose routing key cannot be used");
            metrics::counter!(telemetry::TOPIC_COPIES_LOST).increment(1);
            None
        }
    }
}

/// One task as it goes on the wire: its body, properties and route, and whether an
/// observer copy goes with it.
struct TaskPublish {
    body: Vec<u8>,
    properties: BasicProperties,
    exchange: &'static str,
    routing_key: String,
    mandatory: bool,
    copy_key: Option<String>,
}

impl TaskPublish {
    fn of(
        task: &TaskMessage,
        published_at: DateTime<Utc>,
        node: &str,
        copied: bool,
        user_id: Option<&str>,
    ) -> Self {
        let (exchange, routing_key) = topology::task_route(task);
        let mut properties = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_delivery_mode(2)
            .with_message_id(task.task_id.to_string().into())
            .with_timestamp(published_at.timestamp() as u64)
            .with_app_id(node.into());
        if let Some(user) = user_id {
            properties = properties.with_user_id(user.into());
        }
        Self {
            body: task.to_vec(),
            properties,
            exchange,
            routing_key,
            mandatory: topology::task_is_mandatory(task),
            copy_key: copied.then(|| copy_key(task)).flatten(),
        }
    }

    /// Publishes the task and then, only if the task went out, its observer copy: never
    /// mandatory, and its fate never touches the run.
    async fn publish(
        &self,
        channel: &Channel,
    ) -> (
        Result<PublisherConfirm, lapin::Error>,
        Option<Result<PublisherConfirm, lapin::Error>>,
    ) {
        let published = channel
            .basic_publish(
                self.exchange.into(),
                self.routing_key.as_str().into(),
                BasicPublishOptions {
                    mandatory: self.mandatory,
                    ..BasicPublishOptions::default()
                },
                &self.body,
                self.properties.clone(),
            )
            .await;
        let copied = match (&published, &self.copy_key) {
            (Ok(_), Some(key)) => Some(
                channel
                    .basic_publish(
                        topology::TOPIC_EXCHANGE.into(),
                        key.as_str().into(),
                        BasicPublishOptions::default(),
                        &self.body,
                        self.properties.clone(),
                    )
                    .await,
            ),
            _ => None,
        };
        (published, copied)
    }
}
