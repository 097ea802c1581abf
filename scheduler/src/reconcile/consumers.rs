//! Whether a work queue has a consumer, as the reconciler needs to know before it judges
//! a missed ack deadline: a task in a queue that nobody consumes is not lost, it waits,
//! and publishing it again would only stack copies behind it and use up the run's
//! attempts.
//!
//! The count comes from a passive `queue.declare` (RabbitMQ answers it with the queue's
//! consumer count), asked at most once per queue every [`PROBE_TTL`] and over a channel
//! of its own (a missing queue closes the channel). When the broker cannot be asked, the
//! count is unknown and the reconciler judges deadlines as it always did.
//!
//! It also keeps which queues were seen without a consumer: a queue's first such sighting
//! logs one WARN line naming the group, the queue and the jobs whose runs wait, and sets
//! `chime_group_without_consumer{group,queue}` to 1; the gauge goes back to 0 (with an
//! INFO line) once the queue has a consumer again, or is gone.
//!
//! Broadcast runs are not judged here: their tasks live in the queues of the instances
//! that are live, and a broadcast run is settled from the receipts of those instances
//! ([`crate::domain::broadcast`]), so "no consumer" is "no live instance", already handled.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::Mutex,
    time::{Duration, Instant},
};

use chime_consumer::protocol::topology;
use lapin::{Channel, Connection, options::QueueDeclareOptions, types::FieldTable};
use tokio::sync::Mutex as AsyncMutex;
use tracing::{info, warn};

use crate::{domain::DeliveryMode, store::OverdueRun, telemetry};

/// How long a queue's consumer count is taken as current.
pub const PROBE_TTL: Duration = Duration::from_secs(3);
/// How long a probe may take before the count is taken as unknown.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// After the broker failed a probe, how long every probe answers "unknown" at once.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// The runs of one queue that wait for a consumer in a pass: their group and job names.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The group the queue belongs to.
    pub group: String,
    /// Names (`app/name`) of the jobs whose runs wait.
    pub jobs: BTreeSet<String>,
}

/// Consumer counts of work queues, cached, and the queues known to have none.
pub struct ConsumerWatch {
    url: String,
    open: AsyncMutex<Option<(Connection, Channel)>>,
    /// Per queue: its consumer count (None: unknown) and when it was asked.
    counts: Mutex<HashMap<String, (Option<u32>, Instant)>>,
    /// When the broker last failed a probe.
    failed_at: Mutex<Option<Instant>>,
    /// Queues seen without a consumer, with their group.
    without: Mutex<BTreeMap<String, String>>,
}

