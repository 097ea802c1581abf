//! Publishing recorded runs as task messages: persistent, mandatory, with publisher
//! confirms. Publishing is pipelined: batches go out while earlier batches' confirms are
//! still on their way (up to `MAX_IN_FLIGHT` tasks), and their outcomes are written by
//! a separate task (`marker`), so neither the broker's confirm latency nor a database
//! commit delays the next fire. A run becomes `dispatched` only on a clean confirm (an
//! ack with no returned message); an unroutable or nacked task is noted on the run and
//! left `scheduled`, so the reconciler publishes it again. The dispatcher survives broker
//! outages: it reconnects with backoff and keeps every task it was given.
//!
//! Each task also goes to `chime.topics` as an observer copy, but only when a registered
//! observer pattern matches it (`observed`).
//!
//! No task is published before its fire time: fires armed ahead of time are held
//! (`held`) until then. When a job changes, its held tasks are checked against the
//! store before they go out (the change may have withdrawn them), and while a change made
//! on this node is in progress its job's due tasks wait for it (`changes`).
//!
//! Scheduled fires and re-publishes are *fenced*: they are published only while this node
//! still trusts the lease of the job's shard, checked just before each task goes out. A
//! task whose shard was lost is dropped here — its run stays `scheduled`, and the shard's
//! new owner publishes it — so a node that wakes from a stall publishes nothing for
//! shards it lost.

mod batch;
mod changes;
mod held;
mod marker;
mod observed;
mod outgoing;

pub use changes::ChangeGuard;
pub use marker::MIN_REPUBLISH_AFTER;
pub use observed::ObserverCopies;
pub use outgoing::Outgoing;

use std::{
    collections::VecDeque,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use chrono::{DateTime, Utc};
use futures_util::{StreamExt, stream::FuturesUnordered};
use lapin::{Channel, Connection, options::ConfirmSelectOptions};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use chime_consumer::backoff::Backoff;

use crate::{broker, cluster::Ownership, domain::DueTask, store::Store, telemetry};
use batch::{Broken, Confirmed, InFlight, Publishing};
use changes::{Changes, Command};
use held::Held;
use marker::{Marker, Unmarked};
use observed::ObservedTopics;

/// Most tasks published in one batch.
const MAX_BATCH: usize = 1000;
/// Most tasks published and not yet confirmed.
const MAX_IN_FLIGHT: usize = 2000;
/// Most tasks held in memory (waiting, armed, or in flight). Past this (a long broker
/// outage) new tasks are not held: they stay `scheduled` in the store and the reconciler
/// hands them over again later.
pub(crate) const MAX_PENDING: usize = 100_000;
/// How often an idle dispatcher checks that its channel is still open.
const HEALTH_CHECK: Duration = Duration::from_secs(1);

/// Hands tasks to the dispatcher. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DispatchHandle {
    tx: mpsc::UnboundedSender<Command>,
    connected: Arc<AtomicBool>,
    unmarked: Arc<Unmarked>,
    changes: Arc<Changes>,
}

impl DispatchHandle {
    /// Queues runs just recorded outside any shard lease (manual triggers: whichever node
    /// recorded the run publishes it).
    pub fn submit(&self, tasks: impl IntoIterator<Item = DueTask>) {
        self.send(tasks, true, false);
    }

    /// Queues scheduled fires just recorded under their shards' leases (published at
    /// their fire time if armed ahead of it).
    pub fn submit_fenced(&self, tasks: impl IntoIterator<Item = DueTask>) {
        self.send(tasks, true, true);
    }

    /// Queues recorded runs that were never confirmed, to publish again (fenced).
    pub fn resubmit(&self, tasks: impl IntoIterator<Item = DueTask>) {
        self.send(tasks, false, true);
    }

    /// Begins a change of `job` on this node: until the guard comes back through
    /// [`DispatchHandle::job_changed`] (or is dropped), the job's due tasks are held back.
    /// Call before the change's transaction, and use [`ChangeGuard::since`] as its instant.
    pub fn begin_change(&self, job: Uuid) -> ChangeGuard {
        ChangeGuard::begin(job, self.changes.clone(), self.tx.clone())
    }

    /// The job changed: its tasks still waiting are checked against the store before
    /// they are published. `change` is the guard of a change made on this node.
    pub fn job_changed(&self, job: Uuid, change: Option<ChangeGuard>) {
        let _ = self.tx.send(Command::JobChanged(job, change));
    }

    /// Changes may have been missed (another node's notices were lost with the
    /// connection that carried them): every task still waiting is checked against the
    /// store before it is published.
    pub fn changes_missed(&self) {
        let _ = self.tx.send(Command::ChangesMissed);
    }

