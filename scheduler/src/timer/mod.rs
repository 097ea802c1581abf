//! The timer: holds the jobs due within the look-ahead window in a [`TimerQueue`], wakes at
//! the earliest due time, and fires due jobs through the store's fire transaction, handing
//! the recorded runs to the dispatcher.
//!
//! Nothing scans all jobs: every `lookahead / 3` the timer reloads the jobs whose next fire
//! time falls inside the window (an indexed range query, so its cost follows the window,
//! not the number of jobs; reloading the whole window also heals any missed change). Job
//! changes made through the API reach the timer at once through [`TimerHandle`]: the timer
//! re-reads the changed job, so concurrent changes cannot leave it with a stale entry
//! whatever order their notices arrive in. The queue is only a hint: the fire transaction
//! re-reads each job and fires only what the stored row says is due.

pub mod queue;

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use tokio::{sync::mpsc, time::Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};
use uuid::Uuid;

use chime_consumer::backoff::Backoff;

use crate::{
    dispatch::DispatchHandle,
    domain::Job,
    store::{Store, StoreError},
    telemetry,
};
pub use queue::TimerQueue;

/// Most jobs fired in one store transaction.
const FIRE_BATCH: usize = 1000;
/// Page size of the look-ahead query.
const REFILL_PAGE: u32 = 1000;

/// Tells the timer about job changes. Cheap to clone.
#[derive(Debug, Clone)]
pub struct TimerHandle {
    tx: mpsc::UnboundedSender<Uuid>,
}

impl TimerHandle {
    /// The job was created, changed (including pause and resume) or deleted; call after
    /// the change committed.
    pub fn job_changed(&self, id: Uuid) {
        let _ = self.tx.send(id);
    }
}

/// Timer settings.
#[derive(Debug, Clone, Copy)]
pub struct TimerSettings {
    /// How far ahead jobs are held in memory.
    pub lookahead: Duration,
    /// Lateness past which a fire counts as missed.
    pub misfire_grace: Duration,
}

/// The timer service.
pub struct Timer {
    store: Arc<dyn Store>,
    dispatch: DispatchHandle,
    rx: mpsc::UnboundedReceiver<Uuid>,
    queue: TimerQueue,
    lookahead: chrono::Duration,
    grace: chrono::Duration,
    /// Every active job due before this instant is in `queue` (or being fired).
    horizon: Option<DateTime<Utc>>,
    retry: Backoff,
}

impl Timer {
    /// A timer firing through `store` into `dispatch`, and the handle that feeds it changes.
    pub fn new(
        store: Arc<dyn Store>,
        dispatch: DispatchHandle,
        settings: TimerSettings,
    ) -> (TimerHandle, Self) {
        let (tx, rx) = mpsc::unbounded_channel();
        let timer = Self {
            store,
            dispatch,
            rx,
            queue: TimerQueue::new(),
            lookahead: chrono::Duration::from_std(settings.lookahead).expect("bounded lookahead"),
            grace: chrono::Duration::from_std(settings.misfire_grace).expect("bounded grace"),
            horizon: None,
            retry: Backoff::new(Duration::from_millis(100), Duration::from_secs(5)),
        };
        (TimerHandle { tx }, timer)
    }

