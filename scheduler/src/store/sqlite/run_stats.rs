//! Run statistics on SQLite (`GET /v1/stats/runs`): the runs fired in a window, counted
//! by minute of fire time, state, retry and lateness bucket (see
//! [`crate::domain::run_stats`]). Times are ms since the epoch, so a minute is
//! `fire_time / 60000` and lateness `dispatched_at - fire_time`. The fire-time range is
//! searched through `runs_recent` (every app) or `runs_by_app` (a scoped caller's
//! apps), both migration 0013.

use chrono::{DateTime, Utc};
use sqlx::{QueryBuilder, Row, Sqlite, SqlitePool};

use super::rows::ms;
use crate::domain::{RunState, run_stats::RunCount};
use crate::store::{StoreError, corrupt, sql::lateness_bucket_case};

pub(super) async fn run_stats(
    readers: &SqlitePool,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
    apps: Option<&[String]>,
) -> Result<Vec<RunCount>, StoreError> {
    if apps.is_some_and(|apps| apps.is_empty()) {
        return Ok(Vec::new());
    }
    let rows = query("", from, until, apps)
        .build()
        .fetch_all(readers)
        .await?;
    rows.iter()
        .map(|row| {
            let state: String = row.try_get("state")?;
            let lateness: Option<i64> = row.try_get("lateness")?;
            Ok(RunCount {
                minute: row.try_get("minute")?,
                state: RunState::parse(&state)
                    .ok_or_else(|| corrupt("run statistics", format!("state {state:?}")))?,
                retried: row.try_get::<i64, _>("retried")? != 0,
                lateness: lateness.map(|bucket| bucket as usize),
                runs: row.try_get::<i64, _>("runs")? as u64,
            })
        })
        .collect()
}

/// The plan of the count, one line per step, as `EXPLAIN QUERY PLAN` prints it.
pub(super) async fn explain_run_stats(
    readers: &SqlitePool,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
    apps: Option<&[String]>,
) -> Result<Vec<String>, StoreError> {
    let rows = query("EXPLAIN QUERY PLAN ", from, until, apps)
        .build()
        .fetch_all(readers)
        .await?;
    rows.iter()
        .map(|row| Ok(row.try_get::<String, _>("detail")?))
        .collect()
}

/// `prefix` (empty, or `EXPLAIN …`) and the count of runs fired in `[from, until]`.
fn query(
    prefix: &str,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
    apps: Option<&[String]>,
) -> QueryBuilder<Sqlite> {
    let mut q = QueryBuilder::new(prefix);
    q.push(format_args!(
        "SELECT fire_time / 60000 AS minute, state, attempt > 1 AS retried, ({}) AS lateness, \
         count(*) AS runs FROM runs WHERE fire_time >= ",
        lateness_bucket_case("(dispatched_at - fire_time)")
    ));
    q.push_bind(ms(from))
        .push(" AND fire_time <= ")
        .push_bind(ms(until));
    if let Some(apps) = apps {
        q.push(" AND app IN (");
        let mut list = q.separated(", ");
        for app in apps {
            list.push_bind(app.clone());
        }
        q.push(")");
    }
    q.push(" GROUP BY 1, 2, 3, 4");
    q
}
