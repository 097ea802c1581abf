//! Publishing acks, results, heartbeats, presence and observer registrations to the
//! scheduler, each confirmed by the broker.
//!
//! One task per channel publishes everything queued to it. While
//! [`MAX_BATCHES_IN_FLIGHT`] messages await their confirms, new replies wait; the next
//! message then carries all of them as one [`ReplyBatch`] (group commit). So a quiet consumer sends each reply
//! at once, alone, and a busy one sends fewer, larger messages: one quorum-queue write
//! and one scheduler transaction for many replies.

use std::time::Duration;

use chrono::Utc;
use futures_util::{StreamExt, stream::FuturesUnordered};
use lapin::{
    BasicProperties, Channel, Confirmation, PublisherConfirm, options::BasicPublishOptions,
};
use tokio::sync::{mpsc, oneshot};

use crate::{
    handler::TaskContext,
    idempotency::RecordedOutcome,
    protocol::{
        AckMessage, HeartbeatMessage, ObserveMessage, PROTOCOL_VERSION, PresenceMessage, Progress,
        Reply, ReplyBatch, ResultMessage, topology,
    },
};

/// What this library's presence messages give as `version`.
const CONSUMER_VERSION: &str = concat!("chime-consumer/", env!("CARGO_PKG_VERSION"));

/// Messages published and not yet confirmed before further replies wait to be batched.
/// At low rates it makes no difference (in `chime-bench` W2 at 1 000 fires/s the p99 was
/// within the box's noise with one or four). At high rates one caps the replies at one
/// batch (200) per confirm round trip: W2 at 8 000 fires/s on PostgreSQL fell behind
/// with one (p99 1.8 s) and kept up with four (p99 90 ms).
const MAX_BATCHES_IN_FLIGHT: usize = 4;
/// Most replies in one batch.
const MAX_BATCH_REPLIES: usize = 200;
/// A batch is closed once its replies reach this size (a large result travels alone).
const MAX_BATCH_BYTES: usize = 256 * 1024;

/// How long to wait for the broker to confirm a reply before treating it as lost.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a reply was not confirmed.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ReplyError {
    #[error("rabbitmq error: {0}")]
    Amqp(#[from] lapin::Error),
    #[error("broker nacked the reply")]
    Nacked,
    #[error("reply was unroutable (is the reply queue declared?)")]
    Unroutable,
    #[error("no confirm within {CONFIRM_TIMEOUT:?}")]
    Timeout,
    #[error("the reply publisher stopped")]
    Stopped,
}

/// Hands replies to the channel's publishing task; cheap to clone.
#[derive(Clone)]
pub(crate) struct ReplyPublisher {
    queue: mpsc::UnboundedSender<Queued>,
    channel: Channel,
    instance: String,
}

/// A reply waiting to be published, and who waits for its confirm.
struct Queued {
    body: Vec<u8>,
    message_id: String,
    confirmed: oneshot::Sender<Result<(), ReplyError>>,
}

impl ReplyPublisher {
    /// Publishes on `channel` (in confirm mode) as consumer `instance`. With `batch`
    /// false every reply is its own message, for a scheduler older than batches.
    /// A publisher on `channel` for `instance`, stamping each message with `user_id`
    /// (the connection's user, see [`crate::protocol::user_id`]) when known.
    pub(crate) fn new(
        channel: Channel,
        instance: String,
        batch: bool,
        user_id: Option<String>,
    ) -> Self {
        let (queue, queued) = mpsc::unbounded_channel();
        // Unbatched, nothing waits: replies are pipelined, each its own message.
        let (max_replies, max_in_flight) = if batch {
            (MAX_BATCH_REPLIES, MAX_BATCHES_IN_FLIGHT)
        } else {
            (1, usize::MAX)
        };
        tokio::spawn(publish_queued(
            channel.clone(),
            queued,
            max_replies,
            max_in_flight,
            user_id,
        ));
        Self {
            queue,
            channel,
            instance,
        }
    }

    pub(crate) async fn close(&self) {
        let _ = self
            .channel
            .close(200, "consumer shutting down".into())
            .await;
    }

