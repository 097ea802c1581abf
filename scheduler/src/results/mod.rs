//! The result collector: consumes consumers' acks and results from the reply queue and
//! applies them to runs.
//!
//! - Replies are applied in batches: everything the broker pushes within [`GATHER_FOR`]
//!   of a batch's first message (up to [`MAX_BATCH_REPLIES`]) goes to the store in a few
//!   transactions (see [`Store::reply_rounds`]). A
//!   message may itself be a batch (`"type": "batch"`); it is applied or dead-lettered
//!   item by item.
//! - A reply that does not parse or is invalid is dead-lettered to `chime.replies.dlq`
//!   with its reason in the `x-chime-reject-reason` header, and counted by reason
//!   ([`reject`]); in a batch, only the bad item is, and the other items are applied. It
//!   never stops the collector.
//! - When the store is unavailable the collector holds the replies and retries with
//!   backoff (up to [`MAX_STORE_WAIT`]) instead of requeueing them: every return to a
//!   quorum queue counts towards its delivery limit, and a requeue loop would
//!   dead-letter good replies during a database failover.
//! - A reply the store refuses as data is dead-lettered with its message and counted
//!   like a malformed one; the rest of the batch is applied message by message.
//! - Every probe interval it drops a probe into the reply queue (from a connection of
//!   its own: RabbitMQ blocks publishing connections under a resource alarm, and the
//!   consumer's must keep draining), and notes in [`ReplyProgress`] how far through the
//!   queue it has got when the probe is applied ([`progress`]), so the reconciler does
//!   not judge an ack late while it waits here.

mod progress;
mod reject;
mod validate;

pub use progress::ReplyProgress;

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use lapin::{
    Channel,
    message::Delivery,
    options::{
        BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
    },
    types::FieldTable,
};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use chime_consumer::{
    backoff::Backoff,
    protocol::{Reply, ResultMessage, TaskOutcome, topology},
};

use crate::{
    broker,
    dispatch::DispatchHandle,
    domain::RunState,
    store::{self, ReplyApplied, ReplyEffect, Store, StoreError},
    telemetry,
};

/// Replies RabbitMQ may push ahead of the collector.
const PREFETCH: u16 = 250;
/// Replies gathered into one store transaction, at most (a message holding a larger
/// batch is still applied whole).
pub const MAX_BATCH_REPLIES: usize = 500;
/// How long a batch that is not full waits for more replies to join it. A reply only
/// moves its run's state (the task has reached its consumer by then), and every store
/// transaction has a fixed cost, so at a few thousand fires a second fewer, larger
/// transactions leave the CPU to the fire path; a run's state lags by this much at most.
const GATHER_FOR: Duration = Duration::from_millis(25);
/// Longest a reply is held while the store is unavailable, well below RabbitMQ's
/// 30-minute consumer timeout.
pub const MAX_STORE_WAIT: Duration = Duration::from_secs(20 * 60);

/// A reply message, parsed: its delivery and the replies it carries, in order, or the
/// send time of a progress probe.
struct Received {
    delivery: Delivery,
    replies: Vec<Reply>,
    probe: Option<DateTime<Utc>>,
}

/// Why replies were not applied.
enum Unapplied {
    /// The store refuses them as data.
    Refused(StoreError),
    /// The store stayed unavailable past [`MAX_STORE_WAIT`], or the collector stops.
    GaveUp,
}

/// The result collector service.
pub struct ResultCollector {
    store: Arc<dyn Store>,
    amqp_url: String,
    probes: Probes,
    /// Told which runs got a reply, so their `dispatched` marks are not written.
    dispatch: DispatchHandle,
    /// Where refused replies are dead-lettered with their reason.
    rejects: reject::Rejects,
}

/// How the collector measures its progress through the reply queue (see [`progress`]).
#[derive(Debug, Clone)]
pub struct Probes {
    /// The node stamped on its probes.
    pub node: String,
    /// Time between probes.
    pub interval: Duration,
    /// Where the applied probes are noted.
    pub progress: ReplyProgress,
}

impl ResultCollector {
    /// A collector applying replies from the broker at `amqp_url` to `store`, telling
    /// `dispatch` which runs were answered.
    pub fn new(
        store: Arc<dyn Store>,
        amqp_url: impl Into<String>,
        probes: Probes,
        dispatch: DispatchHandle,
    ) -> Self {
        let amqp_url = amqp_url.into();
        Self {
            store,
            rejects: reject::Rejects::new(&amqp_url),
            amqp_url,
            probes,
            dispatch,
        }
    }

