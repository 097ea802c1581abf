//! Applying a gathered batch of replies ([`Applier`]) through
//! [`Store::record_replies`], which splits it into its transactions; holding the
//! replies with backoff while the store is unavailable (up to [`MAX_STORE_WAIT`]) rather
//! than requeueing them, retrying only those not yet applied; dead-lettering what the store refuses as data; settling every
//! delivery; telling the dispatcher which runs were answered; and noting the newest
//! progress probe once everything before it is settled.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use lapin::{
    message::Delivery,
    options::{BasicAckOptions, BasicNackOptions},
};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use chime_consumer::{
    backoff::Backoff,
    protocol::{Reply, ResultMessage, TaskOutcome},
};

use super::{
    auth::MAX_STORE_WAIT,
    progress::ReplyProgress,
    receive::Received,
    reject::{RejectKind, Rejects},
};
use crate::{
    dispatch::DispatchHandle,
    domain::RunState,
    store::{ReplyApplied, ReplyEffect, Store, StoreError},
    telemetry,
};

/// Why replies were not applied.
enum Unapplied {
    /// The store refuses them as data.
    Refused(StoreError),
    /// The store stayed unavailable past [`MAX_STORE_WAIT`], or the collector stops.
    GaveUp,
}

/// Applies batches of replies to the store.
pub(super) struct Applier {
    store: Arc<dyn Store>,
    /// Told which runs got a reply, so their `dispatched` marks are not written.
    dispatch: DispatchHandle,
    /// Where the applied probes are noted.
    progress: ReplyProgress,
}

impl Applier {
    /// An applier writing to `store`, telling `dispatch` which runs were answered and
    /// noting applied probes in `progress`.
    pub(super) fn new(
        store: Arc<dyn Store>,
        dispatch: DispatchHandle,
        progress: ReplyProgress,
    ) -> Self {
        Self {
            store,
            dispatch,
            progress,
        }
    }

    /// Applies the replies of `batch` and settles every message; if the store refuses them, applies the messages one by
    /// one, dead-lettering through `rejects` those it refuses. Notes the newest probe in
    /// it once every message before it is settled.
    pub(super) async fn apply_batch(
        &self,
        batch: Vec<Received>,
        rejects: &Rejects,
        cancel: &CancellationToken,
    ) {
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
                rejects
                    .message(&last.delivery, RejectKind::StoreRefused, &error.to_string())
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
                            rejects
                                .message(
                                    &received.delivery,
                                    RejectKind::StoreRefused,
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
            self.progress.applied(sent_at);
        }
    }

    /// Applies `replies`, holding them while the store is unavailable. The store applies
    /// them in a few transactions (see [`Store::record_replies`]); when one fails, those
    /// before it are committed, so only the replies not yet applied are tried again and
    /// each reply is counted once.
    async fn apply(&self, replies: &[&Reply], cancel: &CancellationToken) -> Result<(), Unapplied> {
        let mut pending: Vec<&Reply> = replies.to_vec();
        let mut outage = Outage::new();
        loop {
            let failed = match self
                .store
                .record_replies(&pending, chrono::Utc::now(), &rand::random)
                .await
            {
                Ok(recorded) => {
                    let applied = recorded.effects.into_iter().enumerate().collect();
                    self.note_applied(&pending, applied, recorded.transactions);
                    return Ok(());
                }
                Err(failed) => failed,
            };
            if failed.transactions > 0 {
                // Progress: the rest gets a wait of its own, as each transaction had.
                outage = Outage::new();
            }
            let done: HashSet<usize> = failed.applied.iter().map(|&(index, _)| index).collect();
            self.note_applied(&pending, failed.applied, failed.transactions);
            pending = pending
                .into_iter()
                .enumerate()
                .filter(|(index, _)| !done.contains(index))
                .map(|(_, reply)| reply)
                .collect();
            outage.wait(failed.error, cancel).await?;
        }
    }

