//! Dead-letter queues: what operators do with them (list, peek, replay, purge — the same
//! operations behind `chimectl dlq` and `/v1/dlq`), the notices consumer that marks runs
//! `dead` when RabbitMQ dead-letters their task ([`notices`]), and the sampler behind the
//! `chime_dlq_depth` and `chime_dlq_oldest_age_seconds` gauges.
//!
//! Peeking takes messages with manual acknowledgement and closes the channel without
//! acknowledging them, so RabbitMQ puts every one back. A replay publishes each message to
//! its original target, waits for the broker's confirm, and only then removes the DLQ
//! copy: a crash mid-replay leaves the copy in place (at worst it is replayed twice, and
//! the idempotency key absorbs the duplicate).

mod message;
pub mod notices;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use chrono::Utc;
use lapin::{
    BasicProperties, Channel, Connection,
    message::BasicGetMessage,
    options::{BasicAckOptions, BasicGetOptions, QueueDeclareOptions, QueuePurgeOptions},
    types::FieldTable,
};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use chime_consumer::protocol::topology::{self, REPLY_QUEUE};

pub use message::DlqMessage;

use crate::{
    broker::{self, ConfirmedPublisher, PublishError},
    store::{Replay, Store, StoreError},
    telemetry,
};

/// Messages read to tally the reasons of a queue in `dlq ls`.
const REASON_SAMPLE: usize = 100;
/// Most messages `peek` returns.
pub const MAX_PEEK: usize = 1000;

/// Why a DLQ operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DlqError {
    /// The name is not one of Chime's dead-letter queues.
    #[error("{0:?} is not a Chime dead-letter queue (names look like chime.group.<group>.dlq)")]
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

/// One dead-letter queue in `dlq ls`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DlqSummary {
    /// Queue name.
    pub queue: String,
    /// Messages in it.
    pub depth: u32,
    /// Age of the oldest message in seconds, if any and known.
    pub oldest_age_s: Option<f64>,
    /// Reasons of the oldest (up to 100) messages, with counts.
    pub reasons: BTreeMap<String, u32>,
}

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    /// Messages published to their target (confirmed) and removed from the DLQ.
    pub replayed: u32,
    /// Copies removed because their run is no longer dead (finished or under way).
    pub discarded: u32,
    /// Messages left in place, by reason.
    pub skipped: BTreeMap<String, u32>,
    /// Messages left in the queue afterwards.
    pub remaining: u32,
}