    /// Consumes until `cancel` fires, reconnecting with backoff after broker failures,
    /// and sends progress probes beside it.
    pub async fn run(self, cancel: CancellationToken) {
        tokio::join!(
            self.collect(&cancel),
            progress::send_probes(
                &self.amqp_url,
                &self.probes.node,
                self.probes.interval,
                &cancel
            ),
        );
    }

    async fn collect(&self, cancel: &CancellationToken) {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        while let Some(connection) =
            broker::connect_with_backoff(&self.amqp_url, "results", cancel).await
        {
            let end = self.session(&connection, cancel, &mut backoff).await;
            let _ = connection
                .close(200, "chimed result collector stopping".into())
                .await;
            match end {
                Ok(()) => {
                    self.rejects.close().await;
                    return;
                }
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
            let mut batch = Vec::new();
            let mut replies = 0;
            let mut next = Some(next);
            let gathered_by = tokio::time::Instant::now() + GATHER_FOR;
            let ended = loop {
                match next {
                    Some(Some(Ok(delivery))) => {
                        if let Some(received) = self.receive(delivery).await {
                            replies += received.replies.len();
                            batch.push(received);
                        }
                    }
                    Some(Some(Err(error))) => break Some(error.to_string()),
                    Some(None) => break Some("reply consumer ended".into()),
                    None => break None,
                }
                if replies >= MAX_BATCH_REPLIES {
                    break None;
                }
                next = tokio::time::timeout_at(gathered_by, consumer.next())
                    .await
                    .ok();
            };
            self.apply_batch(batch, cancel).await;
            if let Some(error) = ended {
                return Err(error);
            }
            backoff.reset();
        }
    }

    /// Applies the replies of `batch` (one transaction per [`Store::reply_rounds`] round) and settles
    /// every message; if the store refuses them, applies the messages one by one. Notes
    /// the newest probe in it once every message before it is settled.
    async fn apply_batch(&self, batch: Vec<Received>, cancel: &CancellationToken) {
        let Some(last) = batch.last() else { return };
        let newest_probe = batch.iter().filter_map(|r| r.probe).max();
        let replies: Vec<&Reply> = batch.iter().flat_map(|r| &r.replies).collect();
        let settled = match self.apply(&replies, cancel).await {
            Ok(()) => {
                // Every earlier delivery on this channel is settled already.
                let _ = last
                    .delivery
                    .acker
                    .ack(BasicAckOptions { multiple: true })
                    .await;
                true
            }
            Err(Unapplied::GaveUp) => {
                for received in &batch {
                    requeue(&received.delivery).await;
                }
                false
            }
            Err(Unapplied::Refused(error)) if batch.len() == 1 => {
                error!(%error, replies = replies.len(), "the store refuses a reply; dead-lettering its message");
                self.rejects
                    .message(
                        &last.delivery,
                        reject::RejectKind::StoreRefused,
                        &error.to_string(),
                    )
                    .await;
                true
            }
            Err(Unapplied::Refused(_)) => {
                let mut settled = true;
                for received in &batch {
                    let replies: Vec<&Reply> = received.replies.iter().collect();
                    match self.apply(&replies, cancel).await {
                        Ok(()) => {
                            let _ = received.delivery.ack(BasicAckOptions::default()).await;
                        }
                        Err(Unapplied::GaveUp) => {
                            requeue(&received.delivery).await;
                            settled = false;
                        }
                        Err(Unapplied::Refused(error)) => {
                            error!(%error, replies = replies.len(), "the store refuses a reply; dead-lettering its message");
                            self.rejects
                                .message(
                                    &received.delivery,
                                    reject::RejectKind::StoreRefused,
                                    &error.to_string(),
                                )
                                .await;
                        }
                    }
                }
                settled
            }
        };
        if let (true, Some(sent_at)) = (settled, newest_probe) {
            self.probes.progress.applied(sent_at);
        }
    }

    /// Applies `replies` in as few transactions as [`Store::reply_rounds`] allows, holding them while
    /// the store is unavailable.
    async fn apply(&self, replies: &[&Reply], cancel: &CancellationToken) -> Result<(), Unapplied> {
        // One transaction per round of the store's split (see `Store::reply_rounds` for
        // why). Rounds are ordered by task, so every collector, and the dispatcher's
        // marker, lock runs in the same order.
        for round in self.store.reply_rounds(replies) {
            let round: Vec<&Reply> = round.iter().map(|&i| replies[i]).collect();
            self.apply_round(&round, cancel).await?;
        }
        Ok(())
    }

    /// Applies `replies` in one transaction, then each reply to a broadcast run on its
    /// own.
    async fn apply_round(
        &self,
        replies: &[&Reply],
        cancel: &CancellationToken,
    ) -> Result<(), Unapplied> {
        let applied = self
            .hold_through_outage(cancel, || {
                self.store
                    .record_replies(replies, chrono::Utc::now(), &rand::random)
            })
            .await?;
        metrics::counter!(telemetry::REPLY_TRANSACTIONS).increment(1);
        self.dispatch
            .runs_answered(answered_runs(replies, &applied));
        for (reply, applied) in replies.iter().copied().zip(applied) {
            let applied = if applied.0 == ReplyEffect::Broadcast {
                self.hold_through_outage(cancel, || {
                    store::record_broadcast_reply(
                        self.store.as_ref(),
                        reply,
                        chrono::Utc::now(),
                        rand::random(),
                    )
                })
                .await?
            } else {
                applied
            };
            count(reply, applied);
        }
        Ok(())
    }

    /// Runs `write` until it succeeds, retrying transient store errors with backoff for
    /// up to [`MAX_STORE_WAIT`] (or until `cancel`).
    async fn hold_through_outage<T, F: Future<Output = Result<T, StoreError>>>(
        &self,
        cancel: &CancellationToken,
        write: impl Fn() -> F,
    ) -> Result<T, Unapplied> {
        let give_up_at = tokio::time::Instant::now() + MAX_STORE_WAIT;
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
        loop {
            let error = match write().await {
                Ok(done) => return Ok(done),
                Err(error) => error,
            };
            metrics::counter!(telemetry::STORE_ERRORS, "operation" => "record_reply").increment(1);
            if !error.is_transient() {
                return Err(Unapplied::Refused(error));
            }
            if cancel.is_cancelled() || tokio::time::Instant::now() >= give_up_at {
                warn!(%error, "cannot record replies; handing them back to the queue");
                return Err(Unapplied::GaveUp);
            }
            let delay = backoff.next_delay();
            warn!(%error, retry_in_ms = delay.as_millis() as u64,
                "cannot record replies; holding them until the store answers");
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = cancel.cancelled() => {}
            }
        }
    }
}

