//! The consumer runtime: connects to RabbitMQ, consumes the instance's queues (the group's
//! work queue, and with [`ConsumerBuilder::zone`] / [`ConsumerBuilder::broadcast`] its
//! zone's work queue and its own broadcast queue), runs handlers with bounded concurrency,
//! reports acks and results, announces itself with presence messages, and reconnects with
//! backoff when the broker goes away.
//!
//! Per delivery (see [`delivery`]): parse (malformed → dead-letter queue), replay a recorded
//! outcome for a duplicate, otherwise publish an ack, run the handler, record the outcome,
//! publish the result with a confirm, and only then acknowledge the delivery (see
//! [`settlement`]: acks go out within milliseconds, many as one). A crash at any point
//! before the ack leaves the delivery unacknowledged, so RabbitMQ delivers it again. While a handler
//! runs, heartbeats (with any progress it reports) keep the scheduler from publishing the
//! task again.

mod builder;
mod delivery;
mod heartbeat;
mod key_lock;
mod presence;
pub(crate) mod replies;
mod session;
mod settlement;

use std::{collections::HashMap, future::Future, sync::Arc, time::Duration};

use tokio::sync::Semaphore;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::{info, warn};

pub use builder::{ConsumerBuilder, default_instance_id};

use crate::{
    backoff::Backoff, error::ConsumerError, handler::Handler, idempotency::IdempotencyStore,
};
use key_lock::KeyLocks;
use session::{Session, SessionEnd};

/// A running member of a consumer group. Build one with [`Consumer::builder`].
///
/// ```no_run
/// use chime_consumer::{Consumer, HandlerResult, TaskContext};
///
/// async fn close_orders(ctx: TaskContext) -> HandlerResult {
///     let older_than: u64 = ctx.payload()["older_than_min"].as_u64().unwrap_or(30);
///     Ok(Some(serde_json::json!({"closed_older_than_min": older_than})))
/// }
///
/// # async fn run() -> Result<(), chime_consumer::ConsumerError> {
/// Consumer::builder("amqp://guest:guest@127.0.0.1:5672/%2f", "orders")
///     .handler("close-expired-orders", close_orders)
///     .build()?
///     .run()
///     .await
/// # }
/// ```
pub struct Consumer {
    settings: Arc<Settings>,
    idempotency: Arc<dyn IdempotencyStore>,
    handlers: Arc<Handlers>,
}

/// Handlers by job name, and the one for every other job.
pub(crate) struct Handlers {
    pub(crate) by_job: HashMap<String, Registered>,
    pub(crate) fallback: Option<Registered>,
}

impl Handlers {
    /// The handler for tasks of `job`.
    pub(crate) fn for_job(&self, job: &str) -> Option<&Registered> {
        self.by_job.get(job).or(self.fallback.as_ref())
    }
}

#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) amqp_url: String,
    pub(crate) group: String,
    pub(crate) instance: String,
    /// The zone whose work queue this instance also consumes.
    pub(crate) zone: Option<String>,
    /// Whether this instance consumes the group's broadcasts.
    pub(crate) broadcast: bool,
    pub(crate) concurrency: usize,
    pub(crate) prefetch: u16,
    pub(crate) drain_timeout: Duration,
    pub(crate) heartbeat_interval: Duration,
    /// Whether replies may travel as batch messages.
    pub(crate) batch_replies: bool,
}

/// A handler as registered for a job name.
pub(crate) enum Registered {
    Plain(Arc<dyn Handler>),
    #[cfg(feature = "postgres")]
    Transactional(
        Arc<dyn crate::idempotency::TransactionalHandler>,
        crate::idempotency::PgIdempotencyStore,
    ),
}

/// What every delivery task shares.
pub(crate) struct Shared {
    pub(crate) settings: Arc<Settings>,
    pub(crate) idempotency: Arc<dyn IdempotencyStore>,
    pub(crate) handlers: Arc<Handlers>,
    pub(crate) key_locks: KeyLocks,
    /// One permit per handler allowed to run at once (the concurrency). Only the handler
    /// holds one: waiting for reply confirms does not keep the next task from starting.
    pub(crate) handler_slots: Arc<Semaphore>,
    /// Cancelled on shutdown: deliveries still waiting for a slot are left to the close.
    pub(crate) stopping: CancellationToken,
}