    fn send(&self, tasks: impl IntoIterator<Item = DueTask>, first: bool, fenced: bool) {
        for DueTask { task, due } in tasks {
            let _ = self.tx.send(Command::Publish(Box::new(Outgoing {
                task,
                due,
                first,
                since: std::time::Instant::now(),
                fenced,
                recheck: false,
            })));
        }
    }

    /// Whether the dispatcher currently has an open channel to the broker.
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// Whether the broker confirmed `run`'s task and the run is only waiting for its
    /// `dispatched` mark to be written (it still reads `scheduled` in the store).
    pub fn is_confirmed_unmarked(&self, run: Uuid) -> bool {
        self.unmarked.contains(run)
    }

    /// The result collector recorded (committed) replies for `runs`: their `dispatched`
    /// marks, if still to be written, would change nothing and are left out.
    pub fn runs_answered(&self, runs: impl IntoIterator<Item = Uuid>) {
        self.unmarked.answered(runs);
    }
}

/// The publishing service. Create with [`Dispatcher::new`], run with [`Dispatcher::run`].
pub struct Dispatcher {
    amqp_url: String,
    rx: mpsc::UnboundedReceiver<Command>,
    connected: Arc<AtomicBool>,
    /// Tasks due and waiting to be published, in order.
    pending: VecDeque<Outgoing>,
    /// Tasks armed ahead of their fire time.
    held: Held,
    /// Due tasks whose job is being changed on this node, waiting for the change.
    parked: Vec<Outgoing>,
    /// Changes in progress on this node, shared with the handles.
    changes: Arc<Changes>,
    /// Runs confirmed and not yet marked, shared with the handles.
    unmarked: Arc<Unmarked>,
    /// What is queued and in flight, and the state batches are published with.
    publishing: Publishing,
}

impl Dispatcher {
    /// A dispatcher publishing to `amqp_url`, and the handle that feeds it. Needs a Tokio
    /// runtime: with [`ObserverCopies::Registered`] it starts following the observer
    /// registrations in `store` at once.
    pub fn new(
        store: Arc<dyn Store>,
        ownership: Ownership,
        amqp_url: impl Into<String>,
        observer_copies: ObserverCopies,
    ) -> (DispatchHandle, Self) {
        let (tx, rx) = mpsc::unbounded_channel();
        let connected = Arc::new(AtomicBool::new(false));
        let unmarked = Arc::new(Unmarked::default());
        let changes = Arc::new(Changes::default());
        let handle = DispatchHandle {
            tx,
            connected: connected.clone(),
            unmarked: unmarked.clone(),
            changes: changes.clone(),
        };
        let observed = ObservedTopics::start(store.clone(), observer_copies);
        let amqp_url = amqp_url.into();
        // Tasks carry chimed's user as their validated `user_id`, which consumers with a
        // `scheduler_user` check.
        let user_id = chime_consumer::protocol::user_id::connection_user(&amqp_url);
        let dispatcher = Self {
            publishing: Publishing::new(store, ownership, observed, user_id),
            amqp_url,
            rx,
            connected,
            pending: VecDeque::new(),
            held: Held::default(),
            parked: Vec::new(),
            changes,
            unmarked,
        };
        (handle, dispatcher)
    }

    /// Publishes until `drain` fires, then publishes what is already due (up to
    /// `drain_timeout`) and returns. Tasks still unconfirmed then, and armed tasks not yet
    /// due, stay `scheduled` in the store and are published after the next start (or by
    /// the shards' next owner).
    pub async fn run(mut self, drain: CancellationToken, drain_timeout: Duration) {
        let (marker, writer) = Marker::start(self.publishing.store.clone(), self.unmarked.clone());
        self.publishing.marker = Some(marker);
        self.publish_until_drained(&drain, drain_timeout).await;
        // Let the writer finish what it was sent, within the same bound: behind an
        // overloaded database its backlog could hold shutdown for minutes. Runs it does
        // not mark stay `scheduled` and are published again (at least once).
        self.publishing.marker = None;
        let mut writer = writer;
        if tokio::time::timeout(drain_timeout, &mut writer)
            .await
            .is_err()
        {
            // Stopped, not left running: its open statement would hold run locks that
            // the result collector, still draining, waits for.
            writer.abort();
            warn!(
                "shutdown before every confirmed run was marked dispatched; they stay scheduled and are published again"
            );
        }
    }

