//! Replaying a dead-letter queue. Where a message goes is derived by Chime, never read
//! from the message: a task goes to the route its run and job in the store give (the
//! run is revived as its next attempt); an observer's copy goes back to that observer's
//! own queue, and only if its run is on record; a reply goes back to the reply queue.
//! Headers such as `x-death` name whatever their publisher wrote, and anyone who can
//! publish to the dead-letter exchange can write them.

use chrono::{DateTime, Utc};
use lapin::{
    BasicProperties, Connection, message::Delivery, options::BasicAckOptions, types::FieldTable,
};

use chime_consumer::protocol::topology::{self, REPLY_EXCHANGE, REPLY_ROUTING_KEY};

use super::{DeadLetters, DlqError, DlqKind, ReplayReport, get, message, open_queue};
use chime_consumer::protocol::AttemptRecord;

use crate::{
    domain::RunState,
    store::{Expect, NextAttempt, OverdueRun, Replay, Store, StoreError},
    telemetry,
};

/// Revives a `dead` run for a replay from a dead-letter queue: `scheduled` as
/// attempt + 1, with a `replayed` entry in its history (a conditional
/// [`Store::next_attempts`], so two concurrent replays revive it once).
pub async fn replay_run(
    store: &dyn Store,
    run_id: uuid::Uuid,
    now: DateTime<Utc>,
) -> Result<Replay, StoreError> {
    let Some(mut run) = store.get_run(run_id).await? else {
        return Ok(Replay::Unknown);
    };
    if run.state != RunState::Dead {
        return Ok(Replay::NotDead(run.state));
    }
    let record = replay_record(run.attempt + 1, now);
    let next = NextAttempt {
        run_id,
        expect: Expect::exactly(RunState::Dead, run.attempt),
        record: Some(&record),
    };
    if !store.next_attempts(&[next], now).await?.contains(&run_id) {
        let state = store.get_run(run_id).await?.map(|r| r.state);
        return Ok(state.map_or(Replay::Unknown, Replay::NotDead));
    }
    let Some(job) = store.get_job(run.job_id).await? else {
        return Ok(Replay::Unknown);
    };
    run.state = RunState::Scheduled;
    run.attempt += 1;
    run.due_at = Some(now);
    run.history.push(record);
    Ok(Replay::Revived(Box::new(OverdueRun { run, job })))
}

/// The history entry of a replay from a dead-letter queue.
fn replay_record(attempt: u32, now: DateTime<Utc>) -> AttemptRecord {
    AttemptRecord {
        attempt,
        event: "replayed".into(),
        at: now,
        consumer: None,
        error: Some("replayed from the dead-letter queue".into()),
        retry_at: None,
    }
}

/// Why a message is left in place.
const RESOLVED: &str = "resolved";
const UNKNOWN_RUN: &str = "run unknown (job deleted or run pruned)";
const NOT_A_TASK: &str = "not a task (no run to route it by)";

