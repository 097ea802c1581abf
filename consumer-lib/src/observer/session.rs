//! One connection's worth of observing: declare the observer's queue and bindings, pull
//! copies, hand each to the handler and settle it by the outcome, drain on shutdown.

use std::{sync::Arc, time::Duration};

use futures_util::StreamExt;
use lapin::{
    Channel, Connection, ConnectionProperties,
    message::Delivery,
    options::{
        BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions,
        BasicQosOptions, BasicRejectOptions,
    },
    types::FieldTable,
};
use tokio::sync::Semaphore;
use tokio_util::{
    sync::{CancellationToken, DropGuard},
    task::TaskTracker,
};
use tracing::{debug, info, warn};

use super::{
    registration::{self, RegistrationError},
    settings::{ObserveFn, ObserveResult, Settings},
};
use crate::{
    handler::{HandlerError, catch_panic},
    protocol::{TaskMessage, topology},
    reconnect::{SessionEnd, Supervised},
};

/// Pause before handing a copy back to the queue after a retryable failure, so a
/// persistent failure does not turn into a hot redelivery loop.
const REQUEUE_PAUSE: Duration = Duration::from_secs(1);

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    /// Connecting, declaring or consuming failed.
    #[error("rabbitmq error: {0}")]
    Amqp(#[from] lapin::Error),
    /// The scheduler could not be told about the patterns.
    #[error(transparent)]
    Registration(#[from] RegistrationError),
}

/// The observer's sessions, as the reconnect loop runs them.
pub(super) struct ObserverSessions {
    pub(super) settings: Arc<Settings>,
    /// The observer's queue, for the logs.
    pub(super) queue: String,
    pub(super) handler: Arc<ObserveFn>,
    /// One permit per handler allowed to run at once (the concurrency).
    pub(super) permits: Arc<Semaphore>,
}

impl Supervised for ObserverSessions {
    type Session = ObserverSession;
    type OpenError = OpenError;

    async fn open(&self) -> Result<ObserverSession, OpenError> {
        ObserverSession::open(&self.settings).await
    }

    async fn consume(
        &self,
        session: &ObserverSession,
        in_flight: &TaskTracker,
        cancel: &CancellationToken,
    ) -> SessionEnd {
        session
            .consume(&self.handler, &self.permits, in_flight, cancel)
            .await
    }

    async fn drain(&self, session: ObserverSession, in_flight: &TaskTracker) {
        session.drain(in_flight, self.drain_timeout()).await;
    }

    fn drain_timeout(&self) -> Duration {
        self.settings.drain_timeout
    }

    fn opened(&self, _session: &ObserverSession) {
        let settings = &self.settings;
        info!(observer = %settings.name, queue = %self.queue, patterns = ?settings.patterns,
            prefetch = settings.prefetch, "observing");
    }

    fn retrying(&self, error: &OpenError, attempt: u32, delay: Duration) {
        warn!(%error, observer = %self.settings.name, attempt,
            retry_in_ms = delay.as_millis() as u64, "cannot reach rabbitmq; retrying");
        self.count_reconnect();
    }

    fn lost(&self, error: &str) {
        warn!(%error, observer = %self.settings.name, "lost rabbitmq session; reconnecting");
        self.count_reconnect();
    }
}

impl ObserverSessions {
    fn count_reconnect(&self) {
        metrics::counter!("chime_observer_reconnects_total", "observer" => self.settings.name.clone())
            .increment(1);
    }
}

/// What becomes of a copy once its handler returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Disposition {
    /// Acknowledge it: observed.
    Ack,
    /// Hand it back to the queue to be observed again.
    Requeue,
    /// Reject it without requeueing: RabbitMQ dead-letters it to the observer's DLQ.
    DeadLetter,
}

impl Disposition {
    fn of(result: &ObserveResult) -> Self {
        match result {
            Ok(()) => Disposition::Ack,
            Err(HandlerError::Retryable { .. }) => Disposition::Requeue,
            Err(HandlerError::Permanent { .. }) => Disposition::DeadLetter,
        }
    }

    /// The `outcome` label of `chime_observer_copies_total`.
    fn label(self) -> &'static str {
        match self {
            Disposition::Ack => "observed",
            Disposition::Requeue => "retry",
            Disposition::DeadLetter => "dead_lettered",
        }
    }
}

pub(super) struct ObserverSession {
    connection: Connection,
    channel: Channel,
    consumer: lapin::Consumer,
    name: Arc<str>,
    _registration: DropGuard,
}

