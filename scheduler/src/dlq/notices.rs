//! The dead-letter notices consumer: every message dead-lettered from a group's work queue
//! also reaches `chime.dlx.notices`. A task RabbitMQ dead-lettered itself (it reached the
//! delivery limit by crashing consumers, or a consumer rejected it) marks its run `dead`
//! with that reason — its copy already sits in the group's DLQ. Chime's own dead letters
//! and unreadable bodies are only counted.
//!
//! With `reply_users` set, a notice counts only when its validated `user_id` is `chimed`'s
//! own user: every task `chimed` publishes carries it, and dead-lettering keeps it. An app
//! user that may declare queues dead-lettering into `chime.dlx` may also publish there; a
//! task it forged into another group's dead letters is counted with reason
//! `unauthenticated` and kills no run.

use std::{sync::Arc, time::Duration};

use chrono::Utc;
use futures_util::StreamExt;
use lapin::{
    message::Delivery,
    options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions},
    types::FieldTable,
};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use chime_consumer::{
    backoff::Backoff,
    protocol::{AttemptRecord, topology},
};

use super::message::classify;
use crate::{
    broker,
    store::{Expect, Store},
    telemetry,
};

/// Notices RabbitMQ may push ahead.
const PREFETCH: u16 = 50;

/// Consumes dead-letter notices until `cancel` fires, reconnecting with backoff. With
/// `publisher` set, only notices whose `user_id` is that user (`chimed`'s) mark runs.
pub async fn run(
    store: Arc<dyn Store>,
    amqp_url: String,
    publisher: Option<String>,
    cancel: CancellationToken,
) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    while let Some(connection) =
        broker::connect_with_backoff(&amqp_url, "dead-letter-notices", &cancel).await
    {
        let end = session(store.as_ref(), &connection, publisher.as_deref(), &cancel).await;
        let _ = connection.close(200, "chimed stopping".into()).await;
        match end {
            Ok(()) => return,
            Err(error) => {
                let delay = backoff.next_delay();
                warn!(%error, retry_in_ms = delay.as_millis() as u64,
                    "lost the dead-letter notices consumer; reconnecting");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = cancel.cancelled() => return,
                }
            }
        }
    }
}

async fn session(
    store: &dyn Store,
    connection: &lapin::Connection,
    publisher: Option<&str>,
    cancel: &CancellationToken,
) -> Result<(), String> {
    let opened = async {
        let channel = connection.create_channel().await?;
        topology::declare_dead_letter_notices(&channel, None).await?;
        channel
            .basic_qos(PREFETCH, BasicQosOptions::default())
            .await?;
        let consumer = channel
            .basic_consume(
                topology::DEAD_LETTER_NOTICES.into(),
                "chimed-dead-letter-notices".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok::<_, lapin::Error>((channel, consumer))
    };
    let (channel, mut consumer) = opened.await.map_err(|e| e.to_string())?;
    info!(
        queue = topology::DEAD_LETTER_NOTICES,
        "watching dead letters"
    );
    loop {
        let next = tokio::select! {
            next = consumer.next() => next,
            () = cancel.cancelled() => {
                let _ = channel.close(200, "chimed stopping".into()).await;
                return Ok(());
            }
        };
        match next {
            Some(Ok(delivery)) => handle(store, delivery, publisher, cancel).await,
            Some(Err(error)) => return Err(error.to_string()),
            None => return Err("notices consumer ended".into()),
        }
    }
}

/// Applies one notice and acknowledges it.
async fn handle(
    store: &dyn Store,
    delivery: Delivery,
    publisher: Option<&str>,
    cancel: &CancellationToken,
) {
    let queue = delivery.routing_key.as_str().to_string();
    let classified = classify(&delivery.data, &delivery.properties);
    let mut reason = classified.view.reason.clone();
    let user = delivery.properties.user_id().as_ref().map(|u| u.as_str());
    let authentic = publisher.is_none_or(|publisher| user == Some(publisher));
    match (classified.view.kind.as_str(), &classified.task) {
        ("task", Some(task)) if !authentic => {
            warn!(run_id = %task.task_id, %queue, user = user.unwrap_or("(none)"),
                "ignoring a dead-letter notice chimed did not publish (user_id is not chimed's): it marks no run");
            reason = "unauthenticated".into();
        }
        ("task", Some(task)) => {
            let why = match reason.as_str() {
                "delivery_limit" => format!(
                    "dead-lettered by RabbitMQ: delivered {} times without being acknowledged (consumers crashed on it)",
                    topology::DELIVERY_LIMIT
                ),
                other => format!("dead-lettered by RabbitMQ ({other})"),
            };
            let record = AttemptRecord {
                attempt: task.attempt,
                event: reason.clone(),
                at: Utc::now(),
                consumer: None,
                error: Some(why.clone()),
                retry_at: None,
            };
            let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
            loop {
                match store
                    .kill_run(
                        task.task_id,
                        Expect::unfinished(),
                        &why,
                        Some(&record),
                        true,
                        Utc::now(),
                    )
                    .await
                {
                    Ok(killed) => {
                        if killed {
                            warn!(run_id = %task.task_id, job = %task.job, %reason, "run dead-lettered by the broker");
                            metrics::counter!(telemetry::DEAD_RUNS, "reason" => reason.clone())
                                .increment(1);
                        }
                        break;
                    }
                    Err(error) if error.is_transient() && !cancel.is_cancelled() => {
                        let delay = backoff.next_delay();
                        warn!(%error, retry_in_ms = delay.as_millis() as u64,
                            "cannot record a dead-lettered run; retrying");
                        tokio::time::sleep(delay).await;
                    }
                    Err(error) => {
                        warn!(%error, run_id = %task.task_id, "cannot record a dead-lettered run");
                        break;
                    }
                }
            }
        }
        ("dead_letter", _) => {}
        _ => {
            metrics::counter!(telemetry::MALFORMED, "queue" => queue.clone()).increment(1);
        }
    }
    let label = if classified.view.kind == "dead_letter" {
        "scheduler".to_string()
    } else {
        reason
    };
    metrics::counter!(telemetry::DEAD_LETTERED, "queue" => queue, "reason" => label).increment(1);
    let _ = delivery.ack(BasicAckOptions::default()).await;
}