    async fn publish_until_drained(&mut self, drain: &CancellationToken, drain_timeout: Duration) {
        // Spaces out sessions that break at once (a refused declaration, a flapping
        // broker); reset by every batch that goes through.
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        loop {
            let Some(connection) =
                broker::connect_with_backoff(&self.amqp_url, "dispatch", drain).await
            else {
                break;
            };
            let end = self
                .session(&connection, drain, drain_timeout, &mut backoff)
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
        if !self.pending.is_empty() || !self.parked.is_empty() {
            warn!(
                unpublished = self.pending.len() + self.parked.len(),
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
        self.publishing.declared.clear();
        self.connected.store(true, Ordering::Relaxed);
        info!(
            pending = self.pending.len(),
            armed = self.held.len(),
            "publishing tasks"
        );
        let mut in_flight: FuturesUnordered<InFlight> = FuturesUnordered::new();
        loop {
            if drain.is_cancelled() {
                let drained = tokio::time::timeout(
                    drain_timeout,
                    self.publish_due(connection, &channel, &mut in_flight),
                )
                .await;
                if !matches!(drained, Ok(Ok(()))) {
                    warn!(
                        unconfirmed =
                            self.pending.len() + self.parked.len() + self.publishing.in_flight,
                        "shutdown before every task was confirmed; they stay scheduled"
                    );
                }
                let _ = channel.close(200, "chimed shutting down".into()).await;
                return SessionEnd::Drained;
            }
            self.absorb_submissions();
            self.release_due();
            if let Err(broken) = self.fill(connection, &channel, &mut in_flight).await {
                return self.break_session(broken, &mut in_flight).await;
            }
            let release = self
                .held
                .next_due()
                .map_or(HEALTH_CHECK, |at| until(at).min(HEALTH_CHECK));
            tokio::select! {
                Some(confirmed) = in_flight.next(), if !in_flight.is_empty() => {
                    match self.settle(confirmed) {
                        Ok(()) => backoff.reset(),
                        Err(broken) => return self.break_session(broken, &mut in_flight).await,
                    }
                }
                next = self.rx.recv(), if self.pending.is_empty() => match next {
                    Some(command) => self.command(command),
                    None => drain.cancel(),
                },
                () = tokio::time::sleep(release) => {
                    if in_flight.is_empty() && !channel.status().connected() {
                        return SessionEnd::Broken("channel closed".into());
                    }
                }
                () = drain.cancelled() => {}
            }
        }
    }

    /// Publishes every task already due and waits for all confirms (shutdown).
    async fn publish_due(
        &mut self,
        connection: &Connection,
        channel: &Channel,
        in_flight: &mut FuturesUnordered<InFlight>,
    ) -> Result<(), String> {
        self.absorb_submissions();
        self.release_due();
        loop {
            self.fill(connection, channel, in_flight)
                .await
                .map_err(|b| b.reason)?;
            match in_flight.next().await {
                Some(confirmed) => self.settle(confirmed).map_err(|b| b.reason)?,
                None if self.pending.is_empty() => return Ok(()),
                None => {}
            }
        }
    }

    /// Publishes pending tasks while fewer than [`MAX_IN_FLIGHT`] await their confirms.
    async fn fill(
        &mut self,
        connection: &Connection,
        channel: &Channel,
        in_flight: &mut FuturesUnordered<InFlight>,
    ) -> Result<(), Broken> {
        while !self.pending.is_empty() && self.publishing.in_flight < MAX_IN_FLIGHT {
            if let Some(batch) = self.publish_next_batch(connection, channel).await? {
                in_flight.push(batch);
            }
        }
        Ok(())
    }

    /// Publishes up to [`MAX_BATCH`] pending tasks, less those whose job is being changed,
    /// without waiting for their confirms (see [`Publishing::publish_batch`]).
    async fn publish_next_batch(
        &mut self,
        connection: &Connection,
        channel: &Channel,
    ) -> Result<Option<InFlight>, Broken> {
        let take = self.pending.len().min(MAX_BATCH);
        let batch: Vec<Outgoing> = self.pending.drain(..take).collect();
        let batch = self.park_changing(batch);
        self.publishing
            .publish_batch(connection, channel, batch)
            .await
    }

    /// Records a batch's confirms (see [`Publishing::settle`]).
    fn settle(&mut self, confirmed: Confirmed) -> Result<(), Broken> {
        let settled = self.publishing.settle(confirmed);
        self.report_sizes();
        settled
    }

    /// The channel broke: waits for the confirms still on their way (they fail fast
    /// once the channel is gone) so confirmed runs are marked and the rest go back to
    /// the front of the queue.
    async fn break_session(
        &mut self,
        broken: Broken,
        in_flight: &mut FuturesUnordered<InFlight>,
    ) -> SessionEnd {
        let mut reason = broken.reason.clone();
        self.requeue(broken);
        while let Some(confirmed) = in_flight.next().await {
            if let Err(more) = self.settle(confirmed) {
                reason = more.reason.clone();
                self.requeue(more);
            }
        }
        SessionEnd::Broken(reason)
    }

    /// Moves everything already submitted into `pending` or `held`.
    fn absorb_submissions(&mut self) {
        while let Ok(command) = self.rx.try_recv() {
            self.command(command);
        }
        self.report_sizes();
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Publish(outgoing) => self.enqueue(*outgoing),
            Command::JobChanged(job, change) => {
                let marked = self.recheck_waiting(|o| o.task.job_id == job);
                if marked > 0 {
                    info!(%job, tasks = marked, "job changed; its waiting tasks are checked before publishing");
                }
                // Only now, with every waiting task of the job marked, may they go out.
                if let Some(change) = change {
                    change.lift();
                }
                self.unpark(job);
            }
            Command::ChangesMissed => {
                let marked = self.recheck_waiting(|_| true);
                if marked > 0 {
                    info!(
                        tasks = marked,
                        "job changes may have been missed; every waiting task is checked before publishing"
                    );
                }
            }
        }
    }

    /// Marks the waiting tasks `picked` (due, armed or parked) to be checked against the
    /// store before they are published; returns how many.
    fn recheck_waiting(&mut self, picked: impl Fn(&Outgoing) -> bool) -> usize {
        let mut marked = self.held.recheck(&picked);
        for outgoing in self
            .pending
            .iter_mut()
            .chain(self.parked.iter_mut())
            .filter(|o| picked(o))
        {
            outgoing.recheck = true;
            marked += 1;
        }
        marked
    }

    fn enqueue(&mut self, outgoing: Outgoing) {
        let id = outgoing.task.task_id;
        // Only a first attempt can be ahead of its time (its fire time, plus its jitter);
        // a later attempt goes out now whatever its run says.
        let armed = outgoing.task.attempt == 1 && outgoing.due > Utc::now();
        if armed && self.held.contains(id) {
            self.held.hold(outgoing);
            return;
        }
        let queued = &mut self.publishing.queued;
        if queued.contains(&id) {
            return;
        }
        if queued.len() >= MAX_PENDING {
            metrics::counter!(telemetry::DISPATCH_DEFERRED).increment(1);
            return;
        }
        queued.insert(id);
        if armed {
            self.held.hold(outgoing);
        } else {
            self.pending.push_back(outgoing);
        }
    }

    /// Sets aside the tasks whose job is being changed on this node; returns the rest,
    /// free to go out.
    fn park_changing(&mut self, batch: Vec<Outgoing>) -> Vec<Outgoing> {
        let (free, changing) = self.changes.split(batch, |o| o.task.job_id);
        if !changing.is_empty() {
            debug!(
                tasks = changing.len(),
                "tasks wait for their job's change to commit"
            );
            self.parked.extend(changing);
        }
        free
    }

    /// Returns `job`'s parked tasks to the queue once no change of it is in progress.
    fn unpark(&mut self, job: Uuid) {
        if self.parked.is_empty() || self.changes.is_changing(job) {
            return;
        }
        let (back, still): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|o| o.task.job_id == job);
        self.parked = still;
        self.pending.extend(back);
    }

    /// Moves the armed tasks whose fire time came into `pending`.
    fn release_due(&mut self) {
        let released = self.held.release(Utc::now());
        if released.is_empty() {
            return;
        }
        let now = std::time::Instant::now();
        self.pending
            .extend(released.into_iter().map(|mut outgoing| {
                outgoing.since = now;
                outgoing
            }));
        self.report_sizes();
    }

    /// Puts a broken batch's unconfirmed tasks back at the front of the queue.
    fn requeue(&mut self, broken: Broken) {
        for outgoing in broken.retry.into_iter().rev() {
            self.pending.push_front(outgoing);
        }
        self.report_sizes();
    }

    fn report_sizes(&self) {
        metrics::gauge!(telemetry::DISPATCH_PENDING)
            .set((self.pending.len() + self.parked.len() + self.publishing.in_flight) as f64);
        metrics::gauge!(telemetry::DISPATCH_ARMED).set(self.held.len() as f64);
    }
}

/// How long until `at` (zero if past).
fn until(at: DateTime<Utc>) -> Duration {
    (at - Utc::now()).to_std().unwrap_or(Duration::ZERO)
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