impl ObserverSession {
    /// Connects, declares the queue and its bindings, registers the patterns with the
    /// scheduler (so copies are published for them), then starts consuming.
    pub(super) async fn open(settings: &Arc<Settings>) -> Result<Self, OpenError> {
        let properties = ConnectionProperties::default()
            .with_connection_name(format!("chime-observer/{}", settings.name).into());
        let connection = crate::connect::connect(&settings.amqp_url, properties).await?;
        let channel = connection.create_channel().await?;
        let queue =
            topology::declare_observer(&connection, &channel, &settings.name, &settings.patterns)
                .await?;
        let registration = registration::register(&connection, settings).await?;
        channel
            .basic_qos(settings.prefetch, BasicQosOptions::default())
            .await?;
        let consumer = channel
            .basic_consume(
                queue.as_str().into(),
                format!(
                    "observer:{}:{}",
                    settings.name,
                    uuid::Uuid::now_v7().simple()
                )
                .into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(Self {
            connection,
            channel,
            consumer,
            name: settings.name.as_str().into(),
            _registration: registration,
        })
    }

    /// Pulls copies and spawns one task each, never more than the concurrency at once.
    pub(super) async fn consume(
        &self,
        handler: &Arc<ObserveFn>,
        permits: &Arc<Semaphore>,
        in_flight: &TaskTracker,
        cancel: &CancellationToken,
    ) -> SessionEnd {
        let mut copies = self.consumer.clone();
        loop {
            let permit = tokio::select! {
                permit = permits.clone().acquire_owned() => permit.expect("semaphore never closes"),
                () = cancel.cancelled() => return SessionEnd::Cancelled,
            };
            let next = tokio::select! {
                next = copies.next() => next,
                () = cancel.cancelled() => return SessionEnd::Cancelled,
            };
            match next {
                Some(Ok(copy)) => {
                    let handler = handler.clone();
                    let name = self.name.clone();
                    in_flight.spawn(async move {
                        observe(copy, handler.as_ref(), &name).await;
                        drop(permit);
                    });
                }
                Some(Err(error)) => return SessionEnd::Lost(error.to_string()),
                None => return SessionEnd::Lost("consumer stream ended".into()),
            }
        }
    }

    /// Stops new copies, waits for running handlers to settle theirs, then closes. Copies
    /// prefetched but not started go back to the queue with the close.
    pub(super) async fn drain(self, in_flight: &TaskTracker, timeout: Duration) {
        if let Err(error) = self
            .channel
            .basic_cancel(self.consumer.tag(), BasicCancelOptions::default())
            .await
        {
            warn!(%error, observer = %self.name, "could not cancel the consumer; closing anyway");
        }
        in_flight.close();
        if tokio::time::timeout(timeout, in_flight.wait())
            .await
            .is_err()
        {
            warn!(observer = %self.name, timeout_ms = timeout.as_millis() as u64,
                "handlers still running at the drain timeout; their copies will be redelivered");
        }
        let _ = self
            .channel
            .close(200, "observer shutting down".into())
            .await;
        let _ = self
            .connection
            .close(200, "observer shutting down".into())
            .await;
        info!(observer = %self.name, "observer stopped");
    }
}

/// Runs the handler on one copy and settles the delivery by the outcome.
async fn observe(copy: Delivery, handler: &ObserveFn, name: &Arc<str>) {
    let task = match TaskMessage::from_slice(&copy.data) {
        Ok(task) => task,
        Err(error) => {
            warn!(%error, observer = %name, "dead-lettering a copy that is not a task");
            metrics::counter!("chime_observer_malformed_total", "observer" => name.to_string())
                .increment(1);
            let _ = copy.reject(BasicRejectOptions { requeue: false }).await;
            return;
        }
    };
    let (task_id, app, job) = (task.task_id, task.app.clone(), task.job.clone());
    let result = catch_panic(|| handler(task)).await;
    let disposition = Disposition::of(&result);
    if let Err(error) = &result {
        warn!(%error, observer = %name, %task_id, app, job, outcome = disposition.label(),
            "observer handler failed");
    }
    metrics::counter!("chime_observer_copies_total",
        "observer" => name.to_string(), "outcome" => disposition.label())
    .increment(1);
    let settled = match disposition {
        Disposition::Ack => copy.ack(BasicAckOptions::default()).await,
        Disposition::Requeue => {
            tokio::time::sleep(REQUEUE_PAUSE).await;
            copy.nack(BasicNackOptions {
                requeue: true,
                ..BasicNackOptions::default()
            })
            .await
        }
        Disposition::DeadLetter => copy.reject(BasicRejectOptions { requeue: false }).await,
    };
    match settled {
        Ok(true) => {
            debug!(observer = %name, %task_id, outcome = disposition.label(), "copy settled")
        }
        // The channel is gone: RabbitMQ delivers the copy again.
        Ok(false) | Err(_) => {
            warn!(observer = %name, %task_id, "copy not settled; it will be redelivered");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_settle_copies() {
        assert_eq!(Disposition::of(&Ok(())), Disposition::Ack);
        assert_eq!(
            Disposition::of(&Err(HandlerError::retryable("busy"))),
            Disposition::Requeue
        );
        assert_eq!(
            Disposition::of(&Err(HandlerError::permanent("bad"))),
            Disposition::DeadLetter
        );
    }
}
