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
mod cancels;
mod delivery;
mod heartbeat;
mod key_lock;
mod presence;
pub(crate) mod replies;
mod session;
mod settlement;
mod shared;

use std::{future::Future, sync::Arc};

use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

pub use builder::{ConsumerBuilder, default_instance_id};

use crate::{error::ConsumerError, idempotency::IdempotencyStore, reconnect};
use key_lock::KeyLocks;
use session::ConsumerSessions;
use shared::{Handlers, Settings, Shared};

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
        let cancel = reconnect::cancel_on(shutdown);
        let shared = Arc::new(Shared {
            settings: self.settings.clone(),
            idempotency: self.idempotency,
            handlers: self.handlers,
            key_locks: KeyLocks::default(),
            handler_slots: Arc::new(Semaphore::new(self.settings.concurrency)),
            stopping: cancel.clone(),
            cancels: Default::default(),
        });
        let in_flight = TaskTracker::new();
        reconnect::supervise(&ConsumerSessions { shared }, &in_flight, &cancel).await;
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
