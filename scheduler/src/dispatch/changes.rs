//! Job changes in progress on this node, so that a change and the publishing of its job's
//! due tasks never overlap.
//!
//! A change (edit, pause, delete) withdraws the job's fires armed after the change's
//! instant: it deletes their `scheduled` runs. The dispatcher meanwhile releases armed
//! tasks at their fire times without asking the store. Without a fence, a task released
//! between the change's instant and the moment the dispatcher hears of the change would
//! go out and then lose its run, so the consumer's answers would name an unknown run.
//!
//! The fence: the change is *begun* here before its transaction ([`Changes::begin`]),
//! which notes the job and returns the change's instant; the dispatcher checks, just
//! before publishing, whether a task's job is being changed, and parks it if so. Both
//! happen under one lock, so either the task was checked first — it was due by then, so
//! its fire time is not after the change's instant and the change leaves its run alone —
//! or the change began first and the task waits. When the dispatcher hears of the
//! committed change (through the timer, after any fires the timer recorded before it),
//! it marks the job's waiting tasks to be checked against the store, and only then lifts
//! the fence; parked tasks whose runs were withdrawn are dropped there.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::outgoing::Outgoing;

/// What the dispatcher is told. It lives beside [`ChangeGuard`] because a guard that is
/// dropped unlifted travels to the dispatcher in it.
#[derive(Debug)]
pub(super) enum Command {
    Publish(Box<Outgoing>),
    /// The job changed; a change made on this node comes with its guard, lifted once the
    /// job's waiting tasks are marked for a check.
    JobChanged(Uuid, Option<ChangeGuard>),
    /// Changes may have been missed: every waiting task is checked.
    ChangesMissed,
}

/// Jobs being changed on this node, with how many changes of each are in progress.
#[derive(Debug, Default)]
pub(super) struct Changes(Mutex<HashMap<Uuid, usize>>);

impl Changes {
    /// Notes a change of `job` starting now; returns the change's instant.
    pub(super) fn begin(&self, job: Uuid) -> DateTime<Utc> {
        let mut changing = self.lock();
        *changing.entry(job).or_default() += 1;
        // Read under the lock: every task checked before this saw the job unchanged and
        // was due by then.
        Utc::now()
    }

    /// Whether a change of `job` is in progress.
    pub(super) fn is_changing(&self, job: Uuid) -> bool {
        self.lock().contains_key(&job)
    }

    /// Splits tasks (by job) into those that may go out and those whose job is being
    /// changed, in one look at the changes in progress.
    pub(super) fn split<T>(&self, tasks: Vec<T>, job_of: impl Fn(&T) -> Uuid) -> (Vec<T>, Vec<T>) {
        let changing = self.lock();
        if changing.is_empty() {
            return (tasks, Vec::new());
        }
        tasks
            .into_iter()
            .partition(|task| !changing.contains_key(&job_of(task)))
    }

    fn end(&self, job: Uuid) {
        let mut changing = self.lock();
        if let Some(count) = changing.get_mut(&job) {
            *count -= 1;
            if *count == 0 {
                changing.remove(&job);
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Uuid, usize>> {
        // The map is updated in single statements: a panic elsewhere cannot leave it
        // half-changed.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One change of a job in progress. Hand it to the timer with the change's notice once
/// the change has committed (or failed): it reaches the dispatcher after the fires the
/// timer recorded before, and the dispatcher lifts it. Dropped anywhere else, it is sent
/// to the dispatcher directly, so a change is never left in progress.
#[derive(Debug)]
pub struct ChangeGuard {
    job: Uuid,
    since: DateTime<Utc>,
    changes: Arc<Changes>,
    /// Where an unlifted guard goes when dropped; `None` once it is on its way there.
    forward: Option<mpsc::UnboundedSender<Command>>,
    lifted: bool,
}

impl ChangeGuard {
    pub(super) fn begin(
        job: Uuid,
        changes: Arc<Changes>,
        forward: mpsc::UnboundedSender<Command>,
    ) -> Self {
        let since = changes.begin(job);
        Self {
            job,
            since,
            changes,
            forward: Some(forward),
            lifted: false,
        }
    }

    /// The job being changed.
    pub fn job(&self) -> Uuid {
        self.job
    }

    /// The change's instant: fires after it are the change's to withdraw, fires up to it
    /// may already be published.
    pub fn since(&self) -> DateTime<Utc> {
        self.since
    }

    /// Ends the change (the dispatcher, once the job's waiting tasks are marked).
    pub(super) fn lift(mut self) {
        self.lifted = true;
        self.changes.end(self.job);
    }
}

impl Drop for ChangeGuard {
    fn drop(&mut self) {
        if self.lifted {
            return;
        }
        match self.forward.take() {
            // Passes the change on to the dispatcher; if it is gone, the guard comes
            // back with the failed send and is dropped again, ending the change here.
            Some(forward) => {
                let _ = forward.send(Command::JobChanged(
                    self.job,
                    Some(ChangeGuard {
                        job: self.job,
                        since: self.since,
                        changes: self.changes.clone(),
                        forward: None,
                        lifted: false,
                    }),
                ));
                // The copy carries the change now.
                self.lifted = true;
            }
            None => self.changes.end(self.job),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    #[test]
    fn a_begun_change_parks_its_jobs_tasks_only() {
        let changes = Changes::default();
        let (changed, other) = (job(1), job(2));
        let since = changes.begin(changed);
        assert!(since <= Utc::now());
        let (go, park) = changes.split(vec![changed, other, changed], |job| *job);
        assert_eq!(go, vec![other]);
        assert_eq!(park, vec![changed, changed]);
    }

    #[test]
    fn a_job_stays_changing_until_its_last_change_ends() {
        let changes = Arc::new(Changes::default());
        let (tx, _rx) = mpsc::unbounded_channel();
        let changed = job(1);
        let first = ChangeGuard::begin(changed, changes.clone(), tx.clone());
        let second = ChangeGuard::begin(changed, changes.clone(), tx);
        assert!(second.since() >= first.since());
        first.lift();
        assert!(changes.is_changing(changed));
        second.lift();
        assert!(!changes.is_changing(changed));
    }

    #[test]
    fn a_dropped_guard_goes_to_the_dispatcher_still_in_force() {
        let changes = Arc::new(Changes::default());
        let (tx, mut rx) = mpsc::unbounded_channel();
        let changed = job(1);
        drop(ChangeGuard::begin(changed, changes.clone(), tx));
        assert!(
            changes.is_changing(changed),
            "in force until the dispatcher lifts it"
        );
        match rx.try_recv() {
            Ok(Command::JobChanged(job, Some(guard))) => {
                assert_eq!(job, changed);
                guard.lift();
            }
            other => panic!("expected the change passed on, got {other:?}"),
        }
        assert!(!changes.is_changing(changed));
    }

    #[test]
    fn a_guard_dropped_without_a_dispatcher_ends_the_change() {
        let changes = Arc::new(Changes::default());
        let (tx, rx) = mpsc::unbounded_channel();
        drop(rx);
        let changed = job(1);
        drop(ChangeGuard::begin(changed, changes.clone(), tx));
        assert!(!changes.is_changing(changed));
    }
}
