//! Observers: read-only subscribers that receive a copy of every task whose
//! `<app>.<job>` matches one of their topic patterns, whichever group runs it.
//!
//! # Summary
//!
//! The scheduler publishes a copy of a task to the topic exchange `chime.topics` with
//! routing key `<app>.<job>`. An observer named `name` owns the durable quorum queue
//! `chime.observe.<name>`, bound with each of its patterns (`shop.*`: every job of app
//! `shop`; `*.close-orders`: that job in every app; `#`: everything), so copies wait for
//! it while it is offline.
//!
//! The only thing an observer publishes is its registration: its name and patterns, on
//! the reply exchange, when it connects and every 10 minutes. The scheduler publishes
//! copies only for tasks that a pattern registered within the last 7 days matches (so
//! copies keep filling the queue through restarts and outages shorter than that), and it
//! picks up a new registration within about a second. Observers send no ack, result or
//! presence, and cannot affect a run's state; use them for audit trails, dashboards,
//! cache invalidation.
//!
//! Delivery is at least once: a copy is acknowledged after the handler returns, so a crash
//! or a lost connection delivers it again. Instances sharing one name share the queue and
//! each copy reaches one of them.
//!
//! # Usage
//!
//! ```no_run
//! use chime_consumer::{Observer, TaskMessage};
//!
//! # async fn run() -> Result<(), chime_consumer::ConsumerError> {
//! Observer::builder("amqp://guest:guest@127.0.0.1:5672/%2f", "audit")
//!     .subscribe("shop.*")
//!     .subscribe("billing.#")
//!     .handler(|task: TaskMessage| async move {
//!         println!("{}.{} fired (run {})", task.app, task.job, task.task_id);
//!         Ok(())
//!     })
//!     .build()?
//!     .run() // until Ctrl-C / SIGTERM
//!     .await
//! # }
//! ```
//!
//! # Outcomes
//!
//! - `Ok(())`: the copy is acknowledged.
//! - [`HandlerError::Retryable`](crate::HandlerError::Retryable): after a short pause the
//!   copy goes back to the queue; after the queue's delivery limit it is dead-lettered.
//! - [`HandlerError::Permanent`](crate::HandlerError::Permanent), or a panic: the copy is
//!   rejected and dead-lettered to `chime.observe.<name>.dlq`.
//! - A body that is not a task is rejected the same way, and counted.
//!
//! # Options
//!
//! See [`ObserverBuilder`]: concurrency (default 1, copies are handled in order),
//! prefetch (default twice the concurrency), drain timeout (default 30 s).
//!
//! Patterns are only ever added to the queue's bindings: after dropping a pattern from
//! the code, unbind it (or delete the queue) on the broker.
//!
//! # Metrics
//!
//! - `chime_observer_copies_total{observer, outcome="observed"|"retry"|"dead_lettered"}`
//! - `chime_observer_malformed_total{observer}`: bodies that were not tasks.
//! - `chime_observer_reconnects_total{observer}`
//! - `chime_observer_registrations_total{observer, outcome="sent"|"failed"}`

mod builder;
mod registration;
mod session;
mod settings;

use std::{future::Future, sync::Arc};

use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

pub use builder::ObserverBuilder;
pub use settings::ObserveResult;

use crate::{error::ConsumerError, protocol::topology, reconnect};
use session::ObserverSessions;
use settings::{ObserveFn, Settings};

/// A read-only subscriber to copies of tasks. Build one with [`Observer::builder`]; see
/// the [module docs](self).
pub struct Observer {
    settings: Arc<Settings>,
    handler: Arc<ObserveFn>,
}

impl Observer {
    /// Starts configuring observer `name` (a name: letters, digits, `-`, `_`) on the
    /// broker at `amqp_url`.
    pub fn builder(amqp_url: impl Into<String>, name: impl Into<String>) -> ObserverBuilder {
        ObserverBuilder::new(amqp_url, name)
    }

    /// The observer's name.
    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// The observer's queue, `chime.observe.<name>`.
    pub fn queue(&self) -> String {
        topology::observer_queue(&self.settings.name)
    }

    /// The topic patterns it subscribes to.
    pub fn patterns(&self) -> &[String] {
        &self.settings.patterns
    }

    /// Runs until SIGINT (Ctrl-C) or SIGTERM, then drains running handlers.
    pub async fn run(self) -> Result<(), ConsumerError> {
        self.run_until(crate::shutdown_signal()).await
    }

    /// Runs until `shutdown` completes, then stops taking copies, lets running handlers
    /// finish (up to the drain timeout) and closes the connection. Broker failures never
    /// end the run: the observer reconnects with backoff.
    pub async fn run_until<F>(self, shutdown: F) -> Result<(), ConsumerError>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let cancel = reconnect::cancel_on(shutdown);
        let sessions = ObserverSessions {
            settings: self.settings.clone(),
            queue: self.queue(),
            handler: self.handler,
            permits: Arc::new(Semaphore::new(self.settings.concurrency)),
        };
        let in_flight = TaskTracker::new();
        reconnect::supervise(&sessions, &in_flight, &cancel).await;
        Ok(())
    }
}
