//! Writes publish outcomes to the store off the publishing path: runs confirmed by the
//! broker become `dispatched`, and failed publishes are noted on their runs. The
//! publishing loop never waits for the database, so a slow commit does not make the
//! next fires late. A mark that fails is logged and counted; the run stays `scheduled`
//! and the reconciler publishes it again (at least once).
//!
//! A confirm is written [`MARK_DELAY`] after it arrives, not at once. A quick task's
//! ack is usually recorded by then, and the ack records `dispatched_at` itself (from its
//! own time), so the mark skips the run: one row version fewer per fire. On PostgreSQL
//! that was most of the database's work in a thundering herd besides the replies.
//!
//! The result collector tells [`Unmarked`] which runs it recorded a reply for, so the
//! mark leaves them out without reading them back: in a thundering herd on PostgreSQL
//! that read was a twelfth of the database's work, and found every run answered.
//!
//! Until its mark is written a confirmed run is `scheduled` in the store, so the runs
//! between confirm and mark are kept in [`Unmarked`] for the reconciler: when the
//! database falls behind it must not publish them again (a duplicate for every run, and
//! more work for a database that is already behind).

use std::{
    collections::{HashSet, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, Utc};
use tokio::{sync::mpsc, task::JoinHandle, time::Instant};
use tracing::error;
use uuid::Uuid;

use chime_consumer::protocol::AttemptRecord;

use crate::{
    domain::RunState,
    store::{Expect, Store},
    telemetry,
};

/// The smallest `republish_after` accepted. A confirmed run waits a moment before it
/// is marked `dispatched` (`MARK_DELAY`), and must not look unconfirmed meanwhile.
pub const MIN_REPUBLISH_AFTER: Duration = Duration::from_secs(1);

/// How long a confirm waits before its run is marked `dispatched`: long enough for a
/// quick task's ack to be recorded first, even in a herd, and well below the smallest
/// `republish_after`.
const MARK_DELAY: Duration = Duration::from_millis(400);
/// Confirms due within this of the oldest are written with it.
const MARK_BATCH: Duration = Duration::from_millis(100);

// Until marked, a confirmed run is `scheduled`, and the reconciler publishes a
// `scheduled` run again once it is `republish_after` old.
const _: () = assert!(
    (MARK_DELAY.as_millis() + MARK_BATCH.as_millis()) * 2 <= MIN_REPUBLISH_AFTER.as_millis()
);

/// An outcome to write.
#[derive(Debug)]
pub(super) enum Mark {
    /// The broker confirmed these runs' tasks at this time.
    Dispatched(Vec<Uuid>, DateTime<Utc>),
    /// The run's task was not accepted (unroutable, nacked).
    Failed(Uuid, String),
    /// The run's task can never be published (see [`Unpublishable`]): the run is given up.
    Unpublishable(Unpublishable),
}

/// A run whose task can never be published: a derived broker name is too long or
/// invalid, or the broker refuses to declare its destination.
#[derive(Debug)]
pub(super) struct Unpublishable {
    pub(super) run: Uuid,
    /// The attempt that could not be published; the run is given up only if still there.
    pub(super) attempt: u32,
    /// Why, for the run's error and history.
    pub(super) reason: String,
}

/// Runs whose tasks the broker confirmed and whose `dispatched` mark is not written yet.
#[derive(Debug, Default)]
pub(super) struct Unmarked(Mutex<HashSet<Uuid>>);

impl Unmarked {
    pub(super) fn contains(&self, run: Uuid) -> bool {
        self.runs().contains(&run)
    }

    /// Forgets runs whose replies the collector has recorded (committed): the store no
    /// longer holds them `scheduled`, so neither a mark nor the reconciler's caution
    /// applies to them.
    pub(super) fn answered(&self, runs: impl IntoIterator<Item = Uuid>) {
        let mut unmarked = self.runs();
        for run in runs {
            unmarked.remove(&run);
        }
        metrics::gauge!(telemetry::DISPATCH_UNMARKED).set(unmarked.len() as f64);
    }

    /// Keeps only the runs of `runs` still unmarked, and reports how many were left out
    /// (answered meanwhile).
    fn retain_unmarked(&self, runs: &mut Vec<Uuid>) -> usize {
        let unmarked = self.runs();
        let before = runs.len();
        runs.retain(|run| unmarked.contains(run));
        before - runs.len()
    }

    fn insert(&self, runs: &[Uuid]) {
        let mut unmarked = self.runs();
        unmarked.extend(runs.iter().copied());
        metrics::gauge!(telemetry::DISPATCH_UNMARKED).set(unmarked.len() as f64);
    }

    fn remove(&self, runs: &[Uuid]) {
        let mut unmarked = self.runs();
        for run in runs {
            unmarked.remove(run);
        }
        metrics::gauge!(telemetry::DISPATCH_UNMARKED).set(unmarked.len() as f64);
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashSet<Uuid>> {
        // A panic while holding the lock cannot leave the set half-updated in a way
        // that matters: at worst a run is published again.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Sends outcomes to the writer task. Dropping every sender ends it once it has
/// written what it was sent, without waiting out [`MARK_DELAY`].
#[derive(Debug, Clone)]
pub(super) struct Marker {
    tx: mpsc::UnboundedSender<Mark>,
    unmarked: Arc<Unmarked>,
}

impl Marker {
    /// Starts the writer task; it keeps `unmarked` up to date.
    pub(super) fn start(store: Arc<dyn Store>, unmarked: Arc<Unmarked>) -> (Self, JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = tokio::spawn(write(store, rx, unmarked.clone()));
        (Self { tx, unmarked }, writer)
    }

    pub(super) fn dispatched(&self, runs: Vec<Uuid>, at: DateTime<Utc>) {
        if !runs.is_empty() {
            self.unmarked.insert(&runs);
            let _ = self.tx.send(Mark::Dispatched(runs, at));
        }
    }

    pub(super) fn failed(&self, run: Uuid, reason: impl Into<String>) {
        let _ = self.tx.send(Mark::Failed(run, reason.into()));
    }

    pub(super) fn unpublishable(&self, unpublishable: Unpublishable) {
        let _ = self.tx.send(Mark::Unpublishable(unpublishable));
    }
}

/// Confirms waiting out their delay, oldest first.
#[derive(Debug, Default)]
struct Waiting {
    confirms: VecDeque<Confirmed>,
}

#[derive(Debug)]
struct Confirmed {
    arrived: Instant,
    runs: Vec<Uuid>,
    at: DateTime<Utc>,
}

impl Waiting {
    fn push(&mut self, arrived: Instant, runs: Vec<Uuid>, at: DateTime<Utc>) {
        self.confirms.push_back(Confirmed { arrived, runs, at });
    }

    fn is_empty(&self) -> bool {
        self.confirms.is_empty()
    }

    /// When the oldest confirm is due to be written.
    fn next_due(&self) -> Option<Instant> {
        self.confirms.front().map(|c| c.arrived + MARK_DELAY)
    }

    /// Once the oldest confirm is due at `now`: it and every confirm due within
    /// [`MARK_BATCH`] of it, as one mark (their runs and the latest confirm time), so a
    /// steady flow is written in batches rather than a statement per confirm.
    fn take_due(&mut self, now: Instant) -> Option<(Vec<Uuid>, DateTime<Utc>)> {
        if self.next_due().is_none_or(|due| due > now) {
            return None;
        }
        self.take_while(|c| c.arrived + MARK_DELAY <= now + MARK_BATCH)
    }

    /// Every confirm, due or not (the dispatcher stopped).
    fn take_all(&mut self) -> Option<(Vec<Uuid>, DateTime<Utc>)> {
        self.take_while(|_| true)
    }

    fn take_while(
        &mut self,
        mut take: impl FnMut(&Confirmed) -> bool,
    ) -> Option<(Vec<Uuid>, DateTime<Utc>)> {
        let mut runs = Vec::new();
        let mut latest = None;
        while self.confirms.front().is_some_and(&mut take) {
            let confirmed = self.confirms.pop_front().expect("front exists");
            runs.extend(confirmed.runs);
            latest = latest.max(Some(confirmed.at));
        }
        Some((runs, latest?))
    }
}

/// Why the writer woke up.
enum Wake {
    Mark(Mark),
    /// The oldest waiting confirm is due.
    Due,
    /// Every sender is gone and everything sent was received.
    Closed,
}

async fn write(
    store: Arc<dyn Store>,
    mut rx: mpsc::UnboundedReceiver<Mark>,
    unmarked: Arc<Unmarked>,
) {
    let mut waiting = Waiting::default();
    loop {
        let mut failed = Vec::new();
        let mut given_up = Vec::new();
        let mut take = |mark, waiting: &mut Waiting| match mark {
            Mark::Dispatched(runs, at) => waiting.push(Instant::now(), runs, at),
            Mark::Failed(run, reason) => failed.push((run, reason)),
            Mark::Unpublishable(run) => given_up.push(run),
        };
        let wake = match waiting.next_due() {
            Some(due) => tokio::select! {
                mark = rx.recv() => mark.map_or(Wake::Closed, Wake::Mark),
                () = tokio::time::sleep_until(due) => Wake::Due,
            },
            None => rx.recv().await.map_or(Wake::Closed, Wake::Mark),
        };
        let open = !matches!(wake, Wake::Closed);
        if let Wake::Mark(mark) = wake {
            take(mark, &mut waiting);
            while let Ok(mark) = rx.try_recv() {
                take(mark, &mut waiting);
            }
        }
        // Once the dispatcher is gone (shutdown) everything is written at once.
        let due = if open {
            waiting.take_due(Instant::now())
        } else {
            waiting.take_all()
        };
        if let Some((mut dispatched, at)) = due {
            let answered = unmarked.retain_unmarked(&mut dispatched);
            metrics::counter!(telemetry::DISPATCH_MARKS_SKIPPED).increment(answered as u64);
            // When every run was answered first there is nothing to write.
            if !dispatched.is_empty()
                && let Err(error) = store.mark_dispatched(&dispatched, at).await
            {
                error!(%error, runs = dispatched.len(), "could not mark runs dispatched");
                metrics::counter!(telemetry::STORE_ERRORS, "operation" => "mark_dispatched")
                    .increment(1);
            }
            // Written or not, they are the reconciler's again: a failed mark leaves them
            // `scheduled`, to be published again.
            unmarked.remove(&dispatched);
        }
        for (run_id, reason) in failed {
            if let Err(error) = store.note_publish_failure(run_id, &reason).await {
                error!(%error, %run_id, "could not note a publish failure");
                metrics::counter!(telemetry::STORE_ERRORS, "operation" => "note_publish_failure")
                    .increment(1);
            }
        }
        for run in given_up {
            give_up(store.as_ref(), run).await;
        }
        if !open && waiting.is_empty() {
            return;
        }
    }
}

/// Gives up a run whose task can never be published: `dead` with the reason, its
/// dead letter pending (the reconciler publishes it to the group's dead-letter queue).
async fn give_up(store: &dyn Store, run: Unpublishable) {
    let now = Utc::now();
    let record = AttemptRecord {
        attempt: run.attempt,
        event: "unpublishable".into(),
        at: now,
        consumer: None,
        error: Some(run.reason.clone()),
        retry_at: None,
    };
    let expect = Expect::exactly(RunState::Scheduled, run.attempt);
    if let Err(error) = store
        .kill_run(run.run, expect, &run.reason, Some(&record), false, now)
        .await
    {
        // The run stays `scheduled`: the reconciler hands it over again, and it is
        // refused again, without publishing anything.
        error!(%error, run_id = %run.run, "could not give up an unpublishable run");
        metrics::counter!(telemetry::STORE_ERRORS, "operation" => "kill_run").increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u128) -> Vec<Uuid> {
        vec![Uuid::from_u128(n)]
    }

    #[test]
    fn a_confirm_waits_out_its_delay() {
        let start = Instant::now();
        let at = Utc::now();
        let mut waiting = Waiting::default();
        assert_eq!(waiting.next_due(), None);
        waiting.push(start, ids(1), at);
        assert_eq!(waiting.next_due(), Some(start + MARK_DELAY));
        assert!(waiting.take_due(start).is_none());
        assert!(
            waiting
                .take_due(start + MARK_DELAY - Duration::from_millis(1))
                .is_none()
        );
        let (runs, latest) = waiting.take_due(start + MARK_DELAY).unwrap();
        assert_eq!((runs, latest), (ids(1), at));
        assert!(waiting.is_empty());
    }

    #[test]
    fn confirms_due_within_the_batch_window_go_with_the_oldest() {
        let start = Instant::now();
        let at = Utc::now();
        let later = at + chrono::Duration::milliseconds(80);
        let mut waiting = Waiting::default();
        waiting.push(start, ids(1), at);
        waiting.push(start + MARK_BATCH / 2, ids(2), later);
        waiting.push(start + MARK_BATCH, ids(3), later);
        waiting.push(start + MARK_BATCH * 2, ids(4), later);
        let (runs, latest) = waiting.take_due(start + MARK_DELAY).unwrap();
        assert_eq!(runs, [ids(1), ids(2), ids(3)].concat());
        assert_eq!(latest, later, "the mark carries the latest confirm time");
        assert_eq!(
            waiting.next_due(),
            Some(start + MARK_BATCH * 2 + MARK_DELAY)
        );
        assert!(waiting.take_due(start + MARK_DELAY).is_none());
    }

    #[test]
    fn answered_runs_are_left_out_of_their_mark() {
        let unmarked = Unmarked::default();
        let runs: Vec<Uuid> = (1..=4).map(Uuid::from_u128).collect();
        unmarked.insert(&runs);
        unmarked.answered([runs[1], runs[3], Uuid::from_u128(99)]);
        assert!(unmarked.contains(runs[0]));
        assert!(
            !unmarked.contains(runs[1]),
            "the reconciler need not spare an answered run"
        );
        let mut due = runs.clone();
        assert_eq!(unmarked.retain_unmarked(&mut due), 2);
        assert_eq!(due, [runs[0], runs[2]]);
        // A reply recorded before its confirm arrives changes nothing: the mark's own
        // statement only moves runs still `scheduled`.
        let early = Uuid::from_u128(5);
        unmarked.answered([early]);
        unmarked.insert(&[early]);
        let mut due = vec![early];
        assert_eq!(unmarked.retain_unmarked(&mut due), 0);
    }

    #[test]
    fn at_shutdown_every_confirm_goes_at_once() {
        let start = Instant::now();
        let at = Utc::now();
        let mut waiting = Waiting::default();
        assert!(waiting.take_all().is_none());
        waiting.push(start, ids(1), at);
        waiting.push(start + MARK_DELAY * 3, ids(2), at);
        let (runs, _) = waiting.take_all().unwrap();
        assert_eq!(runs, [ids(1), ids(2)].concat());
        assert!(waiting.is_empty());
    }
}
