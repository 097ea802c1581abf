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
//! - [`HandlerError::Retryable`]: after a short pause the
//!   copy goes back to the queue; after the queue's delivery limit it is dead-lettered.
//! - [`HandlerError::Permanent`], or a panic: the copy is
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

use std::{future::Future, sync::Arc, time::Duration};

use tokio::sync::Semaphore;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::{info, warn};

pub use builder::ObserverBuilder;

use crate::{
    backoff::Backoff,
    error::ConsumerError,
    handler::{BoxFuture, HandlerError},
    protocol::{TaskMessage, topology},
};
use session::{ObserverSession, SessionEnd};

/// What an observer's handler returns: `Ok(())` to acknowledge the copy, or a
/// [`HandlerError`] (retryable: back to the queue; permanent: dead-lettered).
pub type ObserveResult = Result<(), HandlerError>;

/// An observer's handler, boxed.
type ObserveFn = dyn Fn(TaskMessage) -> BoxFuture<'static, ObserveResult> + Send + Sync;

/// A read-only subscriber to copies of tasks. Build one with [`Observer::builder`]; see
/// the [module docs](self).
pub struct Observer {
    settings: Arc<Settings>,
    handler: Arc<ObserveFn>,
}

#[derive(Debug)]
struct Settings {
    amqp_url: String,
    name: String,
    patterns: Vec<String>,
    concurrency: usize,
    prefetch: u16,
    drain_timeout: Duration,
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
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        tokio::spawn(async move {
            shutdown.await;
            trigger.cancel();
        });
        let settings = &self.settings;
        let permits = Arc::new(Semaphore::new(settings.concurrency));
        let in_flight = TaskTracker::new();
        let mut backoff = Backoff::default();
        while !cancel.is_cancelled() {
            let opened = tokio::select! {
                opened = ObserverSession::open(settings) => opened,
                () = cancel.cancelled() => break,
            };
            let session = match opened {
                Ok(session) => session,
                Err(error) => {
                    let delay = backoff.next_delay();
                    warn!(%error, observer = %settings.name, attempt = backoff.attempts(),
                        retry_in_ms = delay.as_millis() as u64, "cannot reach rabbitmq; retrying");
                    reconnected(settings);
                    tokio::select! {
                        () = tokio::time::sleep(delay) => continue,
                        () = cancel.cancelled() => break,
                    }
                }
            };
            backoff.reset();
            info!(observer = %settings.name, queue = %self.queue(), patterns = ?settings.patterns,
                prefetch = settings.prefetch, "observing");
            match session
                .consume(&self.handler, &permits, &in_flight, &cancel)
                .await
            {
                SessionEnd::Cancelled => {
                    session.drain(&in_flight, settings.drain_timeout).await;
                    return Ok(());
                }
                SessionEnd::Lost(error) => {
                    warn!(%error, observer = %settings.name, "lost rabbitmq session; reconnecting");
                    reconnected(settings);
                }
            }
        }
        in_flight.close();
        let _ = tokio::time::timeout(settings.drain_timeout, in_flight.wait()).await;
        Ok(())
    }
}

fn reconnected(settings: &Settings) {
    metrics::counter!("chime_observer_reconnects_total", "observer" => settings.name.clone())
        .increment(1);
}
