//! Run statistics on PostgreSQL (`GET /v1/stats/runs`): the runs fired in a window,
//! counted by minute of fire time, state, retry and lateness bucket (see
//! [`crate::domain::run_stats`]). The fire-time range is read through `runs_recent`
//! (every app) or `runs_by_app` (a scoped caller's apps), both migration 0014: the cost
//! follows the runs fired in the window, however many the table holds.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgPool, Postgres, QueryBuilder, Row, types::Json};

use crate::domain::{RunState, run_stats::RunCount};
use crate::store::{StoreError, corrupt, sql::lateness_bucket_case};

pub(super) async fn run_stats(
    pool: &PgPool,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
    apps: Option<&[String]>,
) -> Result<Vec<RunCount>, StoreError> {
    if apps.is_some_and(|apps| apps.is_empty()) {
        return Ok(Vec::new());
    }
    let rows = query("", from, until, apps).build().fetch_all(pool).await?;
    rows.iter()
        .map(|row| {
            let state: String = row.try_get("state")?;
            let lateness: Option<i32> = row.try_get("lateness")?;
            Ok(RunCount {
                minute: row.try_get("minute")?,
                state: RunState::parse(&state)
                    .ok_or_else(|| corrupt("run statistics", format!("state {state:?}")))?,
                retried: row.try_get("retried")?,
                lateness: lateness.map(|bucket| bucket as usize),
                runs: row.try_get::<i64, _>("runs")? as u64,
            })
        })
        .collect()
}

/// `EXPLAIN (ANALYZE, FORMAT JSON)` of the count, for tests that it reads a range of
/// fire times through an index.
pub(super) async fn explain_run_stats(
    pool: &PgPool,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
    apps: Option<&[String]>,
) -> Result<Value, StoreError> {
    let plan: Json<Value> = query("EXPLAIN (ANALYZE, FORMAT JSON) ", from, until, apps)
        .build_query_scalar()
        .fetch_one(pool)
        .await?;
    Ok(plan.0)
}

/// `prefix` (empty, or `EXPLAIN …`) and the count of runs fired in `[from, until]`.
fn query(
    prefix: &str,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
    apps: Option<&[String]>,
) -> QueryBuilder<Postgres> {
    let lateness = "(extract(epoch FROM dispatched_at - fire_time) * 1000)";
    let mut q = QueryBuilder::new(prefix);
    q.push(format_args!(
        "SELECT floor(extract(epoch FROM fire_time) / 60)::bigint AS minute, state, \
         attempt > 1 AS retried, ({}) AS lateness, count(*) AS runs \
         FROM runs WHERE fire_time >= ",
        lateness_bucket_case(lateness)
    ));
    q.push_bind(from)
        .push(" AND fire_time <= ")
        .push_bind(until);
    if let Some(apps) = apps {
        q.push(" AND app = ANY(").push_bind(apps.to_vec()).push(")");
    }
    q.push(" GROUP BY 1, 2, 3, 4");
    q
}
