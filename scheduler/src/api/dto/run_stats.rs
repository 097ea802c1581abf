//! The query and answer of `GET /v1/stats/runs` (run statistics of a recent window,
//! cluster-wide): the query's parsing (each bad value refused naming its field) and the
//! answer's wire shape, built from [`crate::domain::run_stats::RunStats`].

use serde::{Deserialize, Serialize};

use super::RequestError;
use crate::domain::{
    job::validate_name,
    run_stats::{BucketStats, Percentiles, RunStats, StateCounts, StatsMinutes},
    timestamp::timestamp,
};

/// The query of `GET /v1/stats/runs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RunStatsQuery {
    /// The window in minutes, 5 to 1440; default 60.
    pub minutes: Option<String>,
    /// Count only this app's runs.
    pub app: Option<String>,
}

impl RunStatsQuery {
    /// The window and the app asked for, or the first bad parameter.
    pub fn parse(&self) -> Result<(StatsMinutes, Option<String>), RequestError> {
        let minutes = match self.minutes.as_deref() {
            None => StatsMinutes::DEFAULT,
            Some(text) => text
                .trim()
                .parse::<u32>()
                .ok()
                .and_then(StatsMinutes::new)
                .ok_or_else(|| {
                    RequestError::invalid(
                        "minutes",
                        format!(
                            "minutes must be a whole number from {} to {}, not {text:?}",
                            StatsMinutes::MIN,
                            StatsMinutes::MAX
                        ),
                    )
                })?,
        };
        if let Some(app) = &self.app {
            validate_name("app", app)?;
        }
        Ok((minutes, self.app.clone()))
    }
}

/// Lateness percentiles in ms: each the upper edge of the histogram bucket holding it;
/// null when no run was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LatenessResponse {
    /// Median.
    pub p50: Option<u32>,
    /// 95th percentile.
    pub p95: Option<u32>,
    /// 99th percentile.
    pub p99: Option<u32>,
}

impl From<Percentiles> for LatenessResponse {
    fn from(p: Percentiles) -> Self {
        Self {
            p50: p.p50,
            p95: p.p95,
            p99: p.p99,
        }
    }
}

/// One bucket: the runs whose fire time is in `[at, at + bucket_s)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunStatsBucket {
    /// The bucket's start.
    pub at: String,
    /// Runs fired in it.
    pub fired: u64,
    /// Of those, `succeeded` now.
    pub succeeded: u64,
    /// Of those, `failed` now (waiting for a retry).
    pub failed: u64,
    /// Of those, `dead` now.
    pub dead: u64,
    /// Of those, on an attempt above 1.
    pub retried: u64,
    /// Dispatch lateness of those on their first attempt that the broker confirmed.
    pub lateness_ms: LatenessResponse,
}

impl From<&BucketStats> for RunStatsBucket {
    fn from(b: &BucketStats) -> Self {
        Self {
            at: timestamp(b.at),
            fired: b.fired,
            succeeded: b.succeeded,
            failed: b.failed,
            dead: b.dead,
            retried: b.retried,
            lateness_ms: b.lateness.into(),
        }
    }
}

/// Runs fired in the window per current state, every state named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunStateCounts {
    /// `scheduled`.
    pub scheduled: u64,
    /// `dispatched`.
    pub dispatched: u64,
    /// `acked`.
    pub acked: u64,
    /// `succeeded`.
    pub succeeded: u64,
    /// `failed`.
    pub failed: u64,
    /// `dead`.
    pub dead: u64,
    /// `cancelled`.
    pub cancelled: u64,
}

impl From<StateCounts> for RunStateCounts {
    fn from(c: StateCounts) -> Self {
        Self {
            scheduled: c.scheduled,
            dispatched: c.dispatched,
            acked: c.acked,
            succeeded: c.succeeded,
            failed: c.failed,
            dead: c.dead,
            cancelled: c.cancelled,
        }
    }
}

/// The window as a whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunStatsTotals {
    /// Runs fired in the window.
    pub fired: u64,
    /// `fired` per second from `from` to the moment of the answer (3 decimals).
    pub fires_per_s: f64,
    /// Runs on an attempt above 1.
    pub retried: u64,
    /// Runs `dead` now.
    pub dead: u64,
    /// Runs per current state.
    pub by_state: RunStateCounts,
    /// Dispatch lateness over the whole window.
    pub lateness_ms: LatenessResponse,
}

/// The answer of `GET /v1/stats/runs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunStatsResponse {
    /// Start of the oldest bucket.
    pub from: String,
    /// End of the newest bucket (it holds the moment of the answer, still filling).
    pub to: String,
    /// Bucket size in seconds: 60 up to 120 minutes, 300 up to 600, 900 beyond.
    pub bucket_s: u32,
    /// Every bucket of the window, oldest first (zeros where nothing fired).
    pub buckets: Vec<RunStatsBucket>,
    /// The window as a whole.
    pub totals: RunStatsTotals,
}

impl From<&RunStats> for RunStatsResponse {
    fn from(s: &RunStats) -> Self {
        Self {
            from: timestamp(s.window.from),
            to: timestamp(s.window.to),
            bucket_s: s.window.bucket_s,
            buckets: s.buckets.iter().map(RunStatsBucket::from).collect(),
            totals: RunStatsTotals {
                fired: s.totals.fired,
                fires_per_s: s.totals.fires_per_s,
                retried: s.totals.retried,
                dead: s.totals.dead,
                by_state: s.totals.by_state.into(),
                lateness_ms: s.totals.lateness.into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(query: RunStatsQuery) -> String {
        match query.parse() {
            Err(RequestError::Invalid(e)) => e.field.clone(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn minutes_default_to_60_and_bad_values_are_named() {
        assert_eq!(
            RunStatsQuery::default().parse().unwrap(),
            (StatsMinutes::DEFAULT, None)
        );
        let asked = RunStatsQuery {
            minutes: Some("1440".into()),
            app: Some("shop".into()),
        };
        assert_eq!(
            asked.parse().unwrap(),
            (StatsMinutes::new(1440).unwrap(), Some("shop".into()))
        );
        for bad in ["4", "1441", "-5", "60.5", "", "sixty", "99999999999"] {
            let query = RunStatsQuery {
                minutes: Some(bad.into()),
                app: None,
            };
            assert_eq!(field(query), "minutes", "{bad:?}");
        }
        let bad_app = RunStatsQuery {
            minutes: None,
            app: Some("a b".into()),
        };
        assert_eq!(field(bad_app), "app");
    }
}