impl Shared {
    /// Waits for a handler slot; `None` once shutdown began.
    pub(crate) async fn handler_slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        tokio::select! {
            biased;
            () = self.stopping.cancelled() => None,
            slot = self.handler_slots.clone().acquire_owned() => slot.ok(),
        }
    }
}

impl Consumer {
    /// Starts configuring a consumer of group `group` on the broker at `amqp_url`.
    pub fn builder(amqp_url: impl Into<String>, group: impl Into<String>) -> ConsumerBuilder {
        ConsumerBuilder::new(amqp_url, group)
    }

    /// This instance's id.
    pub fn instance(&self) -> &str {
        &self.settings.instance
    }

    /// The group this consumer belongs to.
    pub fn group(&self) -> &str {
        &self.settings.group
    }

    /// The zone this instance is in, if any (see [`ConsumerBuilder::zone`]).
    pub fn zone(&self) -> Option<&str> {
        self.settings.zone.as_deref()
    }

    /// Whether this instance receives the group's broadcasts (see
    /// [`ConsumerBuilder::broadcast`]).
    pub fn receives_broadcasts(&self) -> bool {
        self.settings.broadcast
    }

    /// Runs until SIGINT (Ctrl-C) or SIGTERM, then drains running handlers.
    pub async fn run(self) -> Result<(), ConsumerError> {
        self.run_until(shutdown_signal()).await
    }

    /// Runs until `shutdown` completes, then stops taking tasks, lets running handlers
    /// finish (up to the drain timeout) and closes the connection. Broker failures never
    /// end the run: the consumer reconnects with backoff.
    pub async fn run_until<F>(self, shutdown: F) -> Result<(), ConsumerError>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        tokio::spawn(async move {
            shutdown.await;
            trigger.cancel();
        });
        let shared = Arc::new(Shared {
            settings: self.settings.clone(),
            idempotency: self.idempotency,
            handlers: self.handlers,
            key_locks: KeyLocks::default(),
            handler_slots: Arc::new(Semaphore::new(self.settings.concurrency)),
            stopping: cancel.clone(),
        });
        let in_flight = TaskTracker::new();
        let mut backoff = Backoff::default();
        let settings = &self.settings;
        while !cancel.is_cancelled() {
            let session = tokio::select! {
                opened = Session::open(settings) => opened,
                () = cancel.cancelled() => break,
            };
            let session = match session {
                Ok(session) => session,
                Err(error) => {
                    let delay = backoff.next_delay();
                    warn!(%error, group = %settings.group, attempt = backoff.attempts(),
                        retry_in_ms = delay.as_millis() as u64, "cannot reach rabbitmq; retrying");
                    metrics::counter!("chime_consumer_reconnects_total").increment(1);
                    tokio::select! {
                        () = tokio::time::sleep(delay) => continue,
                        () = cancel.cancelled() => break,
                    }
                }
            };
            backoff.reset();
            info!(group = %settings.group, instance = %settings.instance,
                zone = settings.zone.as_deref(), broadcast = settings.broadcast,
                queues = ?session.queues(), concurrency = settings.concurrency,
                prefetch = settings.prefetch, "consuming");
            match session.consume(&shared, &in_flight, &cancel).await {
                SessionEnd::Cancelled => {
                    session.drain(&in_flight, settings.drain_timeout).await;
                    return Ok(());
                }
                SessionEnd::Lost(error) => {
                    warn!(%error, group = %settings.group, "lost rabbitmq session; reconnecting");
                    metrics::counter!("chime_consumer_reconnects_total").increment(1);
                }
            }
        }
        in_flight.close();
        let _ = tokio::time::timeout(settings.drain_timeout, in_flight.wait()).await;
        Ok(())
    }
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
