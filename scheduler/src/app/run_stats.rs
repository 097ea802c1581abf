//! Run statistics (`GET /v1/stats/runs`, `chimectl run stats`): [`Runs::stats`] counts
//! the runs fired in a recent window, cluster-wide, from the store (not this node's
//! metrics), narrowed to the caller's apps by the same rule as a search across jobs
//! ([`Caller::narrow_apps`]), and lays them out with
//! [`crate::domain::run_stats::summarise`].
//!
//! Many open consoles poll the same numbers: an answer is kept for [`STATS_TTL`](super::stats_cache::STATS_TTL) per
//! (apps read, minutes) and shared, and concurrent callers of the same key wait for one
//! query instead of each running it.

use std::{sync::Arc, time::Instant};

use chrono::Utc;

use super::runs::{Runs, RunsError};
use crate::domain::{
    access::{Action, Caller},
    run_stats::{RunStats, StatsMinutes, StatsWindow, summarise},
};

impl Runs {
    /// Statistics of the runs fired in the last `minutes` (see
    /// [`crate::domain::run_stats`]), of `app` only when given. A caller scoped to some
    /// apps counts only its apps' runs; naming an app outside its scope is refused. The
    /// answer may be up to [`STATS_TTL`](super::stats_cache::STATS_TTL) old.
    pub async fn stats(
        &self,
        caller: &Caller,
        minutes: StatsMinutes,
        app: Option<&str>,
    ) -> Result<Arc<RunStats>, RunsError> {
        let apps = caller.narrow_apps(Action::ReadRunStats, app.map(|a| vec![a.to_string()]))?;
        let cell = self
            .stats_cache
            .cell((apps.clone(), minutes), Instant::now());
        let stats = cell
            .get_or_try_init(|| async {
                let window = StatsWindow::ending_at(Utc::now(), minutes);
                let counts = self
                    .store
                    .run_stats(window.from, window.now, apps.as_deref())
                    .await?;
                Ok::<_, RunsError>(Arc::new(summarise(&window, &counts)))
            })
            .await?;
        Ok(stats.clone())
    }
}