impl ConsumerWatch {
    /// A watch over the queues of the broker at `url`; connects on first use.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            open: AsyncMutex::new(None),
            counts: Mutex::new(HashMap::new()),
            failed_at: Mutex::new(None),
            without: Mutex::new(BTreeMap::new()),
        }
    }

    /// Whether `queue` is known to have no consumer right now (false when it has one,
    /// is missing, or the broker cannot say).
    pub async fn has_none(&self, queue: &str) -> bool {
        self.consumers(queue).await == Some(0)
    }

    /// Whether `item`'s work queue is known to have no consumer (a broadcast run has no
    /// work queue: see the module comment).
    pub(super) async fn nobody_consumes(&self, item: &OverdueRun) -> bool {
        match run_queue(item) {
            Some(queue) => self.has_none(&queue).await,
            None => false,
        }
    }

    /// `queue`'s consumer count, at most [`PROBE_TTL`] old; None when unknown (the
    /// broker cannot be asked, or the queue does not exist).
    pub async fn consumers(&self, queue: &str) -> Option<u32> {
        if let Some((count, at)) = lock(&self.counts).get(queue).copied()
            && at.elapsed() < PROBE_TTL
        {
            return count;
        }
        if self.broker_failing() {
            return None;
        }
        let count = match tokio::time::timeout(PROBE_TIMEOUT, self.probe(queue)).await {
            Ok(Ok(count)) => count,
            Ok(Err(error)) => {
                warn!(queue, %error, "cannot ask rabbitmq for a queue's consumers");
                *lock(&self.failed_at) = Some(Instant::now());
                *self.open.lock().await = None;
                None
            }
            Err(_) => {
                warn!(
                    queue,
                    "rabbitmq did not say how many consumers a queue has in time"
                );
                *lock(&self.failed_at) = Some(Instant::now());
                *self.open.lock().await = None;
                None
            }
        };
        lock(&self.counts).insert(queue.to_owned(), (count, Instant::now()));
        count
    }

    /// Asks the broker: Ok(None) when the queue does not exist.
    async fn probe(&self, queue: &str) -> Result<Option<u32>, lapin::Error> {
        let mut open = self.open.lock().await;
        if !open
            .as_ref()
            .is_some_and(|(c, ch)| c.status().connected() && ch.status().connected())
        {
            let connection = match open.take() {
                Some((connection, _)) if connection.status().connected() => connection,
                _ => crate::broker::connect(&self.url, "consumer-watch").await?,
            };
            let channel = connection.create_channel().await?;
            *open = Some((connection, channel));
        }
        let Some((_, channel)) = open.as_ref() else {
            return Ok(None);
        };
        let answer = channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await;
        match answer {
            Ok(declared) => Ok(Some(declared.consumer_count())),
            // The broker closed the channel; the next probe opens another.
            Err(error) if topology::is_not_found(&error) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// After a pass: `waiting` are the queues whose runs waited for a consumer in it.
    /// Warns once for each queue newly without a consumer and asks again about those
    /// seen without one before (their runs may all have been answered meanwhile), noting
    /// those that have a consumer again.
    pub async fn after_pass(&self, waiting: BTreeMap<String, Waiting>) {
        for (queue, seen) in &waiting {
            let new = lock(&self.without)
                .insert(queue.clone(), seen.group.clone())
                .is_none();
            if new {
                let jobs = seen.jobs.iter().cloned().collect::<Vec<_>>().join(", ");
                warn!(group = %seen.group, %queue, %jobs,
                    "group has no consumer; its runs wait in the queue without using attempts");
                metrics::gauge!(telemetry::GROUP_WITHOUT_CONSUMER,
                    "group" => seen.group.clone(), "queue" => queue.clone())
                .set(1.0);
            }
        }
        let known: Vec<(String, String)> = lock(&self.without)
            .iter()
            .filter(|(queue, _)| !waiting.contains_key(*queue))
            .map(|(q, g)| (q.clone(), g.clone()))
            .collect();
        for (queue, group) in known {
            match self.consumers(&queue).await {
                Some(0) => {}
                // Unknown because the broker failed: ask again after the next pass.
                None if self.broker_failing() => {}
                count => {
                    lock(&self.without).remove(&queue);
                    info!(%group, %queue, consumers = ?count, "group has a consumer again");
                    metrics::gauge!(telemetry::GROUP_WITHOUT_CONSUMER,
                        "group" => group, "queue" => queue)
                    .set(0.0);
                }
            }
        }
    }

    /// Whether the broker failed a probe within [`RETRY_AFTER`].
    fn broker_failing(&self) -> bool {
        lock(&self.failed_at).is_some_and(|t| t.elapsed() < RETRY_AFTER)
    }

    /// The queues currently known to have no consumer, with their groups.
    pub fn without_consumer(&self) -> BTreeMap<String, String> {
        lock(&self.without).clone()
    }

    /// Closes the connection, if open.
    pub async fn close(&self) {
        if let Some((connection, _)) = self.open.lock().await.take() {
            let _ = connection.close(200, "chimed stopping".into()).await;
        }
    }
}

/// The work queue that holds `item`'s task (None for a broadcast run).
pub(super) fn run_queue(item: &OverdueRun) -> Option<String> {
    let group = &item.job.spec.settings.target.group;
    match (item.run.mode, item.run.zone.as_deref()) {
        (DeliveryMode::Broadcast, _) => None,
        (DeliveryMode::Zone, Some(zone)) => Some(topology::zone_queue(group, zone)),
        _ => Some(topology::group_queue(group)),
    }
}

/// Locks `mutex`, taking over a poisoned one (its data stays consistent: every critical
/// section is a single insert, remove or read).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
