//! The result collector: consumes consumers' acks and results from the reply queue and
//! applies them to runs.
//!
//! - A message that does not parse is rejected without requeue, which dead-letters it to
//!   `chime.replies.dlq`, and counted; it never stops the collector.
//! - When the store is unavailable the collector holds the reply and retries with backoff
//!   (up to [`MAX_STORE_WAIT`]) instead of requeueing it: every return to a quorum queue
//!   counts towards its delivery limit, and a requeue loop would dead-letter good replies
//!   during a database failover.
//! - A reply the store refuses as data is dead-lettered and counted like a malformed one.

use std::{sync::Arc, time::Duration};

use futures_util::StreamExt;
use lapin::{
    Channel,
    message::Delivery,
    options::{
        BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions,
        BasicQosOptions, BasicRejectOptions,
    },
    types::FieldTable,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use chime_consumer::{
    backoff::Backoff,
    protocol::{
        MAX_OBSERVER_PATTERNS, ObserveMessage, PresenceMessage, Reply, ResultMessage, TaskOutcome,
        topology,
    },
};

use crate::{
    broker,
    domain::RunState,
    store::{ReplyEffect, Store, StoreError},
    telemetry,
};

/// Replies RabbitMQ may push ahead of the collector.
const PREFETCH: u16 = 200;
/// Longest a reply is held while the store is unavailable, well below RabbitMQ's
/// 30-minute consumer timeout.
pub const MAX_STORE_WAIT: Duration = Duration::from_secs(20 * 60);

/// What happened to one reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// Applied (or recognised as stale or for an unknown run) and acknowledged.
    Done(ReplyEffect),
    /// Unparseable, or refused by the store as data: dead-lettered.
    DeadLettered,
    /// Handed back to the queue (shutdown or a store outage past the limit).
    Requeued,
}

/// The result collector service.
pub struct ResultCollector {
    store: Arc<dyn Store>,
    amqp_url: String,
}

impl ResultCollector {
    /// A collector applying replies from the broker at `amqp_url` to `store`.
    pub fn new(store: Arc<dyn Store>, amqp_url: impl Into<String>) -> Self {
        Self {
            store,
            amqp_url: amqp_url.into(),
        }
    }