    /// Counts the store transactions committed and what each applied reply of
    /// `replies` (by index) did, and tells the dispatcher which runs were answered.
    fn note_applied(
        &self,
        replies: &[&Reply],
        applied: Vec<(usize, ReplyApplied)>,
        transactions: u32,
    ) {
        metrics::counter!(telemetry::REPLY_TRANSACTIONS).increment(u64::from(transactions));
        let (replies, applied): (Vec<&Reply>, Vec<ReplyApplied>) = applied
            .into_iter()
            .map(|(index, applied)| (replies[index], applied))
            .unzip();
        self.dispatch
            .runs_answered(answered_runs(&replies, &applied));
        let mut counts = ReplyCounts::default();
        for (reply, applied) in replies.into_iter().zip(applied) {
            counts.add(reply, applied);
        }
        counts.record();
    }
}

/// Waiting out a store that is unavailable: transient errors are retried with backoff
/// for up to [`MAX_STORE_WAIT`] (or until the collector stops).
struct Outage {
    give_up_at: tokio::time::Instant,
    backoff: Backoff,
}

impl Outage {
    fn new() -> Self {
        Self {
            give_up_at: tokio::time::Instant::now() + MAX_STORE_WAIT,
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(5)),
        }
    }

    /// After the store failed with `error`: waits before the next try, or says why
    /// there is none.
    async fn wait(
        &mut self,
        error: StoreError,
        cancel: &CancellationToken,
    ) -> Result<(), Unapplied> {
        metrics::counter!(telemetry::STORE_ERRORS, "operation" => "record_reply").increment(1);
        if !error.is_transient() {
            return Err(Unapplied::Refused(error));
        }
        if cancel.is_cancelled() || tokio::time::Instant::now() >= self.give_up_at {
            warn!(%error, "cannot record replies; handing them back to the queue");
            return Err(Unapplied::GaveUp);
        }
        let delay = self.backoff.next_delay();
        warn!(%error, retry_in_ms = delay.as_millis() as u64,
            "cannot record replies; holding them until the store answers");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = cancel.cancelled() => {}
        }
        Ok(())
    }
}

/// The runs that recorded replies moved on from `scheduled` or `dispatched`: those of the
/// replies about a task (an ack, a heartbeat or a result, to a broadcast run too) that
/// applied.
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
/// A batch's replies counted by label before they reach the metrics registry: a
/// labelled counter is looked up (its key built and hashed) on every call, which at
/// thousands of replies a second was a visible share of the collector's CPU.
#[derive(Default)]
struct ReplyCounts {
    /// Replies by (kind, effect).
    replies: HashMap<(&'static str, &'static str), u64>,
    /// Results by the state they left their run in.
    results: HashMap<&'static str, u64>,
    retries: u64,
}

impl ReplyCounts {
    fn add(&mut self, reply: &Reply, (effect, state): ReplyApplied) {
        let kind = match reply {
            Reply::Ack(_) => "ack",
            Reply::Heartbeat(_) => "heartbeat",
            Reply::Result(_) => "result",
            Reply::Presence(_) => "presence",
            Reply::Observe(_) => "observe",
        };
        if let (Some(state), Reply::Result(result)) = (state, reply) {
            *self.results.entry(state.as_str()).or_default() += 1;
            self.note_outcome(state, result);
        }
        let effect_name = match effect {
            ReplyEffect::Applied => "applied",
            ReplyEffect::Stale => "stale",
            ReplyEffect::UnknownRun | ReplyEffect::Broadcast => "unknown_run",
        };
        *self.replies.entry((kind, effect_name)).or_default() += 1;
        debug!(kind, effect = effect_name, task_id = ?reply.task_id(), "reply");
    }

    /// Notes a retry, or says why a run was given up.
    fn note_outcome(&mut self, state: RunState, result: &ResultMessage) {
        match (state, &result.outcome) {
            (RunState::Failed, _) => self.retries += 1,
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

    fn record(self) {
        for ((kind, effect), n) in self.replies {
            metrics::counter!(telemetry::REPLIES, "kind" => kind, "effect" => effect).increment(n);
        }
        for (state, n) in self.results {
            metrics::counter!(telemetry::RESULTS, "state" => state).increment(n);
        }
        if self.retries > 0 {
            metrics::counter!(telemetry::RETRIES_SCHEDULED).increment(self.retries);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

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
            version: None,
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