impl DeadLetters {
    /// Replays up to `limit` messages of `queue` (of kind `kind`) on `connection`; see
    /// [`DeadLetters::replay`].
    pub(super) async fn replay_on(
        &self,
        connection: &Connection,
        queue: &str,
        kind: &DlqKind,
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
            let Some(message) = get_held_elsewhere(&channel, queue).await? else {
                break;
            };
            let delivery = message.delivery;
            let classified = message::classify(&delivery.data, &delivery.properties);
            if job.is_some() && classified.job() != job {
                continue;
            }
            let outcome = match (kind, &classified.task) {
                (DlqKind::Replies, _) => {
                    self.publish_raw(REPLY_EXCHANGE, REPLY_ROUTING_KEY, &delivery)
                        .await?;
                    Outcome::Replayed
                }
                (_, None) => Outcome::Skipped(NOT_A_TASK),
                (_, Some(task)) => match self.store.get_run(task.task_id).await? {
                    None => Outcome::Skipped(UNKNOWN_RUN),
                    Some(run) if super::is_resolved(&run) => Outcome::Skipped(RESOLVED),
                    Some(_) => match kind {
                        DlqKind::Observer(observer_queue) => {
                            // The default exchange delivers to the queue named, and only
                            // to it: the observer's own.
                            self.publish_raw("", observer_queue, &delivery).await?;
                            Outcome::Replayed
                        }
                        _ => self.revive(task.task_id).await?,
                    },
                },
            };
            match outcome {
                Outcome::Replayed => {
                    delivery.ack(BasicAckOptions::default()).await?;
                    metrics::counter!(telemetry::DLQ_REPLAYED, "queue" => queue.to_string())
                        .increment(1);
                    report.replayed += 1;
                }
                Outcome::Discarded => {
                    delivery.ack(BasicAckOptions::default()).await?;
                    report.discarded += 1;
                }
                Outcome::Skipped(why) => {
                    *report.skipped.entry(why.to_string()).or_default() += 1;
                }
            }
            progress(&report);
        }
        let _ = channel.close(200, "replay done".into()).await;
        let (channel, counted) = open_queue(connection, queue).await?;
        // Closed before the connection is (see `close`).
        let _ = channel.close(200, "replay done".into()).await;
        // The messages left in place go back as the channel closes, and the broker may
        // count the queue before it has put them all back: never report fewer than were
        // there less those removed.
        let removed = report.replayed + report.discarded;
        report.remaining = counted.max(depth.saturating_sub(removed));
        Ok(report)
    }

    /// Revives task `task_id`'s run as its next attempt and publishes it to the route its
    /// job gives, confirmed, marking it dispatched.
    async fn revive(&self, task_id: uuid::Uuid) -> Result<Outcome, DlqError> {
        match replay_run(self.store.as_ref(), task_id, Utc::now()).await? {
            Replay::Revived(item) => {
                let task = item.job.task_message(&item.run);
                self.publisher.declare_destination(&task).await?;
                let mut properties = BasicProperties::default()
                    .with_content_type("application/json".into())
                    .with_message_id(task.task_id.to_string().into())
                    .with_app_id(self.node.as_str().into());
                // Like every task: stamped with chimed's user, which consumers with a
                // `scheduler_user` check.
                if let Some(user) =
                    chime_consumer::protocol::user_id::connection_user(&self.amqp_url)
                {
                    properties = properties.with_user_id(user.into());
                }
                // On failure the run stays `scheduled` and the reconciler publishes it;
                // the DLQ copy stays too.
                let (exchange, routing_key) = topology::task_route(&task);
                self.publisher
                    .publish(exchange, &routing_key, &task.to_vec(), properties)
                    .await?;
                self.store
                    .mark_dispatched(&[task.task_id], Utc::now())
                    .await?;
                Ok(Outcome::Replayed)
            }
            Replay::NotDead(_) => Ok(Outcome::Discarded),
            Replay::Unknown => Ok(Outcome::Skipped(UNKNOWN_RUN)),
        }
    }

    /// Publishes `delivery`'s body as it is, with its properties less the broker's death
    /// record, to `exchange` with `routing_key`, confirmed.
    async fn publish_raw(
        &self,
        exchange: &str,
        routing_key: &str,
        delivery: &Delivery,
    ) -> Result<(), DlqError> {
        self.publisher
            .publish(
                exchange,
                routing_key,
                &delivery.data,
                strip_death(&delivery.properties),
            )
            .await?;
        Ok(())
    }
}

/// What a replay did with one message.
enum Outcome {
    /// Published (confirmed) and removed from the queue.
    Replayed,
    /// Removed: its run is under way already.
    Discarded,
    /// Left in place, for this reason.
    Skipped(&'static str),
}

/// The properties of a raw replay: the original ones without the broker's death record.
fn strip_death(properties: &BasicProperties) -> BasicProperties {
    let mut kept = FieldTable::default();
    for (k, v) in properties.headers().clone().unwrap_or_default().inner() {
        if !k.as_str().starts_with("x-death") && !k.as_str().starts_with("x-first-death") {
            kept.insert(k.clone(), v.clone());
        }
    }
    properties.clone().with_headers(kept)
}

/// A message of `queue`, waiting up to a second when the queue answers empty: the depth
/// counted at the start says there are more, so another reader (another node's sampler or
/// peek) holds them for a moment and returns them when its channel closes.
async fn get_held_elsewhere(
    channel: &lapin::Channel,
    queue: &str,
) -> Result<Option<lapin::message::BasicGetMessage>, lapin::Error> {
    for _ in 0..10 {
        if let Some(message) = get(channel, queue).await? {
            return Ok(Some(message));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(None)
}