    /// Consumes until `cancel` fires, reconnecting with backoff after broker failures.
    pub async fn run(self, cancel: CancellationToken) {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        while let Some(connection) =
            broker::connect_with_backoff(&self.amqp_url, "results", &cancel).await
        {
            let end = self.session(&connection, &cancel, &mut backoff).await;
            let _ = connection
                .close(200, "chimed result collector stopping".into())
                .await;
            match end {
                Ok(()) => return,
                Err(error) => {
                    let delay = backoff.next_delay();
                    warn!(%error, retry_in_ms = delay.as_millis() as u64, "lost the reply consumer; reconnecting");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = cancel.cancelled() => return,
                    }
                }
            }
        }
    }

    async fn session(
        &self,
        connection: &lapin::Connection,
        cancel: &CancellationToken,
        backoff: &mut Backoff,
    ) -> Result<(), String> {
        let (channel, mut consumer) = open_consumer(connection).await.map_err(|e| e.to_string())?;
        info!(queue = topology::REPLY_QUEUE, "collecting results");
        loop {
            let next = tokio::select! {
                next = consumer.next() => next,
                () = cancel.cancelled() => {
                    let _ = channel.basic_cancel(consumer.tag(), BasicCancelOptions::default()).await;
                    let _ = channel.close(200, "chimed shutting down".into()).await;
                    return Ok(());
                }
            };
            match next {
                Some(Ok(delivery)) => {
                    self.handle(delivery, cancel).await;
                    backoff.reset();
                }
                Some(Err(error)) => return Err(error.to_string()),
                None => return Err("reply consumer ended".into()),
            }
        }
    }

    /// Applies one reply and settles its delivery.
    pub async fn handle(&self, delivery: Delivery, cancel: &CancellationToken) -> Handled {
        let mut reply = match Reply::from_slice(&delivery.data) {
            Ok(reply) => reply,
            Err(error) => {
                warn!(%error, queue = topology::REPLY_QUEUE, "dead-lettering a malformed reply");
                return dead_letter(delivery).await;
            }
        };
        sanitise(&mut reply);
        if let Reply::Presence(presence) = &mut reply {
            if !valid_presence(presence) {
                warn!(instance = %presence.instance, group = %presence.group,
                    "dead-lettering a presence message with an invalid group or zone name");
                return dead_letter(delivery).await;
            }
            // Liveness is judged by this node's clock, not the consumer's.
            presence.at = chrono::Utc::now();
        }
        if let Reply::Observe(observe) = &mut reply {
            if !valid_observe(observe) {
                warn!(observer = %observe.observer, patterns = observe.patterns.len(),
                    "dead-lettering an observer registration with an invalid name or pattern");
                return dead_letter(delivery).await;
            }
            observe.at = chrono::Utc::now();
        }
        let give_up_at = tokio::time::Instant::now() + MAX_STORE_WAIT;
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
        loop {
            let error = match self.apply(&reply).await {
                Ok(effect) => {
                    let _ = delivery.ack(BasicAckOptions::default()).await;
                    return Handled::Done(effect);
                }
                Err(error) => error,
            };
            metrics::counter!(telemetry::STORE_ERRORS, "operation" => "record_reply").increment(1);
            if !error.is_transient() {
                error!(%error, task_id = ?reply.task_id(), "the store refuses this reply; dead-lettering it");
                return dead_letter(delivery).await;
            }
            if cancel.is_cancelled() || tokio::time::Instant::now() >= give_up_at {
                warn!(%error, task_id = ?reply.task_id(), "cannot record a reply; handing it back to the queue");
                let _ = delivery
                    .nack(BasicNackOptions {
                        requeue: true,
                        ..BasicNackOptions::default()
                    })
                    .await;
                return Handled::Requeued;
            }
            let delay = backoff.next_delay();
            warn!(%error, task_id = ?reply.task_id(), retry_in_ms = delay.as_millis() as u64,
                "cannot record a reply; holding it until the store answers");
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = cancel.cancelled() => {}
            }
        }
    }

    async fn apply(&self, reply: &Reply) -> Result<ReplyEffect, StoreError> {
        let kind = match reply {
            Reply::Ack(_) => "ack",
            Reply::Heartbeat(_) => "heartbeat",
            Reply::Result(_) => "result",
            Reply::Presence(_) => "presence",
            Reply::Observe(_) => "observe",
        };
        let (mut effect, mut state) = match reply {
            Reply::Ack(ack) => (self.store.record_ack(ack).await?, None),
            Reply::Heartbeat(heartbeat) => (self.store.record_heartbeat(heartbeat).await?, None),
            Reply::Result(result) => self.store.record_result(result).await?,
            Reply::Presence(presence) => {
                self.store.record_presence(presence).await?;
                (ReplyEffect::Applied, None)
            }
            Reply::Observe(observe) => {
                self.store.record_observer(observe).await?;
                (ReplyEffect::Applied, None)
            }
        };
        if effect == ReplyEffect::Broadcast {
            (effect, state) = self
                .store
                .record_broadcast_reply(reply, chrono::Utc::now())
                .await?;
        }
        if let (Some(state), Reply::Result(result)) = (state, reply) {
            count_outcome(state, result);
        }
        let effect_name = match effect {
            ReplyEffect::Applied => "applied",
            ReplyEffect::Stale => "stale",
            ReplyEffect::UnknownRun | ReplyEffect::Broadcast => "unknown_run",
        };
        metrics::counter!(telemetry::REPLIES, "kind" => kind, "effect" => effect_name).increment(1);
        debug!(kind, effect = effect_name, task_id = ?reply.task_id(), "reply");
        Ok(effect)
    }
}

/// Whether a presence message names a group and zone that could route tasks.
fn valid_presence(presence: &PresenceMessage) -> bool {
    topology::is_valid_name(&presence.group)
        && topology::is_valid_instance(&presence.instance)
        && presence.zone.as_deref().is_none_or(topology::is_valid_name)
}

/// Whether an observer registration names a valid observer and 1 to
/// [`MAX_OBSERVER_PATTERNS`] valid topic patterns.
fn valid_observe(observe: &ObserveMessage) -> bool {
    topology::is_valid_name(&observe.observer)
        && (1..=MAX_OBSERVER_PATTERNS).contains(&observe.patterns.len())
        && observe
            .patterns
            .iter()
            .all(|p| topology::is_valid_topic_pattern(p))
}

/// Counts what a result did to its run.
fn count_outcome(state: RunState, result: &ResultMessage) {
    metrics::counter!(telemetry::RESULTS, "state" => state.as_str()).increment(1);
    match (state, &result.outcome) {
        (RunState::Failed, _) => metrics::counter!(telemetry::RETRIES_SCHEDULED).increment(1),
        (RunState::Dead, TaskOutcome::Failed { error }) => {
            let reason = if error.retryable {
                "failed"
            } else {
                "permanent"
            };
            warn!(task_id = %result.task_id, reason, error = %error.message, "run given up");
            metrics::counter!(telemetry::DEAD_RUNS, "reason" => reason).increment(1);
        }
        _ => {}
    }
}

async fn dead_letter(delivery: Delivery) -> Handled {
    metrics::counter!(telemetry::MALFORMED, "queue" => topology::REPLY_QUEUE).increment(1);
    let _ = delivery.reject(BasicRejectOptions { requeue: false }).await;
    Handled::DeadLettered
}

