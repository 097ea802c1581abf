//! The life of one delivery, from parse to acknowledgement. Deliveries from every queue
//! (group, zone, broadcast) take the same path; outcomes are looked up and recorded by
//! [`TaskContext::idempotency_key`], which is per instance for broadcast tasks.

use std::time::Duration;

use chrono::Utc;
use lapin::message::Delivery;
use tracing::{debug, warn};

use super::{
    heartbeat,
    replies::{PendingReply, ReplyError, ReplyPublisher},
    settlement::Settler,
    shared::{Registered, Shared},
};
use crate::{
    backoff::Backoff,
    handler::{HandlerError, TaskContext, catch_panic, outcome_of},
    idempotency::{IdempotencyError, RecordedOutcome, is_final},
    protocol::{TaskMessage, TaskOutcome},
};

/// Pause before handing a delivery back to the queue, so a persistent failure does not
/// turn into a hot redelivery loop.
const REQUEUE_PAUSE: Duration = Duration::from_secs(1);
/// How long a delivery is held while the idempotency store is unavailable. Every return
/// to a quorum queue counts towards its delivery limit, so an outage is waited out here
/// rather than by requeueing; this stays well below RabbitMQ's 30-minute consumer timeout.
const MAX_STORE_WAIT: Duration = Duration::from_secs(10 * 60);

