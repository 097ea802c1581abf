//! [`Runs`]: reading run history — one run with the view of its whole fire, and a job's
//! runs page by page. Every edge reads runs through here, so a later rule on who may see
//! which runs (a permission, an audit entry) has one place.
//!
//! Acting on runs goes elsewhere for now: a dead letter's replay is
//! [`crate::dlq::DeadLetters::replay`], a manual fire is [`super::Jobs::trigger`].

use std::sync::Arc;

use uuid::Uuid;

use crate::{
    domain::{
        Run,
        access::{Action, Caller, Denied},
    },
    store::{RunPage, Store, StoreError},
};

/// Why a run operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RunsError {
    /// No run has this id.
    #[error("no run with id {0}")]
    RunNotFound(Uuid),
    /// No job has this id (its run history was asked for).
    #[error("no job with id {0}")]
    JobNotFound(Uuid),
    /// The caller may not read this job's runs.
    #[error(transparent)]
    Denied(#[from] Denied),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One run with every item of its fire: the runs of its job with the same fire time and
/// trigger.
#[derive(Debug, Clone)]
pub struct Fire {
    /// The run asked for (or, for a manual trigger, the fire's first item).
    pub run: Run,
    /// Every item of the run's fire as stored, `run` included, by shard.
    pub items: Vec<Run>,
}

/// Run history. Cheap to share.
pub struct Runs {
    pub(super) store: Arc<dyn Store>,
    /// Recent answers of [`Runs::stats`].
    pub(super) stats_cache: super::stats_cache::StatsCache,
}

impl Runs {
    /// Run history kept in `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            stats_cache: Default::default(),
        }
    }

    /// Run `id`, with the view of its whole fire.
    pub async fn get(&self, caller: &Caller, id: Uuid) -> Result<Fire, RunsError> {
        caller.check(Action::ReadJobs, None)?;
        let run = self
            .store
            .get_run(id)
            .await?
            .ok_or(RunsError::RunNotFound(id))?;
        if caller.visible_apps().is_some() {
            // A run is its job's app's; a run whose job is gone is no scoped caller's.
            match self.store.get_job(run.job_id).await? {
                Some(job) => caller.check(Action::ReadJobs, Some(&job.spec.app))?,
                None => return Err(RunsError::RunNotFound(id)),
            }
        }
        // A one-item fire is the run alone: no need to ask.
        let items = if run.shard_total <= 1 {
            vec![run.clone()]
        } else {
            fire_items(self.store.as_ref(), &run).await?
        };
        Ok(Fire { run, items })
    }

    /// A page of job `job`'s runs, newest fire time first.
    pub async fn list(
        &self,
        caller: &Caller,
        job: Uuid,
        page: &RunPage,
    ) -> Result<Vec<Run>, RunsError> {
        caller.check(Action::ReadJobs, None)?;
        let Some(stored) = self.store.get_job(job).await? else {
            return Err(RunsError::JobNotFound(job));
        };
        caller.check(Action::ReadJobs, Some(&stored.spec.app))?;
        Ok(self.store.list_runs(job, page).await?)
    }
}

/// Every item of `run`'s fire as stored, `run` included: the runs of its job with the
/// same fire time and trigger (a manual trigger in the millisecond of a scheduled fire is
/// a fire of its own), by shard.
pub(crate) async fn fire_items(store: &dyn Store, run: &Run) -> Result<Vec<Run>, StoreError> {
    let mut items: Vec<Run> = store
        .fire_items(run.job_id, run.fire_time)
        .await?
        .into_iter()
        .filter(|item| item.trigger == run.trigger)
        .collect();
    if !items.iter().any(|item| item.id == run.id) {
        // The job (and its runs) was deleted since the run was read.
        items.push(run.clone());
        items.sort_by_key(|item| item.shard);
    }
    Ok(items)
}
