//! Dead-letter queues: what operators do with them (list, peek, replay, purge — the same
//! operations behind `chimectl dlq` and `/v1/dlq`), the notices consumer that marks runs
//! `dead` when RabbitMQ dead-letters their task ([`notices`]), and the sampler behind the
//! `chime_dlq_depth` and `chime_dlq_oldest_age_seconds` gauges (and, on the same broker
//! round, `chime_group_consumers`: each group's work queue's consumer count).
//!
//! The operations act only on the dead-letter queues Chime declared ([`DeadLetters::known`]):
//! those of the groups its jobs target, of the observers that registered, and
//! `chime.replies.dlq` — never on another queue whose name merely looks like one.
//!
//! Peeking takes messages with manual acknowledgement and closes the channel without
//! acknowledging them, so RabbitMQ puts every one back. A replay ([`replay`]) publishes
//! each message to the route Chime derives from its store, waits for the broker's confirm,
//! and only then removes the DLQ copy: a crash mid-replay leaves the copy in place (at
//! worst it is replayed twice, and the idempotency key absorbs the duplicate).

mod message;
pub mod notices;
mod replay;

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::Duration,
};

use chrono::Utc;
use lapin::{
    Channel, Connection,
    message::BasicGetMessage,
    options::{BasicGetOptions, QueueDeclareOptions, QueuePurgeOptions},
    types::FieldTable,
};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use chime_consumer::protocol::topology::{self, REPLY_QUEUE};

pub use crate::api::dto::{DlqMessage, DlqSummary, ReplayReport};
pub use replay::replay_run;

use crate::{
    broker::{self, ConfirmedPublisher, PublishError},
    domain::{
        Run, RunState,
        access::{Action, Caller, Denied},
    },
    store::{Store, StoreError},
    telemetry,
};

/// Messages read to tally the reasons of a queue in `dlq ls`.
const REASON_SAMPLE: usize = 100;
/// Most messages `peek` returns.
pub const MAX_PEEK: usize = 1000;