#[derive(Debug, thiserror::Error)]
enum DeliveryError {
    #[error("could not publish reply: {0}")]
    Reply(#[from] ReplyError),
    #[error("idempotency store failed: {0}")]
    Idempotency(#[from] IdempotencyError),
    #[error("shutting down before the handler started")]
    Stopping,
}

pub(super) async fn process(
    delivery: Delivery,
    shared: &Shared,
    replies: &ReplyPublisher,
    settler: &Settler,
) {
    if let Some(expected) = &shared.settings.scheduler_user {
        let user = delivery.properties.user_id().as_ref().map(|u| u.as_str());
        if user != Some(expected.as_str()) {
            warn!(user, expected = %expected, group = %shared.settings.group,
                "dead-lettering a task not published by the scheduler's user");
            metrics::counter!("chime_consumer_refused_tasks_total", "reason" => "user")
                .increment(1);
            settler.dead_letter(&delivery);
            return;
        }
    }
    let task = match TaskMessage::from_slice(&delivery.data) {
        Ok(task) => task,
        Err(error) => {
            warn!(%error, group = %shared.settings.group, "dead-lettering a malformed task");
            metrics::counter!("chime_consumer_malformed_tasks_total").increment(1);
            settler.dead_letter(&delivery);
            return;
        }
    };
    let publisher = delivery
        .properties
        .app_id()
        .as_ref()
        .map(|id| id.to_string());
    let ctx = TaskContext::new(task, shared.settings.instance.clone()).with_publisher(publisher);
    // Every lookup and record below uses the idempotency key (per instance for
    // broadcasts), so two deliveries of one key run one after the other.
    let _one_at_a_time = shared.key_locks.lock(ctx.idempotency_key()).await;
    let give_up_at = tokio::time::Instant::now() + MAX_STORE_WAIT;
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    let outcome = loop {
        match handle(&ctx, shared, replies).await {
            Err(DeliveryError::Idempotency(error)) if tokio::time::Instant::now() < give_up_at => {
                let delay = backoff.next_delay();
                warn!(%error, task_id = %ctx.task_id(), retry_in_ms = delay.as_millis() as u64,
                    "idempotency store unavailable; holding the task");
                tokio::time::sleep(delay).await;
            }
            other => break other,
        }
    };
    match outcome {
        // Not started: the delivery goes back to the queue when the channel closes.
        Err(DeliveryError::Stopping) => {}
        Ok(()) => settler.ack(&delivery),
        Err(error) => {
            warn!(%error, task_id = %ctx.task_id(), job = ctx.job(),
                "task not completed; handing it back to the queue");
            tokio::time::sleep(REQUEUE_PAUSE).await;
            settler.requeue(&delivery);
        }
    }
}

async fn handle(
    ctx: &TaskContext,
    shared: &Shared,
    replies: &ReplyPublisher,
) -> Result<(), DeliveryError> {
    if shared.cancels.is_cancelled(ctx.task_id()) {
        // Withdrawn before any consumer started it: the delivery is settled with no
        // ack or result (the run is `cancelled` already) and the handler never runs.
        debug!(task_id = %ctx.task_id(), job = ctx.job(), "skipping a cancelled run's task");
        metrics::counter!("chime_consumer_cancelled_tasks_total").increment(1);
        return Ok(());
    }
    match shared.handlers.for_job(ctx.job()) {
        #[cfg(feature = "postgres")]
        Some(Registered::Transactional(handler, store)) => {
            // Boxed: the database's futures are large, and every delivery's task would
            // otherwise be sized for them.
            Box::pin(handle_transactional(ctx, shared, replies, handler, store)).await
        }
        registered => {
            if let Some(recorded) = shared.idempotency.lookup(ctx.idempotency_key()).await? {
                report(ctx, &recorded, true);
                replies.send_result(ctx, &recorded, true).await?;
                return Ok(());
            }
            let slot = shared.handler_slot().await.ok_or(DeliveryError::Stopping)?;
            // Neither the handler nor the result waits for the ack's confirm: the result
            // is published behind the ack on the same channel (below).
            let ack = replies.start_ack(ctx).await?;
            let result = match registered {
                Some(Registered::Plain(handler)) => {
                    with_heartbeats(ctx, shared, replies, |running| {
                        catch_panic(|| handler.handle(running))
                    })
                    .await
                }
                _ => Err(HandlerError::permanent(format!(
                    "no handler registered for job {:?} in group {:?}",
                    ctx.job(),
                    ctx.group()
                ))),
            };
            drop(slot);
            // Recorded before the result goes out, so a redelivery after a lost result
            // replays the outcome instead of running the handler again.
            let recorded = RecordedOutcome {
                outcome: outcome_of(&result),
                finished_at: Utc::now(),
            };
            if is_final(&recorded.outcome)
                && let Err(error) = shared
                    .idempotency
                    .record(ctx.idempotency_key(), &recorded)
                    .await
            {
                // The result still goes out; only duplicate suppression is weakened.
                warn!(%error, task_id = %ctx.task_id(), "could not record the outcome");
            }
            report(ctx, &recorded, false);
            send_result_behind(ctx, replies, ack, &recorded, false).await
        }
    }
}

/// Publishes the result right behind the task's ack, without waiting for the ack's
/// confirm first, then waits for both. RabbitMQ keeps one channel's messages to one queue
/// in order (often they travel in one reply batch), so the scheduler still reads the ack
/// before the result, and a delivery is held for one confirm round trip instead of two.
/// Only the result's confirm decides: a confirmed result settles the run whether or not
/// its ack was queued; an unconfirmed one hands the delivery back, and the redelivery
/// replays the recorded outcome.
async fn send_result_behind(
    ctx: &TaskContext,
    replies: &ReplyPublisher,
    ack: PendingReply,
    recorded: &RecordedOutcome,
    replayed: bool,
) -> Result<(), DeliveryError> {
    let result = replies.start_result(ctx, recorded, replayed).await?;
    if let Err(error) = ack.confirmed().await {
        debug!(%error, task_id = %ctx.task_id(), "the ack was not confirmed; the result decides");
    }
    result.confirmed().await?;
    Ok(())
}

#[cfg(feature = "postgres")]
async fn handle_transactional(
    ctx: &TaskContext,
    shared: &Shared,
    replies: &ReplyPublisher,
    handler: &std::sync::Arc<dyn crate::idempotency::TransactionalHandler>,
    store: &crate::idempotency::PgIdempotencyStore,
) -> Result<(), DeliveryError> {
    use crate::idempotency::TxExecution;
    let slot = shared.handler_slot().await.ok_or(DeliveryError::Stopping)?;
    let ack = replies.start_ack(ctx).await?;
    let executed = with_heartbeats(ctx, shared, replies, |running| {
        store.execute(handler.as_ref(), running)
    })
    .await;
    drop(slot);
    let (recorded, replayed) = match executed? {
        TxExecution::Ran(recorded) => (recorded, false),
        TxExecution::Replayed(recorded) => (recorded, true),
    };
    report(ctx, &recorded, replayed);
    send_result_behind(ctx, replies, ack, &recorded, replayed).await
}

/// Runs `work` (given the context it should use) with heartbeats for `ctx` beside it,
/// and the run's cancellation connected to the context it gets.
async fn with_heartbeats<W, F>(
    ctx: &TaskContext,
    shared: &Shared,
    replies: &ReplyPublisher,
    work: W,
) -> F::Output
where
    W: FnOnce(TaskContext) -> F,
    F: std::future::Future,
{
    let every = heartbeat::interval(
        shared.settings.heartbeat_interval,
        ctx.task().run_timeout_ms,
    );
    let running = shared.cancels.start(ctx.task_id());
    let ctx = ctx.clone().with_cancel(running.token());
    heartbeat::beside(&ctx, replies, every, work).await
}

fn report(ctx: &TaskContext, recorded: &RecordedOutcome, replayed: bool) {
    let outcome = match &recorded.outcome {
        TaskOutcome::Succeeded { .. } => "succeeded",
        TaskOutcome::Failed { error } if error.retryable => "retryable",
        TaskOutcome::Failed { .. } => "failed",
    };
    if replayed {
        metrics::counter!("chime_consumer_replayed_total").increment(1);
    }
    metrics::counter!("chime_consumer_tasks_total", "outcome" => outcome, "replayed" => replayed.to_string())
        .increment(1);
    debug!(task_id = %ctx.task_id(), job = ctx.job(), attempt = ctx.attempt(), outcome, replayed,
        "task finished");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output_size<'a, F: std::future::Future>(
        _: fn(Delivery, &'a Shared, &'a ReplyPublisher, &'a Settler) -> F,
    ) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every delivery runs as its own task, whose future is allocated and copied per
    /// delivery: at thousands of tasks a second a large one showed in the consumer's
    /// profile (11.5 KB, sized for the database's futures on the transactional path).
    #[test]
    fn a_delivery_task_stays_small() {
        let size = output_size(process);
        assert!(size <= 4096, "a delivery's future takes {size} bytes");
    }
}
