//! [`RunFilter`]: which runs a search across jobs (`GET /v1/runs`, `chimectl run ls`)
//! asks for, and the page of them — newest fire time first, run id breaking ties. Pure:
//! the API parses a request into it, the application service narrows it to the caller's
//! apps, and each store turns it into one indexed query.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{DeliveryMode, RunState};

/// A search for runs across jobs. Every filter given must hold (AND); an empty or absent
/// filter matches every run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    /// Runs in any of these states (empty: any state).
    pub states: Vec<RunState>,
    /// Runs of jobs of any of these apps (`None`: any app). An empty list matches nothing.
    pub apps: Option<Vec<String>>,
    /// Runs of this job.
    pub job: Option<Uuid>,
    /// Runs fired to this consumer group (the job's target group when the run was recorded).
    pub group: Option<String>,
    /// Runs fired in this delivery mode.
    pub mode: Option<DeliveryMode>,
    /// Runs whose fire time is at or after this.
    pub fired_after: Option<DateTime<Utc>>,
    /// Runs whose fire time is strictly before this.
    pub fired_before: Option<DateTime<Utc>>,
    /// Finished runs whose finish time is at or after this.
    pub finished_after: Option<DateTime<Utc>>,
    /// Finished runs whose finish time is strictly before this.
    pub finished_before: Option<DateTime<Utc>>,
    /// Only runs strictly after this (fire time, id) position in newest-first order: the
    /// previous page's last run.
    pub before: Option<(DateTime<Utc>, Uuid)>,
    /// At most this many.
    pub limit: u32,
}

/// At most this many apps are searched as one index range each (see
/// [`RunFilter::branches`]); a longer list is one condition on every row read.
pub const MAX_APP_BRANCHES: usize = 16;

impl RunFilter {
    /// The filter split so that each part lists at most one state (or else at most one
    /// app), the parts together matching what the filter matches, each run in one part.
    /// A store reads each part through the index on that state (or app) in page order
    /// and merges the parts' pages, so a page costs about a page per part instead of
    /// every run of the listed states. Several states split first; up to
    /// [`MAX_APP_BRANCHES`] apps split when at most one state is listed.
    pub fn branches(&self) -> Vec<RunFilter> {
        if self.states.len() > 1 {
            return self
                .states
                .iter()
                .map(|state| RunFilter {
                    states: vec![*state],
                    ..self.clone()
                })
                .collect();
        }
        match &self.apps {
            Some(apps) if apps.len() > 1 && apps.len() <= MAX_APP_BRANCHES => apps
                .iter()
                .map(|app| RunFilter {
                    apps: Some(vec![app.clone()]),
                    ..self.clone()
                })
                .collect(),
            _ => vec![self.clone()],
        }
    }

    /// Whether the filter can match no run without asking the store: an empty app list
    /// (a scoped caller asking for none of its apps).
    pub fn matches_nothing(&self) -> bool {
        self.apps.as_ref().is_some_and(Vec::is_empty)
    }

    /// Whether `run`, of a job of `app` targeting `group`, matches: the stores' queries
    /// say the same in SQL (the store suite checks them against this).
    pub fn matches(&self, run: &super::Run, app: &str, group: &str) -> bool {
        let within = |at: Option<DateTime<Utc>>,
                      after: Option<DateTime<Utc>>,
                      before: Option<DateTime<Utc>>| {
            match at {
                Some(at) => after.is_none_or(|a| at >= a) && before.is_none_or(|b| at < b),
                None => after.is_none() && before.is_none(),
            }
        };
        (self.states.is_empty() || self.states.contains(&run.state))
            && self
                .apps
                .as_ref()
                .is_none_or(|apps| apps.iter().any(|a| a == app))
            && self.job.is_none_or(|job| job == run.job_id)
            && self.group.as_deref().is_none_or(|g| g == group)
            && self.mode.is_none_or(|m| m == run.mode)
            && within(Some(run.fire_time), self.fired_after, self.fired_before)
            && within(run.finished_at, self.finished_after, self.finished_before)
            && self
                .before
                .is_none_or(|position| (run.fire_time, run.id) < position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Run, RunTrigger};
    use chrono::Duration;
    use serde_json::Value;

    fn run(at: DateTime<Utc>) -> Run {
        Run::new(Uuid::now_v7(), at, RunTrigger::Manual, Value::Null, at)
    }

    #[test]
    fn every_filter_must_hold() {
        let now: DateTime<Utc> = "2026-11-27T10:00:00Z".parse().unwrap();
        let mut r = run(now);
        let all = RunFilter::default();
        assert!(all.matches(&r, "shop", "orders"));
        let apps = RunFilter {
            apps: Some(vec!["mail".into()]),
            ..RunFilter::default()
        };
        assert!(!apps.matches(&r, "shop", "orders"));
        assert!(apps.matches(&r, "mail", "orders"));
        let fired = RunFilter {
            fired_after: Some(now),
            fired_before: Some(now + Duration::seconds(1)),
            ..RunFilter::default()
        };
        assert!(fired.matches(&r, "shop", "orders"), "after is inclusive");
        r.fire_time = now + Duration::seconds(1);
        assert!(!fired.matches(&r, "shop", "orders"), "before is exclusive");
        let finished = RunFilter {
            finished_after: Some(now),
            ..RunFilter::default()
        };
        assert!(
            !finished.matches(&r, "shop", "orders"),
            "an unfinished run has no finish time in any range"
        );
        r.finished_at = Some(now);
        assert!(finished.matches(&r, "shop", "orders"));
        let states = RunFilter {
            states: vec![RunState::Dead, RunState::Failed],
            ..RunFilter::default()
        };
        assert!(!states.matches(&r, "shop", "orders"));
        r.state = RunState::Dead;
        assert!(states.matches(&r, "shop", "orders"));
        assert!(
            RunFilter {
                apps: Some(vec![]),
                ..RunFilter::default()
            }
            .matches_nothing()
        );
    }

    #[test]
    fn branches_split_one_list_and_keep_the_rest() {
        let filter = RunFilter {
            states: vec![RunState::Failed, RunState::Dead],
            apps: Some(vec!["a".into(), "b".into()]),
            limit: 7,
            ..RunFilter::default()
        };
        let parts = filter.branches();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1].states, [RunState::Dead]);
        assert_eq!(parts[1].apps, filter.apps);
        assert_eq!(parts[1].limit, 7);
        let apps = RunFilter {
            states: vec![RunState::Dead],
            ..filter.clone()
        };
        assert_eq!(apps.branches().len(), 2);
        assert_eq!(apps.branches()[0].apps, Some(vec!["a".to_string()]));
        let many = RunFilter {
            apps: Some((0..=MAX_APP_BRANCHES).map(|i| i.to_string()).collect()),
            ..RunFilter::default()
        };
        assert_eq!(many.branches(), std::slice::from_ref(&many));
        assert_eq!(RunFilter::default().branches().len(), 1);
    }
}
