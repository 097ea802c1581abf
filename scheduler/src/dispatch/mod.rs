//! Publishing recorded runs as task messages: persistent, mandatory, with publisher
//! confirms awaited in pipelined batches. A run becomes `dispatched` only on a clean
//! confirm (an ack with no returned message); an unroutable or nacked task is noted on the
//! run and left `scheduled`, so the reconciler publishes it again. The dispatcher survives
//! broker outages: it reconnects with backoff and keeps every task it was given.
//!
//! Scheduled fires and re-publishes are *fenced*: they are published only while this node
//! still trusts the lease of the job's shard, checked just before each batch. A task whose
//! shard was lost is dropped here — its run stays `scheduled`, and the shard's new owner
//! publishes it — so a node that wakes from a stall publishes nothing for shards it lost.

mod batch;

use std::{
    collections::{HashSet, VecDeque},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use lapin::{Channel, Connection, options::ConfirmSelectOptions};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use uuid::Uuid;

use chime_consumer::backoff::Backoff;

use chime_consumer::protocol::TaskMessage;

use crate::{broker, cluster::Ownership, store::Store, telemetry};

/// Most tasks published before their confirms are awaited together.
const MAX_BATCH: usize = 1000;
/// How long a batch's confirms may take before the channel is considered broken.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(15);
/// Most tasks held in memory. Past this (a long broker outage) new tasks are not held:
/// they stay `scheduled` in the store and the reconciler hands them over again later.
const MAX_PENDING: usize = 100_000;
/// How often an idle dispatcher checks that its channel is still open.
const HEALTH_CHECK: Duration = Duration::from_secs(1);

/// A task to publish, and whether this is its first publish (only first publishes count
/// towards fire lateness).
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The task.
    pub task: TaskMessage,
    /// False when the reconciler re-publishes it.
    pub first: bool,
    /// When it was handed over.
    pub since: std::time::Instant,
    /// Whether it may only be published while this node trusts its shard's lease.
    pub fenced: bool,
}

/// Hands tasks to the dispatcher. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DispatchHandle {
    tx: mpsc::UnboundedSender<Outgoing>,
    connected: Arc<AtomicBool>,
}

impl DispatchHandle {
    /// Queues runs just recorded outside any shard lease (manual triggers: whichever node
    /// recorded the run publishes it).
    pub fn submit(&self, tasks: impl IntoIterator<Item = TaskMessage>) {
        self.send(tasks, true, false);
    }

    /// Queues scheduled fires just recorded under their shards' leases.
    pub fn submit_fenced(&self, tasks: impl IntoIterator<Item = TaskMessage>) {
        self.send(tasks, true, true);
    }

    /// Queues recorded runs that were never confirmed, to publish again (fenced).
    pub fn resubmit(&self, tasks: impl IntoIterator<Item = TaskMessage>) {
        self.send(tasks, false, true);
    }

    fn send(&self, tasks: impl IntoIterator<Item = TaskMessage>, first: bool, fenced: bool) {
        for task in tasks {
            let _ = self.tx.send(Outgoing {
                task,
                first,
                since: std::time::Instant::now(),
                fenced,
            });
        }
    }

    /// Whether the dispatcher currently has an open channel to the broker.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }
}

/// The publishing service. Create with [`Dispatcher::new`], run with [`Dispatcher::run`].
pub struct Dispatcher {
    store: Arc<dyn Store>,
    ownership: Ownership,
    amqp_url: String,
    rx: mpsc::UnboundedReceiver<Outgoing>,
    connected: Arc<AtomicBool>,
    /// Tasks waiting to be published, in order.
    pending: VecDeque<Outgoing>,
    /// Ids in `pending` or awaiting a confirm, so a re-submission is not published twice.
    queued: HashSet<Uuid>,
    /// Groups declared on the current connection.
    declared: HashSet<String>,
}

impl Dispatcher {
    /// A dispatcher publishing to `amqp_url`, and the handle that feeds it.
    pub fn new(
        store: Arc<dyn Store>,
        ownership: Ownership,
        amqp_url: impl Into<String>,
    ) -> (DispatchHandle, Self) {
        let (tx, rx) = mpsc::unbounded_channel();
        let connected = Arc::new(AtomicBool::new(false));
        let handle = DispatchHandle {
            tx,
            connected: connected.clone(),
        };
        let dispatcher = Self {
            store,
            ownership,
            amqp_url: amqp_url.into(),
            rx,
            connected,
            pending: VecDeque::new(),
            queued: HashSet::new(),
            declared: HashSet::new(),
        };
        (handle, dispatcher)
    }