/// The DLQ operations. Cheap to share.
pub struct DeadLetters {
    store: Arc<dyn Store>,
    amqp_url: String,
    publisher: ConfirmedPublisher,
    node: String,
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
        }
    }

    /// Every dead-letter queue that exists: one per group some job targets, and the reply
    /// queue's; with depth, oldest age and (when `reasons`) the reasons of the oldest
    /// messages.
    pub async fn list(&self, reasons: bool) -> Result<Vec<DlqSummary>, DlqError> {
        let mut queues: Vec<String> = self
            .store
            .target_groups()
            .await?
            .iter()
            .map(|group| topology::dead_letter_queue(&topology::group_queue(group)))
            .collect();
        queues.push(topology::dead_letter_queue(REPLY_QUEUE));
        let connection = broker::connect(&self.amqp_url, "dlq").await?;
        // The reply queue's DLQ is chimed's own, so it is declared rather than looked
        // for: on a fresh broker the sampler's first pass comes before the collector's
        // declaration.
        if let Err(error) = declare_replies(&connection).await {
            close(&connection).await;
            return Err(error.into());
        }
        let mut items = Vec::new();
        for queue in queues {
            match summarize(&connection, &queue, if reasons { REASON_SAMPLE } else { 1 }).await {
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

    /// Up to `n` messages from the head of `queue`, left in place.
    pub async fn peek(&self, queue: &str, n: usize) -> Result<Vec<DlqMessage>, DlqError> {
        check_name(queue)?;
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
            Ok(out)
        }
        .await;
        close(&connection).await;
        result
    }

    /// Replays up to `limit` messages of `queue` (only those of job `job`, as `app/name`
    /// or a bare name in app `default`, when given): each task's run is revived as the
    /// next attempt and published to its group, confirmed, before its DLQ copy is
    /// removed. Unreadable messages are published as they are to where they first went.
    /// `progress` is called after each message.
    pub async fn replay(
        &self,
        queue: &str,
        job: Option<&str>,
        limit: u32,
        progress: impl Fn(&ReplayReport),
    ) -> Result<ReplayReport, DlqError> {
        check_name(queue)?;
        let job = job.map(|j| {
            if j.contains('/') {
                j.to_string()
            } else {
                format!("default/{j}")
            }
        });
        let connection = broker::connect(&self.amqp_url, "dlq").await?;
        let result = self
            .replay_on(&connection, queue, job.as_deref(), limit, progress)
            .await;
        close(&connection).await;
        let report = result?;
        info!(
            queue,
            replayed = report.replayed,
            discarded = report.discarded,
            remaining = report.remaining,
            "dead-letter replay finished"
        );
        Ok(report)
    }

    async fn replay_on(
        &self,
        connection: &Connection,
        queue: &str,
        job: Option<&str>,
        limit: u32,
        progress: impl Fn(&ReplayReport),
    ) -> Result<ReplayReport, DlqError> {
        let (channel, depth) = open_queue(connection, queue).await?;
        let mut report = ReplayReport::default();
        // Each message is taken once; those left in place are held until the channel
        // closes, which returns them to the queue in order.
        for _ in 0..depth {
            if report.replayed >= limit {
                break;
            }
            let Some(message) = get(&channel, queue).await? else {
                break;
            };
            let delivery = message.delivery;
            let classified = message::classify(&delivery.data, &delivery.properties);
            if job.is_some() && classified.job() != job {
                continue;
            }
            let skip = |report: &mut ReplayReport, why: &str| {
                *report.skipped.entry(why.to_string()).or_default() += 1;
            };
            match &classified.task {
                Some(task) => match self.store.replay_run(task.task_id, Utc::now()).await? {
                    Replay::Revived(item) => {
                        let task = item.job.task_message(&item.run);
                        self.publisher.declare_destination(&task).await?;
                        let properties = BasicProperties::default()
                            .with_content_type("application/json".into())
                            .with_message_id(task.task_id.to_string().into())
                            .with_app_id(self.node.as_str().into());
                        // On failure the run stays `scheduled` and the reconciler publishes
                        // it; the DLQ copy stays too.
                        let (exchange, routing_key) = topology::task_route(&task);
                        self.publisher
                            .publish(exchange, &routing_key, &task.to_vec(), properties)
                            .await?;
                        self.store
                            .mark_dispatched(&[task.task_id], Utc::now())
                            .await?;
                        delivery.ack(BasicAckOptions::default()).await?;
                        metrics::counter!(telemetry::DLQ_REPLAYED, "queue" => queue.to_string())
                            .increment(1);
                        report.replayed += 1;
                    }
                    Replay::NotDead(_) => {
                        delivery.ack(BasicAckOptions::default()).await?;
                        report.discarded += 1;
                    }
                    Replay::Unknown => skip(&mut report, "run unknown (job deleted or run pruned)"),
                },
                None if job.is_some() => {}
                None => match message::replay_route(queue, classified.origin.as_ref()) {
                    Some((exchange, routing_key)) => {
                        self.publisher
                            .publish(
                                &exchange,
                                &routing_key,
                                &delivery.data,
                                strip_death(&delivery.properties),
                            )
                            .await?;
                        delivery.ack(BasicAckOptions::default()).await?;
                        metrics::counter!(telemetry::DLQ_REPLAYED, "queue" => queue.to_string())
                            .increment(1);
                        report.replayed += 1;
                    }
                    None => skip(&mut report, "origin unknown"),
                },
            }
            progress(&report);
        }
        let _ = channel.close(200, "replay done".into()).await;
        let (channel, remaining) = open_queue(connection, queue).await?;
        // Closed before the connection is (see `close`).
        let _ = channel.close(200, "replay done".into()).await;
        report.remaining = remaining;
        Ok(report)
    }

    /// Empties `queue`; returns how many messages were removed.
    pub async fn purge(&self, queue: &str) -> Result<u32, DlqError> {
        check_name(queue)?;
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
        }
        result
    }

    /// Samples every dead-letter queue's depth and oldest age into the DLQ gauges every
    /// `every`, until `cancel` fires.
    pub async fn sample(self: Arc<Self>, every: Duration, cancel: CancellationToken) {
        loop {
            match self.list(false).await {
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

fn check_name(queue: &str) -> Result<(), DlqError> {
    if topology::is_dead_letter_queue(queue) {
        Ok(())
    } else {
        Err(DlqError::NotADeadLetterQueue(queue.to_string()))
    }
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
        Err(error) if error.to_string().contains("NOT_FOUND") => {
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

async fn summarize(
    connection: &Connection,
    queue: &str,
    sample: usize,
) -> Result<DlqSummary, DlqError> {
    let (channel, depth) = open_queue(connection, queue).await?;
    let mut summary = DlqSummary {
        queue: queue.to_string(),
        depth,
        oldest_age_s: None,
        reasons: BTreeMap::new(),
    };
    for i in 0..sample.min(depth as usize) {
        let Some(message) = get(&channel, queue).await? else {
            break;
        };
        let classified = message::classify(&message.delivery.data, &message.delivery.properties);
        if i == 0 {
            summary.oldest_age_s = classified
                .dead_at
                .map(|t| ((Utc::now() - t).num_milliseconds().max(0) as f64) / 1000.0);
        }
        if sample > 1 {
            *summary.reasons.entry(classified.view.reason).or_default() += 1;
        }
    }
    let _ = channel.close(200, "summary done".into()).await;
    Ok(summary)
}

/// The properties of a raw replay: the original ones without the broker's death record.
fn strip_death(properties: &BasicProperties) -> BasicProperties {
    let mut headers = properties.headers().clone().unwrap_or_default();
    let kept: FieldTable = {
        let mut t = FieldTable::default();
        for (k, v) in headers.inner() {
            if !k.as_str().starts_with("x-death") && !k.as_str().starts_with("x-first-death") {
                t.insert(k.clone(), v.clone());
            }
        }
        t
    };
    headers = kept;
    properties.clone().with_headers(headers)
}

/// Declares the reply queue and its dead-letter queue (idempotent) on a channel of its own.
async fn declare_replies(connection: &Connection) -> Result<(), lapin::Error> {
    let channel = connection.create_channel().await?;
    let declared = topology::declare_replies(&channel).await;
    let _ = channel.close(200, "declared".into()).await;
    declared
}

/// Closes `connection`. Its channels must be closed first: lapin closes a channel
/// dropped open in the background, and that fails against a closing connection with an
/// error in the log.
async fn close(connection: &Connection) {
    let _ = connection.close(200, "dlq operation done".into()).await;
}