    /// Runs until `cancel` fires.
    pub async fn run(mut self, cancel: CancellationToken) {
        let refill_every = (self.lookahead / 3).to_std().expect("positive lookahead");
        let mut next_refill = Instant::now();
        loop {
            if Instant::now() >= next_refill {
                next_refill = match self.refill(Utc::now()).await {
                    Ok(()) => Instant::now() + refill_every,
                    Err(error) => {
                        let delay = self.retry.next_delay();
                        warn!(%error, retry_in_ms = delay.as_millis() as u64, "timer cannot load due jobs");
                        metrics::counter!(telemetry::STORE_ERRORS, "operation" => "due_jobs")
                            .increment(1);
                        Instant::now() + delay
                    }
                };
            }
            let wake = self
                .queue
                .next_due()
                .map(instant_of)
                .map_or(next_refill, |due| due.min(next_refill));
            tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                Some(job) = self.rx.recv() => self.reload(job).await,
                () = tokio::time::sleep_until(wake) => {}
            }
            if self.horizon.is_some() {
                self.fire_due(Utc::now()).await;
            }
        }
    }

    /// Fires every job due at `now`; returns how many runs were recorded.
    pub async fn fire_due(&mut self, now: DateTime<Utc>) -> usize {
        let mut recorded = 0;
        loop {
            let due = self.queue.pop_due(now, FIRE_BATCH);
            if due.is_empty() {
                break;
            }
            match self.fire(&due, now).await {
                Ok(n) => recorded += n,
                Err(error) => {
                    let delay = self.retry.next_delay();
                    error!(%error, jobs = due.len(), retry_in_ms = delay.as_millis() as u64,
                        "cannot record fires; retrying");
                    metrics::counter!(telemetry::STORE_ERRORS, "operation" => "fire").increment(1);
                    let retry_at = now + chrono::Duration::from_std(delay).expect("bounded delay");
                    for job in due {
                        self.queue.set(job, Some(retry_at));
                    }
                    break;
                }
            }
        }
        metrics::gauge!(telemetry::TIMER_JOBS).set(self.queue.len() as f64);
        recorded
    }

    async fn fire(&mut self, jobs: &[Uuid], now: DateTime<Utc>) -> Result<usize, StoreError> {
        let batch = self.store.fire(jobs, now, self.grace).await?;
        self.retry.reset();
        for policy in &batch.misfired {
            metrics::counter!(telemetry::MISFIRES, "policy" => policy.as_str()).increment(1);
        }
        for (job, next) in batch.next_fire {
            self.apply(job, next);
        }
        let recorded = batch.recorded.len();
        metrics::counter!(telemetry::FIRES, "trigger" => "schedule").increment(recorded as u64);
        debug!(jobs = jobs.len(), recorded, "fired");
        self.dispatch.submit(batch.recorded);
        Ok(recorded)
    }

    /// Loads every active job whose next fire time falls before `now + lookahead`.
    pub async fn refill(&mut self, now: DateTime<Utc>) -> Result<(), StoreError> {
        let new_horizon = now + self.lookahead;
        let mut cursor = (DateTime::<Utc>::UNIX_EPOCH, Uuid::nil());
        loop {
            let page = self
                .store
                .due_jobs(cursor, new_horizon, REFILL_PAGE)
                .await?;
            for (job, at) in &page {
                self.queue.set(*job, Some(*at));
            }
            match page.last() {
                Some((job, at)) if page.len() == REFILL_PAGE as usize => cursor = (*at, *job),
                _ => break,
            }
        }
        self.horizon = Some(new_horizon.max(self.horizon.unwrap_or(new_horizon)));
        metrics::gauge!(telemetry::TIMER_JOBS).set(self.queue.len() as f64);
        Ok(())
    }

    /// Takes a changed job's stored state. If the store cannot say, the job is woken soon
    /// and the fire transaction, which reads the row, decides.
    async fn reload(&mut self, job: Uuid) {
        match self.store.get_job(job).await {
            Ok(stored) => self.apply(job, stored.as_ref().and_then(Job::timer_entry)),
            Err(error) => {
                warn!(%error, %job, "cannot read a changed job; checking it when due");
                self.apply(job, Some(Utc::now() + chrono::Duration::seconds(1)));
            }
        }
    }

    /// Holds `job` at `at` if that falls inside the loaded window; otherwise the next
    /// refill will load it.
    fn apply(&mut self, job: Uuid, at: Option<DateTime<Utc>>) {
        let inside = at.filter(|at| self.horizon.is_some_and(|h| *at < h));
        self.queue.set(job, inside);
    }
}

fn instant_of(at: DateTime<Utc>) -> Instant {
    let delay = (at - Utc::now()).to_std().unwrap_or(Duration::ZERO);
    Instant::now() + delay
}