    /// Publishes the ack and returns without waiting for the broker's confirm, so the
    /// handler starts one broker round trip sooner.
    pub(crate) async fn start_ack(&self, ctx: &TaskContext) -> Result<PendingReply, ReplyError> {
        self.start(Reply::Ack(AckMessage {
            v: PROTOCOL_VERSION,
            task_id: ctx.task_id(),
            attempt: ctx.attempt(),
            consumer: self.instance.clone(),
            acked_at: Utc::now(),
        }))
        .await
    }

    pub(crate) async fn send_result(
        &self,
        ctx: &TaskContext,
        recorded: &RecordedOutcome,
        replayed: bool,
    ) -> Result<(), ReplyError> {
        self.start_result(ctx, recorded, replayed)
            .await?
            .confirmed()
            .await
    }

    /// Publishes the result and returns without waiting for the broker's confirm.
    pub(crate) async fn start_result(
        &self,
        ctx: &TaskContext,
        recorded: &RecordedOutcome,
        replayed: bool,
    ) -> Result<PendingReply, ReplyError> {
        // An output the scheduler could not take is sent as a permanent failure.
        let outcome = recorded.outcome.within_limits();
        if outcome != recorded.outcome {
            tracing::warn!(task_id = %ctx.task_id(), "handler output over the protocol's limits; reporting a permanent failure");
        }
        self.start(Reply::Result(ResultMessage {
            v: PROTOCOL_VERSION,
            task_id: ctx.task_id(),
            attempt: ctx.attempt(),
            consumer: self.instance.clone(),
            finished_at: recorded.finished_at,
            replayed,
            outcome,
        }))
        .await
    }

    pub(crate) async fn send_heartbeat(
        &self,
        ctx: &TaskContext,
        progress: Option<Progress>,
    ) -> Result<(), ReplyError> {
        self.publish(Reply::Heartbeat(HeartbeatMessage {
            v: PROTOCOL_VERSION,
            task_id: ctx.task_id(),
            attempt: ctx.attempt(),
            consumer: self.instance.clone(),
            at: Utc::now(),
            progress,
        }))
        .await
    }

    /// Announces that this instance of `group` is alive, in `zone`, and whether it takes
    /// the group's broadcasts.
    pub(crate) async fn send_presence(
        &self,
        group: &str,
        zone: Option<&str>,
        broadcast: bool,
    ) -> Result<(), ReplyError> {
        self.publish(Reply::Presence(PresenceMessage {
            v: PROTOCOL_VERSION,
            instance: self.instance.clone(),
            group: group.to_string(),
            zone: zone.map(str::to_string),
            broadcast,
            version: Some(CONSUMER_VERSION.to_string()),
            at: Utc::now(),
        }))
        .await
    }

    /// Registers observer `observer`'s `patterns`, so the scheduler publishes copies of
    /// the tasks they match.
    pub(crate) async fn send_observe(
        &self,
        observer: &str,
        patterns: &[String],
    ) -> Result<(), ReplyError> {
        self.publish(Reply::Observe(ObserveMessage {
            v: PROTOCOL_VERSION,
            observer: observer.to_string(),
            patterns: patterns.to_vec(),
            at: Utc::now(),
        }))
        .await
    }

    async fn publish(&self, reply: Reply) -> Result<(), ReplyError> {
        self.start(reply).await?.confirmed().await
    }

    async fn start(&self, reply: Reply) -> Result<PendingReply, ReplyError> {
        let message_id = match &reply {
            Reply::Presence(_) => "presence".to_string(),
            Reply::Observe(_) => "observe".to_string(),
            _ => reply.task_id().map(|id| id.to_string()).unwrap_or_default(),
        };
        let (confirmed, pending) = oneshot::channel();
        self.queue
            .send(Queued {
                body: reply.to_vec(),
                message_id,
                confirmed,
            })
            .map_err(|_| ReplyError::Stopped)?;
        Ok(PendingReply(pending))
    }
}

/// A reply handed to the publisher whose confirm has not been awaited yet.
#[must_use = "a reply counts as sent only once its confirm is awaited"]
pub(crate) struct PendingReply(oneshot::Receiver<Result<(), ReplyError>>);