/// Replaces NUL characters, which PostgreSQL cannot store in text or jsonb, so a
/// consumer's odd output never makes a reply unstorable.
fn sanitise(reply: &mut Reply) {
    fn clean(text: &mut String) {
        if text.contains('\0') {
            *text = text.replace('\0', "\u{fffd}");
        }
    }
    fn clean_value(value: &mut Value) {
        match value {
            Value::String(s) => clean(s),
            Value::Array(items) => items.iter_mut().for_each(clean_value),
            Value::Object(map) => {
                let dirty: Vec<String> = map.keys().filter(|k| k.contains('\0')).cloned().collect();
                for key in dirty {
                    if let Some(v) = map.remove(&key) {
                        map.insert(key.replace('\0', "\u{fffd}"), v);
                    }
                }
                map.values_mut().for_each(clean_value);
            }
            _ => {}
        }
    }
    match reply {
        // Names and patterns are validated whole; a NUL fails validation.
        Reply::Observe(_) => {}
        Reply::Ack(ack) => clean(&mut ack.consumer),
        Reply::Presence(presence) => {
            clean(&mut presence.instance);
            clean(&mut presence.group);
            if let Some(zone) = presence.zone.as_mut() {
                clean(zone);
            }
        }
        Reply::Heartbeat(heartbeat) => {
            clean(&mut heartbeat.consumer);
            if let Some(note) = heartbeat.progress.as_mut().and_then(|p| p.note.as_mut()) {
                clean(note);
            }
        }
        Reply::Result(result) => {
            clean(&mut result.consumer);
            match &mut result.outcome {
                TaskOutcome::Succeeded {
                    output: Some(output),
                } => clean_value(output),
                TaskOutcome::Succeeded { output: None } => {}
                TaskOutcome::Failed { error } => clean(&mut error.message),
            }
        }
    }
}

async fn open_consumer(
    connection: &lapin::Connection,
) -> Result<(Channel, lapin::Consumer), lapin::Error> {
    let channel = connection.create_channel().await?;
    topology::declare_replies(&channel).await?;
    channel
        .basic_qos(PREFETCH, BasicQosOptions::default())
        .await?;
    let consumer = channel
        .basic_consume(
            topology::REPLY_QUEUE.into(),
            "chimed-results".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok((channel, consumer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_consumer::protocol::TaskError;
    use serde_json::json;

    #[test]
    fn nul_characters_are_replaced() {
        let mut reply = Reply::Result(ResultMessage {
            v: 1,
            task_id: uuid::Uuid::nil(),
            attempt: 1,
            consumer: "a\0b".into(),
            finished_at: chrono::Utc::now(),
            replayed: false,
            outcome: TaskOutcome::Succeeded {
                output: Some(json!({"k\0": ["x\0", {"y": "\0"}]})),
            },
        });
        sanitise(&mut reply);
        let text = serde_json::to_string(&reply).unwrap();
        assert!(!text.contains("\\u0000"), "{text}");
        let mut failed = Reply::Result(ResultMessage {
            v: 1,
            task_id: uuid::Uuid::nil(),
            attempt: 1,
            consumer: "c".into(),
            finished_at: chrono::Utc::now(),
            replayed: false,
            outcome: TaskOutcome::Failed {
                error: TaskError {
                    message: "bad\0".into(),
                    retryable: false,
                    retry_after_ms: None,
                },
            },
        });
        sanitise(&mut failed);
        assert!(!serde_json::to_string(&failed).unwrap().contains("\\u0000"));
    }

    #[test]
    fn presence_must_name_routable_groups_and_zones() {
        let presence = |group: &str, zone: Option<&str>| PresenceMessage {
            v: 1,
            instance: "web-1".into(),
            group: group.into(),
            zone: zone.map(str::to_string),
            broadcast: false,
            at: chrono::Utc::now(),
        };
        assert!(valid_presence(&presence("web", Some("dc1"))));
        assert!(valid_presence(&presence("web", None)));
        assert!(!valid_presence(&presence("web", Some("a.b"))));
        assert!(!valid_presence(&presence("we b", None)));
    }

    #[test]
    fn observer_registrations_must_carry_a_name_and_usable_patterns() {
        let observe = |observer: &str, patterns: Vec<String>| ObserveMessage {
            v: 1,
            observer: observer.into(),
            patterns,
            at: chrono::Utc::now(),
        };
        let one = |p: &str| vec![p.to_string()];
        assert!(valid_observe(&observe("audit", one("shop.*"))));
        assert!(valid_observe(&observe("audit", one("#"))));
        assert!(!valid_observe(&observe("audit", vec![])));
        assert!(!valid_observe(&observe("audit", one("shop..x"))));
        assert!(!valid_observe(&observe("au dit", one("#"))));
        let too_many = (0..=MAX_OBSERVER_PATTERNS)
            .map(|i| format!("a{i}.*"))
            .collect();
        assert!(!valid_observe(&observe("audit", too_many)));
    }

    #[test]
    fn outages_are_transient_and_bad_data_is_not() {
        assert!(StoreError::Database(sqlx::Error::PoolTimedOut).is_transient());
        assert!(
            !StoreError::Corrupt {
                what: "x".into(),
                reason: "y".into()
            }
            .is_transient()
        );
    }
}
