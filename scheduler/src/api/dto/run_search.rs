//! The query of `GET /v1/runs` (runs searched across jobs) and its parsing into a
//! [`RunFilter`]: every value is checked here, and a bad one is refused naming its field.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{ListQuery, RequestError, parse_run_cursor};
use crate::domain::{DeliveryMode, RunFilter, RunState, job::validate_name};

/// The query of `GET /v1/runs`. Every parameter is optional; those given must all hold.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RunSearchQuery {
    /// Runs in one of these states, comma-separated (`failed,dead`).
    pub state: Option<String>,
    /// Runs of this app's jobs.
    pub app: Option<String>,
    /// Runs of this job (its id).
    pub job: Option<String>,
    /// Runs fired to this consumer group.
    pub group: Option<String>,
    /// Runs fired in this delivery mode (`group`, `broadcast`, `zone`, `sharded`).
    pub mode: Option<String>,
    /// Runs whose fire time is at or after this instant (RFC 3339).
    pub fired_after: Option<String>,
    /// Runs whose fire time is before this instant (RFC 3339).
    pub fired_before: Option<String>,
    /// Runs that finished at or after this instant (RFC 3339).
    pub finished_after: Option<String>,
    /// Runs that finished before this instant (RFC 3339).
    pub finished_before: Option<String>,
    /// Page size, default 100, at most 1000.
    pub limit: Option<u32>,
    /// The previous page's `next`.
    pub cursor: Option<String>,
}

impl RunSearchQuery {
    /// The filter this query asks for, or the first bad parameter.
    pub fn to_filter(&self) -> Result<RunFilter, RequestError> {
        let limit = ListQuery {
            limit: self.limit,
            ..ListQuery::default()
        }
        .limit()?;
        let filter = RunFilter {
            states: self
                .state
                .as_deref()
                .map(states)
                .transpose()?
                .unwrap_or_default(),
            apps: self
                .app
                .as_ref()
                .map(|app| validate_name("app", app).map(|()| vec![app.clone()]))
                .transpose()?,
            job: self
                .job
                .as_deref()
                .map(|job| {
                    Uuid::parse_str(job).map_err(|_| {
                        RequestError::invalid("job", format!("job {job:?} is not a job id"))
                    })
                })
                .transpose()?,
            group: self
                .group
                .as_ref()
                .map(|group| validate_name("group", group).map(|()| group.clone()))
                .transpose()?,
            mode: self
                .mode
                .as_deref()
                .map(|mode| {
                    DeliveryMode::parse(mode).ok_or_else(|| {
                        RequestError::invalid(
                            "mode",
                            format!("unknown mode {mode:?}: use group, broadcast, zone or sharded"),
                        )
                    })
                })
                .transpose()?,
            fired_after: instant("fired_after", self.fired_after.as_deref())?,
            fired_before: instant("fired_before", self.fired_before.as_deref())?,
            finished_after: instant("finished_after", self.finished_after.as_deref())?,
            finished_before: instant("finished_before", self.finished_before.as_deref())?,
            before: self.cursor.as_deref().map(parse_run_cursor).transpose()?,
            limit,
        };
        for (after, before, field) in [
            (filter.fired_after, filter.fired_before, "fired_before"),
            (
                filter.finished_after,
                filter.finished_before,
                "finished_before",
            ),
        ] {
            if let (Some(after), Some(before)) = (after, before)
                && before < after
            {
                let after_field = field.replace("_before", "_after");
                return Err(RequestError::invalid(
                    field,
                    format!("{field} is earlier than {after_field}"),
                ));
            }
        }
        Ok(filter)
    }
}

/// A comma-separated list of run states, each once.
fn states(list: &str) -> Result<Vec<RunState>, RequestError> {
    let mut states = Vec::new();
    for name in list.split(',').map(str::trim) {
        let state = RunState::parse(name).ok_or_else(|| {
            RequestError::invalid(
                "state",
                format!(
                    "unknown state {name:?}: use scheduled, dispatched, acked, succeeded, failed \
                     or dead, comma-separated"
                ),
            )
        })?;
        if !states.contains(&state) {
            states.push(state);
        }
    }
    Ok(states)
}

/// An RFC 3339 instant given as `field`.
fn instant(field: &str, value: Option<&str>) -> Result<Option<DateTime<Utc>>, RequestError> {
    value
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| {
                    RequestError::invalid(
                        field,
                        format!("{field} must be an RFC 3339 instant (2026-11-27T10:00:00Z): {e}"),
                    )
                })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(query: RunSearchQuery) -> String {
        match query.to_filter() {
            Err(RequestError::Invalid(e)) => e.field.clone(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn every_parameter_parses_and_each_bad_one_is_named() {
        let filter = RunSearchQuery {
            state: Some("failed, dead,failed".into()),
            app: Some("shop".into()),
            mode: Some("broadcast".into()),
            fired_after: Some("2026-11-27T10:00:00+01:00".into()),
            limit: Some(5),
            ..RunSearchQuery::default()
        }
        .to_filter()
        .unwrap();
        assert_eq!(filter.states, [RunState::Failed, RunState::Dead]);
        assert_eq!(filter.apps, Some(vec!["shop".to_string()]));
        assert_eq!(filter.mode, Some(DeliveryMode::Broadcast));
        assert_eq!(
            filter.fired_after,
            Some("2026-11-27T09:00:00Z".parse().unwrap())
        );
        assert_eq!(filter.limit, 5);
        assert_eq!(RunSearchQuery::default().to_filter().unwrap().limit, 100);

        let bad = |f: fn(&mut RunSearchQuery)| {
            let mut q = RunSearchQuery::default();
            f(&mut q);
            field(q)
        };
        assert_eq!(bad(|q| q.state = Some("done".into())), "state");
        assert_eq!(bad(|q| q.state = Some(String::new())), "state");
        assert_eq!(bad(|q| q.app = Some("a b".into())), "app");
        assert_eq!(bad(|q| q.job = Some("nope".into())), "job");
        assert_eq!(bad(|q| q.group = Some("".into())), "group");
        assert_eq!(bad(|q| q.mode = Some("fanout".into())), "mode");
        assert_eq!(
            bad(|q| q.fired_after = Some("yesterday".into())),
            "fired_after"
        );
        assert_eq!(
            bad(|q| q.finished_before = Some("1".into())),
            "finished_before"
        );
        assert_eq!(bad(|q| q.limit = Some(0)), "limit");
        assert_eq!(bad(|q| q.cursor = Some("x".into())), "cursor");
        assert_eq!(
            bad(|q| {
                q.fired_after = Some("2026-11-27T10:00:00Z".into());
                q.fired_before = Some("2026-11-27T09:00:00Z".into());
            }),
            "fired_before"
        );
    }
}