impl PendingReply {
    /// Waits for the broker's confirm of the message that carried the reply: only a
    /// clean ack means the reply is queued.
    pub(crate) async fn confirmed(self) -> Result<(), ReplyError> {
        self.0.await.unwrap_or(Err(ReplyError::Stopped))
    }
}

/// Publishes queued replies, batching (up to `max_replies`) those that queue up while
/// `max_in_flight` messages await their confirms. Ends when every
/// [`ReplyPublisher`] is dropped and the last confirm is in.
async fn publish_queued(
    channel: Channel,
    mut queued: mpsc::UnboundedReceiver<Queued>,
    max_replies: usize,
    max_in_flight: usize,
    user_id: Option<String>,
) {
    let mut in_flight = FuturesUnordered::new();
    let mut open = true;
    while open || !in_flight.is_empty() {
        tokio::select! {
            Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
            first = queued.recv(), if open && in_flight.len() < max_in_flight => {
                let Some(first) = first else {
                    open = false;
                    continue;
                };
                let batch = take_batch(first, &mut queued, max_replies);
                in_flight.push(publish_batch(&channel, batch, user_id.as_deref()).await);
            }
        }
    }
}

/// `first` and whatever else is queued, up to `max_replies` and [`MAX_BATCH_BYTES`].
fn take_batch(
    first: Queued,
    queued: &mut mpsc::UnboundedReceiver<Queued>,
    max_replies: usize,
) -> Vec<Queued> {
    let mut bytes = first.body.len();
    let mut batch = vec![first];
    while batch.len() < max_replies && bytes < MAX_BATCH_BYTES {
        match queued.try_recv() {
            Ok(next) => {
                bytes += next.body.len();
                batch.push(next);
            }
            Err(_) => break,
        }
    }
    batch
}

/// Publishes `batch` as one message (a single reply as itself) and returns the future
/// that hands its confirm to every waiter.
async fn publish_batch(
    channel: &Channel,
    mut batch: Vec<Queued>,
    user_id: Option<&str>,
) -> impl Future<Output = ()> + use<> {
    let (body, message_id) = if batch.len() == 1 {
        let one = &mut batch[0];
        (
            std::mem::take(&mut one.body),
            std::mem::take(&mut one.message_id),
        )
    } else {
        let bodies: Vec<Vec<u8>> = batch
            .iter_mut()
            .map(|q| std::mem::take(&mut q.body))
            .collect();
        (ReplyBatch::body_of(&bodies), "batch".to_string())
    };
    let mut properties = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_message_id(message_id.into());
    if let Some(user) = user_id {
        properties = properties.with_user_id(user.into());
    }
    let published = channel
        .basic_publish(
            topology::REPLY_EXCHANGE.into(),
            topology::REPLY_ROUTING_KEY.into(),
            BasicPublishOptions {
                mandatory: true,
                ..BasicPublishOptions::default()
            },
            &body,
            properties,
        )
        .await;
    if batch.len() > 1 {
        metrics::counter!("chime_consumer_reply_batches_total").increment(1);
    }
    metrics::counter!("chime_consumer_replies_total").increment(batch.len() as u64);
    async move {
        let outcome = match published {
            Ok(confirm) => confirm_of(confirm).await,
            Err(error) => Err(error.into()),
        };
        for waiter in batch {
            let _ = waiter.confirmed.send(outcome.clone());
        }
    }
}

/// The broker's verdict on one published message.
async fn confirm_of(confirm: PublisherConfirm) -> Result<(), ReplyError> {
    match tokio::time::timeout(CONFIRM_TIMEOUT, confirm).await {
        Err(_) => Err(ReplyError::Timeout),
        Ok(Err(error)) => Err(error.into()),
        Ok(Ok(Confirmation::Ack(None))) | Ok(Ok(Confirmation::NotRequested)) => Ok(()),
        Ok(Ok(Confirmation::Ack(Some(_)))) => Err(ReplyError::Unroutable),
        Ok(Ok(Confirmation::Nack(_))) => Err(ReplyError::Nacked),
    }
}