impl ResultCollector {
    /// Parses a delivery into its replies, ready for the store. A message that is not one
    /// reply or a batch is dead-lettered whole; a bad item of a batch (one that does not
    /// parse, speaks another version or names something invalid) alone, with its reason.
    /// `None` when nothing in it is left to apply (the delivery is settled then).
    async fn receive(&self, delivery: Delivery) -> Option<Received> {
        match progress::Probe::parse(&delivery.properties, &delivery.data) {
            Some(Ok(probe)) => {
                return Some(Received {
                    delivery,
                    replies: Vec::new(),
                    probe: Some(probe.sent_at),
                });
            }
            Some(Err(error)) => {
                warn!(%error, queue = topology::REPLY_QUEUE, "dead-lettering a malformed probe");
                self.rejects
                    .message(&delivery, reject::RejectKind::Malformed, &error.to_string())
                    .await;
                return None;
            }
            None => {}
        }
        let items = match Reply::items_from_slice(&delivery.data) {
            Ok(items) => items,
            Err(error) => {
                warn!(%error, queue = topology::REPLY_QUEUE, "dead-lettering a malformed reply batch");
                let kind = reject::RejectKind::of(&error);
                self.rejects
                    .message(&delivery, kind, &error.to_string())
                    .await;
                self.note_rejected(&delivery.data, &error.to_string()).await;
                return None;
            }
        };
        let now = chrono::Utc::now();
        let mut replies = Vec::new();
        let mut refused = Vec::new();
        for item in items {
            match item.reply {
                Ok(mut reply) => match validate::admit(&mut reply, now) {
                    Ok(()) => replies.push(reply),
                    Err(reason) => refused.push((item.body, reject::RejectKind::Invalid, reason)),
                },
                Err(error) => {
                    warn!(%error, queue = topology::REPLY_QUEUE, "dead-lettering a malformed reply");
                    refused.push((item.body, reject::RejectKind::of(&error), error.to_string()));
                }
            }
        }
        if replies.is_empty() {
            // Nothing to apply: one reason stands for the message (its only item, or the
            // first refused one of a batch).
            if let [(body, kind, reason)] = refused.as_slice()
                && *body == delivery.data
            {
                self.rejects.message(&delivery, *kind, reason).await;
                self.note_rejected(body, reason).await;
                return None;
            }
        }
        let mut all_published = true;
        for (body, kind, reason) in &refused {
            all_published &= self
                .rejects
                .item(body, &delivery.properties, *kind, reason)
                .await;
            self.note_rejected(body, reason).await;
        }
        if replies.is_empty() {
            // Settled here; a batch whose refused items could not be published goes to
            // the broker's dead-lettering whole rather than being lost.
            let _ = if all_published {
                delivery.ack(BasicAckOptions::default()).await
            } else {
                delivery
                    .reject(lapin::options::BasicRejectOptions { requeue: false })
                    .await
            };
            return None;
        }
        Some(Received {
            delivery,
            replies,
            probe: None,
        })
    }
}