    /// Publishes until `drain` fires, then publishes what it already holds (up to
    /// `drain_timeout`) and returns. Tasks still unconfirmed then stay `scheduled` in the
    /// store and are published after the next start.
    pub async fn run(mut self, drain: CancellationToken, drain_timeout: Duration) {
        // Spaces out sessions that break at once (a refused declaration, a flapping
        // broker); reset by every batch that goes through.
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        loop {
            let Some(connection) =
                broker::connect_with_backoff(&self.amqp_url, "dispatch", &drain).await
            else {
                break;
            };
            let end = self
                .session(&connection, &drain, drain_timeout, &mut backoff)
                .await;
            let _ = connection
                .close(200, "chimed dispatcher reconnecting".into())
                .await;
            match end {
                SessionEnd::Drained => return,
                SessionEnd::Broken(reason) => {
                    self.connected.store(false, Ordering::Relaxed);
                    let delay = backoff.next_delay();
                    warn!(%reason, pending = self.pending.len(), retry_in_ms = delay.as_millis() as u64,
                        "lost the publishing channel; reconnecting");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = drain.cancelled() => break,
                    }
                }
            }
        }
        self.absorb_submissions();
        if !self.pending.is_empty() {
            warn!(
                unpublished = self.pending.len(),
                "stopping without a broker; these runs stay scheduled and are published after restart"
            );
        }
    }

    async fn session(
        &mut self,
        connection: &Connection,
        drain: &CancellationToken,
        drain_timeout: Duration,
        backoff: &mut Backoff,
    ) -> SessionEnd {
        let channel = match open_channel(connection).await {
            Ok(channel) => channel,
            Err(error) => return SessionEnd::Broken(error.to_string()),
        };
        self.declared.clear();
        self.connected.store(true, Ordering::Relaxed);
        info!(pending = self.pending.len(), "publishing tasks");
        loop {
            if drain.is_cancelled() {
                self.absorb_submissions();
                let published =
                    tokio::time::timeout(drain_timeout, self.publish_all(&channel)).await;
                if !matches!(published, Ok(Ok(()))) {
                    warn!(
                        unconfirmed = self.pending.len(),
                        "shutdown before every task was confirmed; they stay scheduled"
                    );
                }
                let _ = channel.close(200, "chimed shutting down".into()).await;
                return SessionEnd::Drained;
            }
            if self.pending.is_empty() {
                tokio::select! {
                    next = self.rx.recv() => match next {
                        Some(outgoing) => self.enqueue(outgoing),
                        None => {
                            drain.cancel();
                            continue;
                        }
                    },
                    () = tokio::time::sleep(HEALTH_CHECK) => {
                        if !channel.status().connected() {
                            return SessionEnd::Broken("channel closed".into());
                        }
                        continue;
                    }
                    () = drain.cancelled() => continue,
                }
            }
            self.absorb_submissions();
            match self.publish_next_batch(&channel).await {
                Ok(()) => backoff.reset(),
                Err(error) => return SessionEnd::Broken(error),
            }
        }
    }

    async fn publish_all(&mut self, channel: &Channel) -> Result<(), String> {
        while !self.pending.is_empty() {
            self.publish_next_batch(channel).await?;
        }
        Ok(())
    }

    /// Moves everything already submitted into `pending`, dropping duplicates.
    fn absorb_submissions(&mut self) {
        while let Ok(outgoing) = self.rx.try_recv() {
            self.enqueue(outgoing);
        }
        metrics::gauge!(telemetry::DISPATCH_PENDING).set(self.pending.len() as f64);
    }

    fn enqueue(&mut self, outgoing: Outgoing) {
        if self.pending.len() >= MAX_PENDING {
            metrics::counter!(telemetry::DISPATCH_DEFERRED).increment(1);
            return;
        }
        if self.queued.insert(outgoing.task.task_id) {
            self.pending.push_back(outgoing);
        }
    }
}

enum SessionEnd {
    Drained,
    Broken(String),
}

async fn open_channel(connection: &Connection) -> Result<Channel, lapin::Error> {
    let channel = connection.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    Ok(channel)
}
