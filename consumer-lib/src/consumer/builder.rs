//! Configuring a [`Consumer`]: broker, group, identity, the delivery modes it subscribes
//! to (zone, broadcast), concurrency and handlers.

use std::{collections::HashMap, sync::Arc, time::Duration};

use super::{
    Consumer,
    shared::{Handlers, Registered, Settings},
};
use crate::{
    error::ConsumerError,
    handler::Handler,
    idempotency::{IdempotencyStore, MemoryStore},
    options,
    protocol::topology::{check_instance, check_zone, is_valid_instance, is_valid_name},
};

/// Environment variable with the default instance id.
const INSTANCE_ENV: &str = "CHIME_INSTANCE";
/// Environment variable with the default zone.
const ZONE_ENV: &str = "CHIME_ZONE";
/// Environment variable with the default scheduler user.
const SCHEDULER_USER_ENV: &str = "CHIME_SCHEDULER_USER";

/// Builds a [`Consumer`]. Every option has a default except the broker URL and the group.
///
/// Subscribing is one builder call per delivery mode. Every instance consumes its
/// group's work queue, which carries `group` and `sharded` jobs; [`ConsumerBuilder::zone`]
/// adds the work queue of the instance's zone and [`ConsumerBuilder::broadcast`] adds the
/// group's broadcasts. Read-only copies of tasks are for an [`crate::Observer`].
pub struct ConsumerBuilder {
    amqp_url: String,
    group: String,
    instance: Option<String>,
    zone: Option<String>,
    broadcast: bool,
    concurrency: usize,
    prefetch: Option<u16>,
    drain_timeout: Duration,
    heartbeat_interval: Duration,
    batch_replies: bool,
    scheduler_user: Option<String>,
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
            zone: None,
            broadcast: false,
            concurrency: 8,
            prefetch: None,
            drain_timeout: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(10),
            batch_replies: true,
            scheduler_user: None,
            idempotency: Arc::new(MemoryStore::default()),
            handlers: HashMap::new(),
            fallback: None,
        }
    }

    /// This instance's id, reported on every ack, result and presence message and part of
    /// its broadcast queue's name: 1 to 128 printable ASCII characters without spaces,
    /// unique among the group's live instances. Default: `CHIME_INSTANCE` if set and not
    /// empty, else `<hostname>-<pid>`.
    pub fn instance(mut self, id: impl Into<String>) -> Self {
        self.instance = Some(id.into());
        self
    }

    /// Places this instance in zone `zone` (a name: letters, digits, `-`, `_`): besides
    /// the group's work queue it consumes the zone's work queue
    /// `chime.group.<group>.zone.<zone>`, where each fire of a `zone`-mode job is run by one
    /// instance of each zone. Presence messages carry the zone, so the scheduler knows
    /// which zones have live instances. Default: `CHIME_ZONE` if set and not empty, else
    /// no zone.
    pub fn zone(mut self, zone: impl Into<String>) -> Self {
        self.zone = Some(zone.into());
        self
    }

    /// Subscribes this instance to the group's broadcasts: every fire of a
    /// `broadcast`-mode job runs once on each subscribed live instance, from the
    /// instance's own queue `chime.broadcast.<group>.<instance>`. The queue lives as long
    /// as the connection (fires published while the instance is down are not kept for
    /// it), so instance ids must be unique. Each instance records a broadcast under its own
    /// idempotency key ([`crate::TaskContext::idempotency_key`]). Default: off.
    pub fn broadcast(mut self) -> Self {
        self.broadcast = true;
        self
    }

    /// How many handlers run at once. Default 8.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// How many unacknowledged deliveries RabbitMQ may push ahead, per queue consumed (the
    /// group's, the zone's, the broadcast queue). Default twice the concurrency, which
    /// keeps handlers busy without hoarding work other instances of the group could run;
    /// the concurrency bounds how many run at once whatever the number of queues.
    ///
    /// A delivery is acknowledged only once its result is confirmed by the broker, so a
    /// finished task keeps its slot for one confirm round trip. With quick handlers at
    /// high rates those finished tasks fill the window: size it for the concurrency plus
    /// the rate times the confirm latency (e.g. 256 + 25 000/s × 40 ms ≈ 1 300; the
    /// benchmark's consumer uses 2 000, against 500 that capped a herd of tasks).
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

    /// Whether replies that queue up while earlier ones await the broker's confirm go out
    /// together, as one batch message (see `docs/protocol.md`). A busy consumer then
    /// costs the broker and the scheduler far less per task. Turn it off only while some
    /// `chimed` of the cluster predates reply batches: it would dead-letter them.
    /// Default: on.
    pub fn batch_replies(mut self, on: bool) -> Self {
        self.batch_replies = on;
        self
    }

    /// The RabbitMQ user `chimed` publishes tasks as. When set, a task whose validated
    /// `user_id` property is missing or another user's is not run: it is dead-lettered
    /// (rejected without requeue) and counted in
    /// `chime_consumer_refused_tasks_total{reason="user"}`. RabbitMQ checks `user_id`
    /// against the publishing connection, so only that user can publish tasks this
    /// instance runs. Default: `CHIME_SCHEDULER_USER` if set and not empty, else unset
    /// (tasks from any user run).
    pub fn scheduler_user(mut self, user: impl Into<String>) -> Self {
        self.scheduler_user = Some(user.into());
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
        options::check_url(&self.amqp_url)?;
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
        let prefetch = options::prefetch_for(self.concurrency, self.prefetch)?;
        let instance = resolve_instance(self.instance, std::env::var(INSTANCE_ENV).ok());
        if !is_valid_instance(&instance) {
            return Err(ConsumerError::InvalidName {
                what: "instance",
                name: instance,
            });
        }
        let zone = resolve_zone(self.zone, std::env::var(ZONE_ENV).ok());
        if let Some(zone) = zone.as_ref().filter(|zone| !is_valid_name(zone)) {
            return Err(ConsumerError::InvalidName {
                what: "zone",
                name: zone.clone(),
            });
        }
        // Every broker name it derives fits RabbitMQ's 255 bytes (the checks the
        // scheduler applies to presence messages).
        let checked = [
            zone.as_ref()
                .map(|zone| ("zone", check_zone(&self.group, zone, 0))),
            self.broadcast
                .then(|| ("broadcast", check_instance(&self.group, &instance))),
        ];
        if let Some((option, Err(error))) = checked
            .into_iter()
            .flatten()
            .find(|(_, checked)| checked.is_err())
        {
            return Err(ConsumerError::InvalidOption {
                option,
                reason: format!("{error}; use a shorter group, zone or instance id"),
            });
        }
        Ok(Consumer {
            settings: Arc::new(Settings {
                amqp_url: self.amqp_url,
                group: self.group,
                instance,
                zone,
                broadcast: self.broadcast,
                concurrency: self.concurrency,
                prefetch,
                drain_timeout: self.drain_timeout,
                heartbeat_interval: self.heartbeat_interval,
                batch_replies: self.batch_replies,
                scheduler_user: resolve_zone(
                    self.scheduler_user,
                    std::env::var(SCHEDULER_USER_ENV).ok(),
                ),
            }),
            idempotency: self.idempotency,
            handlers: Arc::new(Handlers {
                by_job: self.handlers,
                fallback: self.fallback,
            }),
        })
    }
}