impl ResultCollector {
    /// Notes a refused reply on its run's history (event `reply_rejected`, with the
    /// reason), if its `task_id` is readable and the run exists. Best effort: a store
    /// failure is logged, never retried.
    async fn note_rejected(&self, body: &[u8], reason: &str) {
        #[derive(serde::Deserialize)]
        struct About {
            task_id: Option<uuid::Uuid>,
            attempt: Option<u32>,
            consumer: Option<String>,
        }
        // Fields not named are skipped, which has no depth limit.
        let Ok(About {
            task_id: Some(task_id),
            attempt,
            consumer,
        }) = serde_json::from_slice::<About>(body)
        else {
            return;
        };
        let record = chime_consumer::protocol::AttemptRecord {
            attempt: attempt.unwrap_or(0),
            event: REPLY_REJECTED.into(),
            at: chrono::Utc::now(),
            consumer: consumer.filter(|c| topology::is_valid_instance(c)),
            error: Some(reason.chars().take(1024).collect()),
            retry_at: None,
        };
        if let Err(error) = self.store.note_on_run(task_id, &record).await {
            warn!(%error, %task_id, "cannot note a refused reply on its run");
        }
    }
}

/// The history event of a reply the collector refused.
pub const REPLY_REJECTED: &str = "reply_rejected";

/// The runs a recorded round moved on from `scheduled` or `dispatched`: those of the
/// replies about a task (an ack, a heartbeat or a result) that applied.
fn answered_runs<'a>(
    replies: &'a [&Reply],
    applied: &'a [ReplyApplied],
) -> impl Iterator<Item = uuid::Uuid> + 'a {
    replies
        .iter()
        .zip(applied)
        .filter(|(_, (effect, _))| *effect == ReplyEffect::Applied)
        .filter_map(|(reply, _)| reply.task_id())
}

/// Counts what one reply did.
fn count(reply: &Reply, (effect, state): ReplyApplied) {
    let kind = match reply {
        Reply::Ack(_) => "ack",
        Reply::Heartbeat(_) => "heartbeat",
        Reply::Result(_) => "result",
        Reply::Presence(_) => "presence",
        Reply::Observe(_) => "observe",
    };
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

async fn requeue(delivery: &Delivery) {
    let _ = delivery
        .nack(BasicNackOptions {
            requeue: true,
            ..BasicNackOptions::default()
        })
        .await;
}

async fn open_consumer(
    connection: &lapin::Connection,
) -> Result<(Channel, lapin::Consumer), lapin::Error> {
    let channel = connection.create_channel().await?;
    topology::declare_replies(connection, &channel).await?;
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

    #[test]
    fn applied_acks_and_results_answer_their_runs() {
        use chime_consumer::protocol::{AckMessage, PresenceMessage};
        let ack = |n: u128| {
            Reply::Ack(AckMessage {
                v: 1,
                task_id: uuid::Uuid::from_u128(n),
                attempt: 1,
                consumer: "c".into(),
                acked_at: Utc::now(),
            })
        };
        let result = Reply::Result(ResultMessage {
            v: 1,
            task_id: uuid::Uuid::from_u128(3),
            attempt: 1,
            consumer: "c".into(),
            finished_at: Utc::now(),
            replayed: false,
            outcome: TaskOutcome::Succeeded { output: None },
        });
        let presence = Reply::Presence(PresenceMessage {
            v: 1,
            instance: "i".into(),
            group: "g".into(),
            zone: None,
            broadcast: false,
            at: Utc::now(),
        });
        let (one, two, four) = (ack(1), ack(2), ack(4));
        let replies = [&one, &two, &result, &presence, &four];
        let applied = [
            (ReplyEffect::Applied, None),
            (ReplyEffect::Stale, None),
            (ReplyEffect::Applied, Some(RunState::Succeeded)),
            (ReplyEffect::Applied, None),
            (ReplyEffect::Broadcast, None),
        ];
        let answered: Vec<uuid::Uuid> = answered_runs(&replies, &applied).collect();
        assert_eq!(
            answered,
            [uuid::Uuid::from_u128(1), uuid::Uuid::from_u128(3)],
            "a stale ack, a presence and a broadcast reply answer nothing"
        );
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
