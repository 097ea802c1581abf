//! Searching runs across jobs (`GET /v1/runs`, `chimectl run ls`): [`Runs::search`]
//! narrows a [`RunFilter`] to the caller's apps and reads one page from the store. Kept
//! beside [`super::runs`] (which owns reading one run and one job's runs) so each
//! operation on runs stays its own block.

use crate::domain::{
    Run, RunFilter,
    access::{Action, Caller},
};

use super::runs::{Runs, RunsError};

impl Runs {
    /// A page of runs across jobs matching `filter`, newest fire time first. A caller
    /// scoped to some apps sees only its apps' runs; naming an app (or a job of an app)
    /// outside its scope is refused, as a job listing is. A job filter naming no job
    /// matches nothing.
    pub async fn search(&self, caller: &Caller, filter: &RunFilter) -> Result<Vec<Run>, RunsError> {
        let mut filter = filter.clone();
        filter.apps = caller.narrow_apps(Action::ReadJobs, filter.apps.take())?;
        if let Some(job) = filter.job
            && caller.visible_apps().is_some()
        {
            match self.store.get_job(job).await? {
                Some(stored) => caller.check(Action::ReadJobs, Some(&stored.spec.app))?,
                None => return Ok(Vec::new()),
            }
        }
        Ok(self.store.search_runs(&filter).await?)
    }
}