/// Why a DLQ operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DlqError {
    /// The caller may not do this.
    #[error(transparent)]
    Denied(#[from] Denied),
    /// The name is not one of the dead-letter queues Chime declared.
    #[error(
        "{0:?} is not one of Chime's dead-letter queues (those of its groups and observers, and chime.replies.dlq: see `chimectl dlq ls`)"
    )]
    NotADeadLetterQueue(String),
    /// The queue does not exist.
    #[error("dead-letter queue {0:?} does not exist")]
    NoSuchQueue(String),
    /// RabbitMQ failed or is unreachable.
    #[error("rabbitmq error: {0}")]
    Broker(#[from] lapin::Error),
    /// Publishing a replayed message failed.
    #[error("replay publish failed: {0}")]
    Publish(#[from] PublishError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Which of Chime's dead-letter queues a queue is; it decides where a replay publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DlqKind {
    /// A group's (`chime.group.<group>.dlq`): tasks go back to the route their run and job
    /// in the store give.
    Group,
    /// An observer's (`chime.observe.<name>.dlq`): copies go back to the observer's own
    /// queue, the one named.
    Observer(String),
    /// The reply queue's (`chime.replies.dlq`): replies go back to the reply queue.
    Replies,
}

/// The DLQ operations. Cheap to share.
pub struct DeadLetters {
    store: Arc<dyn Store>,
    amqp_url: String,
    publisher: ConfirmedPublisher,
    node: String,
    readers: QueueReaders,
}

/// One reader of a dead-letter queue at a time on this node. Reading a queue takes its
/// messages (`basic.get`) and holds them until the channel closes, so a second reader at
/// the same moment finds them gone: a replay racing a peek (a console polling the queue)
/// or the depth sampler replayed nothing, and a peek showed fewer messages than there are.
#[derive(Default)]
struct QueueReaders(std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl QueueReaders {
    /// Waits for `queue`'s turn; the turn lasts as long as the guard.
    async fn turn(&self, queue: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self
                .0
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            locks.entry(queue.to_string()).or_default().clone()
        };
        lock.lock_owned().await
    }
}

impl DeadLetters {
    /// Operations on the dead-letter queues of the broker at `amqp_url`; replays record
    /// their runs in `store` and are published as node `node`.
    pub fn new(
        store: Arc<dyn Store>,
        amqp_url: impl Into<String>,
        node: impl Into<String>,
    ) -> Self {
        let amqp_url = amqp_url.into();
        Self {
            store,
            publisher: ConfirmedPublisher::new(&amqp_url, "dlq"),
            amqp_url,
            node: node.into(),
            readers: QueueReaders::default(),
        }
    }

    /// Every dead-letter queue that exists: one per group some job targets, one per
    /// observer that registered, and the reply queue's; with depth, oldest age and (when `reasons`) the reasons of the oldest
    /// messages.
    /// A caller scoped to some apps gets depths and ages only: the reasons are sampled
    /// from every app's messages.
    pub async fn list(&self, caller: &Caller, reasons: bool) -> Result<Vec<DlqSummary>, DlqError> {
        caller.check(Action::ReadDeadLetters, None)?;
        let reasons = reasons && caller.visible_apps().is_none();
        let queues = self.known().await?;
        let connection = broker::connect(&self.amqp_url, "dlq").await?;
        // The reply queue's DLQ is chimed's own, so it is declared rather than looked
        // for: on a fresh broker the sampler's first pass comes before the collector's
        // declaration.
        if let Err(error) = declare_replies(&connection).await {
            close(&connection).await;
            return Err(error.into());
        }
        let mut items = Vec::new();
        for (queue, _) in queues {
            let sample = if reasons { REASON_SAMPLE } else { 1 };
            match self.summarize(&connection, &queue, sample).await {
                Ok(summary) => items.push(summary),
                Err(DlqError::NoSuchQueue(_)) => {}
                Err(error) => {
                    close(&connection).await;
                    return Err(error);
                }
            }
        }
        close(&connection).await;
        Ok(items)
    }

    /// Of the first `n` messages at the head of `queue`, left in place, those the caller
    /// may see: every one for a caller on every app, else those of its apps' jobs (a
    /// message whose job is unknown is shown to callers on every app only).
    pub async fn peek(
        &self,
        caller: &Caller,
        queue: &str,
        n: usize,
    ) -> Result<Vec<DlqMessage>, DlqError> {
        caller.check(Action::ReadDeadLetters, None)?;
        self.check_name(queue).await?;
        let _turn = self.readers.turn(queue).await;
        let connection = broker::connect(&self.amqp_url, "dlq").await?;
        let result = async {
            let channel = open_queue(&connection, queue).await?.0;
            let mut out = Vec::new();
            // Held (unacknowledged) until the channel closes, so each is read once.
            for _ in 0..n.min(MAX_PEEK) {
                let Some(message) = get(&channel, queue).await? else {
                    break;
                };
                out.push(
                    message::classify(&message.delivery.data, &message.delivery.properties).view,
                );
            }
            let _ = channel.close(200, "peek done".into()).await;
            Ok::<_, DlqError>(out)
        }
        .await;
        close(&connection).await;
        let mut out = result?;
        if caller.visible_apps().is_some() {
            out.retain(|message| {
                message
                    .job
                    .as_deref()
                    .and_then(|job| job.split_once('/'))
                    .is_some_and(|(app, _)| caller.sees(app))
            });
        }
        for message in &mut out {
            message.resolved = self.resolved(message.run_id).await?;
        }
        Ok(out)
    }

    /// The dead-letter queues Chime declared, with their kinds: one per group some job
    /// targets, one per observer on record, and the reply queue's.
    pub(crate) async fn known(&self) -> Result<Vec<(String, DlqKind)>, DlqError> {
        let mut queues: Vec<(String, DlqKind)> = self
            .store
            .target_groups()
            .await?
            .iter()
            .map(|group| {
                let dlq = topology::dead_letter_queue(&topology::group_queue(group));
                (dlq, DlqKind::Group)
            })
            .collect();
        for name in self.store.observer_names().await? {
            let queue = topology::observer_queue(&name);
            queues.push((
                topology::dead_letter_queue(&queue),
                DlqKind::Observer(queue),
            ));
        }
        queues.push((topology::dead_letter_queue(REPLY_QUEUE), DlqKind::Replies));
        Ok(queues)
    }

    /// The kind of `queue` if Chime declared it, else [`DlqError::NotADeadLetterQueue`].
    pub(crate) async fn check_name(&self, queue: &str) -> Result<DlqKind, DlqError> {
        if !topology::is_dead_letter_queue(queue) {
            return Err(DlqError::NotADeadLetterQueue(queue.to_string()));
        }
        self.known()
            .await?
            .into_iter()
            .find(|(known, _)| known == queue)
            .map(|(_, kind)| kind)
            .ok_or_else(|| DlqError::NotADeadLetterQueue(queue.to_string()))
    }

    /// Whether run `run_id`'s dead letter is resolved (see [`is_resolved`]).
    pub(crate) async fn resolved(&self, run_id: Option<uuid::Uuid>) -> Result<bool, DlqError> {
        let Some(run_id) = run_id else {
            return Ok(false);
        };
        Ok(self
            .store
            .get_run(run_id)
            .await?
            .is_some_and(|run| is_resolved(&run)))
    }

    /// Replays up to `limit` messages of `queue` (only those of job `job`, as `app/name`
    /// or a bare name in app `default`, when given): each task's run is revived as the
    /// next attempt and published to its group, confirmed, before its DLQ copy is
    /// removed. Unreadable messages are published as they are to where they first went.
    /// `progress` is called after each message.
    ///
    /// Replaying one job's messages needs the right on the job's app; replaying every
    /// message of a queue (they may be any app's) is an admin operation.
    pub async fn replay(
        &self,
        caller: &Caller,
        queue: &str,
        job: Option<&str>,
        limit: u32,
        progress: impl Fn(&ReplayReport),
    ) -> Result<ReplayReport, DlqError> {
        let job = job.map(|j| {
            if j.contains('/') {
                j.to_string()
            } else {
                format!("default/{j}")
            }
        });
        match job.as_deref().and_then(|job| job.split_once('/')) {
            Some((app, _)) => caller.check(Action::ReplayJobDeadLetters, Some(app))?,
            None => caller.check(Action::ReplayQueue, None)?,
        }
        let kind = self.check_name(queue).await?;
        let turn = self.readers.turn(queue).await;
        let connection = broker::connect(&self.amqp_url, "dlq").await?;
        let result = self
            .replay_on(&connection, queue, &kind, job.as_deref(), limit, progress)
            .await;
        close(&connection).await;
        drop(turn);
        let report = result?;
        let app = job
            .as_deref()
            .and_then(|j| j.split_once('/'))
            .map(|(app, _)| app);
        let entry = crate::domain::audit::AuditEntry::now(
            &caller.name,
            crate::domain::audit::actions::DLQ_REPLAY,
            format!("dlq:{queue}"),
            app,
            serde_json::json!({"job": job, "limit": limit, "replayed": report.replayed,
                               "discarded": report.discarded, "remaining": report.remaining}),
        );
        crate::app::audit::record(self.store.as_ref(), vec![entry]).await;
        info!(
            queue,
            replayed = report.replayed,
            discarded = report.discarded,
            remaining = report.remaining,
            "dead-letter replay finished"
        );
        Ok(report)
    }

    /// Empties `queue`; returns how many messages were removed.
    pub async fn purge(&self, caller: &Caller, queue: &str) -> Result<u32, DlqError> {
        caller.check(Action::PurgeQueue, None)?;
        self.check_name(queue).await?;
        let _turn = self.readers.turn(queue).await;
        let connection = broker::connect(&self.amqp_url, "dlq").await?;
        let result = async {
            let (channel, _) = open_queue(&connection, queue).await?;
            let purged = channel
                .queue_purge(queue.into(), QueuePurgeOptions::default())
                .await?;
            let _ = channel.close(200, "purge done".into()).await;
            Ok(purged)
        }
        .await;
        close(&connection).await;
        if let Ok(purged) = &result {
            warn!(queue, purged, "dead-letter queue purged");
            let entry = crate::domain::audit::AuditEntry::now(
                &caller.name,
                crate::domain::audit::actions::DLQ_PURGE,
                format!("dlq:{queue}"),
                None,
                serde_json::json!({"purged": purged}),
            );
            crate::app::audit::record(self.store.as_ref(), vec![entry]).await;
        }
        result
    }

    /// Samples every dead-letter queue's depth and oldest age into the DLQ gauges every
    /// `every`, until `cancel` fires.
    pub async fn sample(self: Arc<Self>, every: Duration, cancel: CancellationToken) {
        loop {
            match self.list(&Caller::internal(), false).await {
                Ok(items) => {
                    for item in items {
                        metrics::gauge!(telemetry::DLQ_DEPTH, "queue" => item.queue.clone())
                            .set(f64::from(item.depth));
                        metrics::gauge!(telemetry::DLQ_OLDEST_AGE, "queue" => item.queue)
                            .set(item.oldest_age_s.unwrap_or(0.0));
                    }
                }
                Err(error) => warn!(%error, "cannot sample dead-letter queues"),
            }
            match self.group_consumers().await {
                Ok(counts) => {
                    for (group, queue, consumers) in counts {
                        metrics::gauge!(telemetry::GROUP_CONSUMERS,
                            "group" => group, "queue" => queue)
                        .set(f64::from(consumers));
                    }
                }
                Err(error) => warn!(%error, "cannot sample the groups' consumers"),
            }
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = cancel.cancelled() => {
                    self.publisher.close().await;
                    return;
                }
            }
        }
    }
}

