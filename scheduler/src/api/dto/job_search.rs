//! The query of `GET /v1/jobs` (the job list) and its parsing into a [`JobFilter`]:
//! every value is checked here (with the parsers of [`crate::domain::job_filter`]), and a
//! bad one is refused naming its parameter before anything is read.

use serde::{Deserialize, Serialize};

use super::{ListQuery, RequestError};
use crate::domain::{
    JobFilter, JobPosition, JobSort,
    job::validate_name,
    job_filter::{parse_mode, parse_paused, parse_search},
};

/// The query of `GET /v1/jobs`. Every parameter is optional; the filters given must all
/// hold.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct JobListQuery {
    /// Only jobs of this app.
    pub app: Option<String>,
    /// Only jobs whose target group is this (exact).
    pub group: Option<String>,
    /// Only jobs whose target mode is this: `group`, `broadcast`, `zone` or `sharded`.
    pub mode: Option<String>,
    /// Only paused (`true`) or running (`false`) jobs.
    pub paused: Option<String>,
    /// Only jobs whose name or `app/name` contains this, ignoring case (1 to 128
    /// characters).
    pub q: Option<String>,
    /// The order: `name` (app, then name), `-name`, `updated_at` (least recently
    /// changed first) or `-updated_at`. Default: creation order. There is no next-fire
    /// order (an index on it would be rewritten by every fire); each job's
    /// `next_fire_at` is in the answer.
    pub sort: Option<String>,
    /// Page size, default 100, at most 1000.
    pub limit: Option<u32>,
    /// The previous page's `next`, of a list in the same order.
    pub cursor: Option<String>,
}

impl JobListQuery {
    /// The filter this query asks for, or the first bad parameter.
    pub fn to_filter(&self) -> Result<JobFilter, RequestError> {
        let limit = ListQuery {
            limit: self.limit,
            ..ListQuery::default()
        }
        .limit()?;
        let name = |field: &str, value: &Option<String>| {
            value
                .as_ref()
                .map(|v| validate_name(field, v).map(|()| v.clone()))
                .transpose()
        };
        let sort = self
            .sort
            .as_deref()
            .map(JobSort::parse)
            .transpose()?
            .unwrap_or_default();
        Ok(JobFilter {
            apps: name("app", &self.app)?.map(|app| vec![app]),
            group: name("group", &self.group)?,
            mode: self.mode.as_deref().map(parse_mode).transpose()?,
            paused: self.paused.as_deref().map(parse_paused).transpose()?,
            search: self.q.as_deref().map(parse_search).transpose()?,
            sort,
            after: self
                .cursor
                .as_deref()
                .map(|c| JobPosition::parse_cursor(c, sort))
                .transpose()?,
            limit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::DeliveryMode;

    fn field(query: JobListQuery) -> String {
        match query.to_filter() {
            Err(RequestError::Invalid(e)) => e.field.clone(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn every_parameter_parses_and_each_bad_one_is_named() {
        let filter = JobListQuery {
            app: Some("shop".into()),
            group: Some("orders".into()),
            mode: Some("sharded".into()),
            paused: Some("true".into()),
            q: Some("Close".into()),
            sort: Some("-updated_at".into()),
            limit: Some(5),
            cursor: Some(
                "-updated_at.1764237600000000.00000000-0000-0000-0000-000000000001".into(),
            ),
        }
        .to_filter()
        .unwrap();
        assert_eq!(filter.apps, Some(vec!["shop".to_string()]));
        assert_eq!(filter.group.as_deref(), Some("orders"));
        assert_eq!(filter.mode, Some(DeliveryMode::Sharded));
        assert_eq!(filter.paused, Some(true));
        assert_eq!(filter.search.as_deref(), Some("close"));
        assert_eq!(filter.sort, JobSort::Updated { descending: true });
        assert!(matches!(filter.after, Some(JobPosition::Updated(_, _))));
        assert_eq!(filter.limit, 5);
        let default = JobListQuery::default().to_filter().unwrap();
        assert_eq!((default.sort, default.limit), (JobSort::Created, 100));

        let bad = |f: fn(&mut JobListQuery)| {
            let mut q = JobListQuery::default();
            f(&mut q);
            field(q)
        };
        assert_eq!(bad(|q| q.app = Some("a b".into())), "app");
        assert_eq!(bad(|q| q.group = Some(String::new())), "group");
        assert_eq!(bad(|q| q.mode = Some("fanout".into())), "mode");
        assert_eq!(bad(|q| q.paused = Some("1".into())), "paused");
        assert_eq!(bad(|q| q.q = Some(String::new())), "q");
        assert_eq!(bad(|q| q.sort = Some("id".into())), "sort");
        assert_eq!(bad(|q| q.sort = Some("next_fire_at".into())), "sort");
        assert_eq!(bad(|q| q.limit = Some(1001)), "limit");
        assert_eq!(bad(|q| q.cursor = Some("x".into())), "cursor");
        assert_eq!(
            bad(|q| {
                q.sort = Some("name".into());
                q.cursor = Some("updated_at.1.00000000-0000-0000-0000-000000000001".into());
            }),
            "cursor"
        );
    }
}
