//! Publishing acks, results, heartbeats, presence and observer registrations to the
//! scheduler, each confirmed by the broker.

use std::time::Duration;

use chrono::Utc;
use lapin::{
    BasicProperties, Channel, Confirmation, PublisherConfirm, options::BasicPublishOptions,
};

use crate::{
    handler::TaskContext,
    idempotency::RecordedOutcome,
    protocol::{
        AckMessage, HeartbeatMessage, ObserveMessage, PROTOCOL_VERSION, PresenceMessage, Progress,
        Reply, ResultMessage, topology,
    },
};

/// How long to wait for the broker to confirm a reply before treating it as lost.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a reply was not confirmed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplyError {
    #[error("rabbitmq error: {0}")]
    Amqp(#[from] lapin::Error),
    #[error("broker nacked the reply")]
    Nacked,
    #[error("reply was unroutable (is the reply queue declared?)")]
    Unroutable,
    #[error("no confirm within {CONFIRM_TIMEOUT:?}")]
    Timeout,
}

#[derive(Clone)]
pub(crate) struct ReplyPublisher {
    channel: Channel,
    instance: String,
}

impl ReplyPublisher {
    pub(crate) fn new(channel: Channel, instance: String) -> Self {
        Self { channel, instance }
    }

    pub(crate) async fn close(&self) {
        let _ = self
            .channel
            .close(200, "consumer shutting down".into())
            .await;
    }

    /// Publishes the ack and returns without waiting for the broker's confirm, so the
    /// handler starts one broker round trip sooner; await the returned [`PendingReply`]
    /// before the result goes out.
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
        self.publish(Reply::Result(ResultMessage {
            v: PROTOCOL_VERSION,
            task_id: ctx.task_id(),
            attempt: ctx.attempt(),
            consumer: self.instance.clone(),
            finished_at: recorded.finished_at,
            replayed,
            outcome: recorded.outcome.clone(),
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
        let properties = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_delivery_mode(2)
            .with_message_id(
                match &reply {
                    Reply::Presence(_) => "presence".to_string(),
                    Reply::Observe(_) => "observe".to_string(),
                    _ => reply.task_id().map(|id| id.to_string()).unwrap_or_default(),
                }
                .into(),
            );
        let confirm = self
            .channel
            .basic_publish(
                topology::REPLY_EXCHANGE.into(),
                topology::REPLY_ROUTING_KEY.into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &reply.to_vec(),
                properties,
            )
            .await?;
        Ok(PendingReply(confirm))
    }
}

/// A reply handed to the broker whose confirm has not been awaited yet.
#[must_use = "a reply counts as sent only once its confirm is awaited"]
pub(crate) struct PendingReply(PublisherConfirm);

impl PendingReply {
    /// Waits for the broker's confirm: only a clean ack means the reply is queued.
    pub(crate) async fn confirmed(self) -> Result<(), ReplyError> {
        match tokio::time::timeout(CONFIRM_TIMEOUT, self.0).await {
            Err(_) => Err(ReplyError::Timeout),
            Ok(Err(error)) => Err(error.into()),
            Ok(Ok(Confirmation::Ack(None))) | Ok(Ok(Confirmation::NotRequested)) => Ok(()),
            Ok(Ok(Confirmation::Ack(Some(_)))) => Err(ReplyError::Unroutable),
            Ok(Ok(Confirmation::Nack(_))) => Err(ReplyError::Nacked),
        }
    }
}