impl DeadLetters {
    /// The live consumer instances (a presence within the last 15 s, as
    /// `GET /v1/consumers` counts them) of every group some job targets, as
    /// `(group, work queue, instances)`; 0 for a group with none. Counted from presence,
    /// not from the broker: RabbitMQ (until rabbitmq-server#16185, 2026) answers a passive
    /// declare of a quorum queue with its unacknowledged message count as the consumer
    /// count.
    pub(crate) async fn group_consumers(&self) -> Result<Vec<(String, String, u32)>, DlqError> {
        let groups = self.store.target_groups().await?;
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let live = self
            .store
            .consumers(crate::store::live_since(chrono::Utc::now()), None)
            .await?;
        let mut counts: HashMap<&str, u32> = HashMap::new();
        for instance in &live {
            *counts.entry(instance.group.as_str()).or_default() += 1;
        }
        Ok(groups
            .iter()
            .map(|group| {
                let consumers = counts.get(group.as_str()).copied().unwrap_or(0);
                (group.clone(), topology::group_queue(group), consumers)
            })
            .collect())
    }
}

/// Whether a run's dead letter is resolved: the run has since finished successfully —
/// a result that arrived after it was given up was recorded on it, or a replay of it
/// succeeded. Nothing is left to replay.
pub(crate) fn is_resolved(run: &Run) -> bool {
    run.state == RunState::Succeeded
        || (run.state == RunState::Dead
            && run
                .history
                .iter()
                .any(|record| record.event == crate::domain::run::LATE_SUCCESS))
}

