//! Configuring a [`Consumer`]: broker, group, identity, concurrency and handlers.

use std::{collections::HashMap, sync::Arc, time::Duration};

use super::{Consumer, Handlers, Registered, Settings};
use crate::{
    error::ConsumerError,
    handler::Handler,
    idempotency::{IdempotencyStore, MemoryStore},
    protocol::topology::is_valid_name,
};

/// Builds a [`Consumer`]. Every option has a default except the broker URL and the group.
pub struct ConsumerBuilder {
    amqp_url: String,
    group: String,
    instance: Option<String>,
    concurrency: usize,
    prefetch: Option<u16>,
    drain_timeout: Duration,
    heartbeat_interval: Duration,
    idempotency: Arc<dyn IdempotencyStore>,
    handlers: HashMap<String, Registered>,
    fallback: Option<Registered>,
}

impl ConsumerBuilder {
    pub(super) fn new(amqp_url: impl Into<String>, group: impl Into<String>) -> Self {
        Self {
            amqp_url: amqp_url.into(),
            group: group.into(),
            instance: None,
            concurrency: 8,
            prefetch: None,
            drain_timeout: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(10),
            idempotency: Arc::new(MemoryStore::default()),
            handlers: HashMap::new(),
            fallback: None,
        }
    }

    /// This instance's id, reported on every ack and result. Default: `CHIME_INSTANCE`
    /// if set, else `<hostname>-<pid>`.
    pub fn instance(mut self, id: impl Into<String>) -> Self {
        self.instance = Some(id.into());
        self
    }

    /// How many handlers run at once. Default 8.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// How many unacknowledged deliveries RabbitMQ may push ahead. Default twice the
    /// concurrency, which keeps handlers busy without hoarding work other instances of
    /// the group could run.
    pub fn prefetch(mut self, n: u16) -> Self {
        self.prefetch = Some(n);
        self
    }

    /// How long shutdown waits for running handlers before closing. Default 30 s.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// How often a running handler sends a heartbeat. Default 10 s, and never less often
    /// than three times per run timeout of the job (the task says what it is).
    pub fn heartbeat_interval(mut self, every: Duration) -> Self {
        self.heartbeat_interval = every;
        self
    }

    /// Where outcomes are remembered by idempotency key. Default: a [`MemoryStore`].
    pub fn idempotency_store(mut self, store: impl IdempotencyStore) -> Self {
        self.idempotency = Arc::new(store);
        self
    }

    /// Runs `handler` for tasks of job `job` (the job's name, in any app).
    pub fn handler(mut self, job: impl Into<String>, handler: impl Handler) -> Self {
        self.handlers
            .insert(job.into(), Registered::Plain(Arc::new(handler)));
        self
    }

    /// Runs `handler` for tasks of every job that has no handler of its own. Without a
    /// fallback, such a task fails permanently with "no handler registered".
    pub fn fallback_handler(mut self, handler: impl Handler) -> Self {
        self.fallback = Some(Registered::Plain(Arc::new(handler)));
        self
    }

    /// Runs `handler` for tasks of job `job` inside a PostgreSQL transaction that also
    /// records the task's idempotency key in `store`, so the handler's writes through the
    /// transaction happen exactly once across all instances.
    #[cfg(feature = "postgres")]
    pub fn transactional_handler(
        mut self,
        job: impl Into<String>,
        store: crate::idempotency::PgIdempotencyStore,
        handler: impl crate::idempotency::TransactionalHandler,
    ) -> Self {
        self.handlers.insert(
            job.into(),
            Registered::Transactional(Arc::new(handler), store),
        );
        self
    }

    /// Checks the configuration and builds the consumer.
    pub fn build(self) -> Result<Consumer, ConsumerError> {
        if !is_valid_name(&self.group) {
            return Err(ConsumerError::InvalidName {
                what: "group",
                name: self.group,
            });
        }
        if let Some(job) = self.handlers.keys().find(|job| !is_valid_name(job)) {
            return Err(ConsumerError::InvalidName {
                what: "job",
                name: job.clone(),
            });
        }
        if self.handlers.is_empty() && self.fallback.is_none() {
            return Err(ConsumerError::NoHandlers);
        }
        if self.concurrency == 0 || self.concurrency > u16::MAX as usize {
            return Err(ConsumerError::InvalidOption {
                option: "concurrency",
                reason: "must be between 1 and 65535".into(),
            });
        }
        let prefetch = self
            .prefetch
            .unwrap_or_else(|| (self.concurrency * 2).min(u16::MAX as usize) as u16);
        if prefetch == 0 {
            return Err(ConsumerError::InvalidOption {
                option: "prefetch",
                reason: "must be at least 1".into(),
            });
        }
        let instance = self
            .instance
            .or_else(|| {
                std::env::var("CHIME_INSTANCE")
                    .ok()
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(default_instance_id);
        Ok(Consumer {
            settings: Arc::new(Settings {
                amqp_url: self.amqp_url,
                group: self.group,
                instance,
                concurrency: self.concurrency,
                prefetch,
                drain_timeout: self.drain_timeout,
                heartbeat_interval: self.heartbeat_interval,
            }),
            idempotency: self.idempotency,
            handlers: Arc::new(Handlers {
                by_job: self.handlers,
                fallback: self.fallback,
            }),
        })
    }
}

/// `<hostname>-<pid>`: unique among live instances, readable in run history.
pub fn default_instance_id() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::{HandlerResult, TaskContext};

    async fn noop(_: TaskContext) -> HandlerResult {
        Ok(None)
    }

    #[test]
    fn rejects_bad_configuration() {
        let base = || Consumer::builder("amqp://localhost", "orders");
        assert!(matches!(base().build(), Err(ConsumerError::NoHandlers)));
        assert!(matches!(
            Consumer::builder("amqp://localhost", "bad group")
                .handler("j", noop)
                .build(),
            Err(ConsumerError::InvalidName { what: "group", .. })
        ));
        assert!(matches!(
            base().handler("bad.job", noop).build(),
            Err(ConsumerError::InvalidName { what: "job", .. })
        ));
        assert!(matches!(
            base().handler("j", noop).concurrency(0).build(),
            Err(ConsumerError::InvalidOption {
                option: "concurrency",
                ..
            })
        ));
    }

    #[test]
    fn a_fallback_alone_is_enough() {
        let consumer = Consumer::builder("amqp://localhost", "orders")
            .fallback_handler(noop)
            .build()
            .unwrap();
        assert!(consumer.handlers.for_job("anything").is_some());
    }

    #[test]
    fn defaults() {
        let consumer = Consumer::builder("amqp://localhost", "orders")
            .handler("j", noop)
            .concurrency(5)
            .instance("i-1")
            .build()
            .unwrap();
        assert_eq!(consumer.settings.prefetch, 10);
        assert_eq!(consumer.instance(), "i-1");
        assert!(default_instance_id().ends_with(&format!("-{}", std::process::id())));
    }
}