/// The instance id: the one set on the builder, else `env` (the value of
/// [`INSTANCE_ENV`]) unless empty, else [`default_instance_id`].
fn resolve_instance(explicit: Option<String>, env: Option<String>) -> String {
    explicit
        .or_else(|| env.filter(|id| !id.is_empty()))
        .unwrap_or_else(default_instance_id)
}

/// The zone (or scheduler user): the one set on the builder, else `env` (the value of
/// [`ZONE_ENV`] or [`SCHEDULER_USER_ENV`]) unless empty, else none.
fn resolve_zone(explicit: Option<String>, env: Option<String>) -> Option<String> {
    explicit.or_else(|| env.filter(|zone| !zone.is_empty()))
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
    fn amqps_with_a_missing_ca_file_is_refused_at_build() {
        assert!(
            Consumer::builder("amqps://app:s3cret-pw@mq:5671/%2f", "orders")
                .handler("j", noop)
                .build()
                .is_ok()
        );
        let err = Consumer::builder(
            "amqps://app:s3cret-pw@mq:5671/%2f?cacertfile=/no/such/ca.pem",
            "orders",
        )
        .handler("j", noop)
        .build()
        .err()
        .expect("missing CA refused");
        let text = err.to_string();
        assert!(
            matches!(
                err,
                ConsumerError::InvalidOption {
                    option: "amqp_url",
                    ..
                }
            ),
            "{text}"
        );
        assert!(text.contains("cannot read the CA bundle"), "{text}");
        assert!(!text.contains("s3cret-pw"), "{text}");
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
        assert!(!consumer.settings.broadcast);
        assert!(default_instance_id().ends_with(&format!("-{}", std::process::id())));
    }

    #[test]
    fn modes_are_one_call_each() {
        let consumer = Consumer::builder("amqp://localhost", "orders")
            .handler("j", noop)
            .instance("i-1")
            .zone("dc1")
            .broadcast()
            .build()
            .unwrap();
        assert_eq!(consumer.zone(), Some("dc1"));
        assert!(consumer.settings.broadcast);
    }

    #[test]
    fn rejects_bad_zones_and_instances() {
        let base = || Consumer::builder("amqp://localhost", "orders").handler("j", noop);
        for zone in ["", "dc.1", "a b", "-dc"] {
            assert!(
                matches!(
                    base().zone(zone).build(),
                    Err(ConsumerError::InvalidName { what: "zone", .. })
                ),
                "{zone:?}"
            );
        }
        for instance in ["a b", "tab\there", &"x".repeat(129)] {
            assert!(
                matches!(
                    base().instance(instance).build(),
                    Err(ConsumerError::InvalidName {
                        what: "instance",
                        ..
                    })
                ),
                "{instance:?}"
            );
        }
        let long = "x".repeat(128);
        let long_group = || Consumer::builder("amqp://localhost", &long).handler("j", noop);
        assert!(matches!(
            long_group().zone(&long).build(),
            Err(ConsumerError::InvalidOption { option: "zone", .. })
        ));
        assert!(matches!(
            long_group().instance(&long).broadcast().build(),
            Err(ConsumerError::InvalidOption {
                option: "broadcast",
                ..
            })
        ));
        assert!(long_group().instance(&long).build().is_ok());
        // Instance ids are looser than names: dots and colons are fine.
        assert!(
            base()
                .instance("ip-10-0-0-1.ec2.internal:42")
                .build()
                .is_ok()
        );
        let error = base().instance("a b").build().err().unwrap().to_string();
        assert!(error.contains("printable ASCII"), "{error}");
    }

    #[test]
    fn zone_defaults_to_the_environment_value() {
        let some = |s: &str| Some(s.to_string());
        assert_eq!(resolve_zone(None, None), None);
        assert_eq!(resolve_zone(None, some("")), None);
        assert_eq!(resolve_zone(None, some("dc2")), some("dc2"));
        assert_eq!(resolve_zone(some("dc1"), some("dc2")), some("dc1"));
        // An explicit empty zone is kept, so build() rejects it instead of ignoring it.
        assert_eq!(resolve_zone(some(""), some("dc2")), some(""));
    }

    #[test]
    fn instance_defaults_to_the_environment_value_then_the_host() {
        let some = |s: &str| Some(s.to_string());
        assert_eq!(resolve_instance(some("a"), some("b")), "a");
        assert_eq!(resolve_instance(None, some("b")), "b");
        assert_eq!(resolve_instance(None, some("")), default_instance_id());
        assert_eq!(resolve_instance(None, None), default_instance_id());
    }
}