/// A channel on which `queue` is known to exist, and its depth. A missing queue closes
/// the channel (RabbitMQ answers a passive declare with NOT_FOUND), so each check gets
/// its own.
async fn open_queue(connection: &Connection, queue: &str) -> Result<(Channel, u32), DlqError> {
    let channel = connection.create_channel().await?;
    match channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
    {
        Ok(declared) => Ok((channel, declared.message_count())),
        Err(error) if topology::is_not_found(&error) => {
            Err(DlqError::NoSuchQueue(queue.to_string()))
        }
        Err(error) => Err(error.into()),
    }
}

async fn get(channel: &Channel, queue: &str) -> Result<Option<BasicGetMessage>, lapin::Error> {
    channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: false })
        .await
}

impl DeadLetters {
    /// `queue`'s depth and the age of its oldest message; with a `sample` over 1, the
    /// reasons of its oldest `sample` messages and how many of them are resolved.
    async fn summarize(
        &self,
        connection: &Connection,
        queue: &str,
        sample: usize,
    ) -> Result<DlqSummary, DlqError> {
        let _turn = self.readers.turn(queue).await;
        let (channel, depth) = open_queue(connection, queue).await?;
        let mut summary = DlqSummary {
            queue: queue.to_string(),
            depth,
            oldest_age_s: None,
            reasons: BTreeMap::new(),
            resolved: 0,
        };
        let mut runs = Vec::new();
        for i in 0..sample.min(depth as usize) {
            let Some(message) = get(&channel, queue).await? else {
                break;
            };
            let classified =
                message::classify(&message.delivery.data, &message.delivery.properties);
            if i == 0 {
                summary.oldest_age_s = classified
                    .dead_at
                    .map(|t| ((Utc::now() - t).num_milliseconds().max(0) as f64) / 1000.0);
            }
            if sample > 1 {
                runs.push(classified.view.run_id);
                *summary.reasons.entry(classified.view.reason).or_default() += 1;
            }
        }
        let _ = channel.close(200, "summary done".into()).await;
        for run_id in runs {
            if self.resolved(run_id).await? {
                summary.resolved += 1;
            }
        }
        Ok(summary)
    }
}

/// Declares the reply queue and its dead-letter queue (idempotent) on a channel of its own.
async fn declare_replies(connection: &Connection) -> Result<(), lapin::Error> {
    let channel = connection.create_channel().await?;
    let declared = topology::declare_replies(connection, &channel).await;
    let _ = channel.close(200, "declared".into()).await;
    declared
}

/// Closes `connection`. Its channels must be closed first: lapin closes a channel
/// dropped open in the background, and that fails against a closing connection with an
/// error in the log.
async fn close(connection: &Connection) {
    let _ = connection.close(200, "dlq operation done".into()).await;
}
