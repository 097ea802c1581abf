//! Runs searched across jobs on PostgreSQL (`GET /v1/runs`): one query built from the
//! filters given, so each filter that has an index (`runs_by_app`, `runs_by_group`,
//! `runs_by_state`, `runs_by_job`, `runs_recent`, `runs_by_finish`; migration 0014) is a
//! plain condition the planner can read through it in page order. Absent filters add no
//! SQL (a `$n IS NULL OR …` condition would hide the index from a generic plan).

use serde_json::Value;
use sqlx::{PgPool, Postgres, QueryBuilder, types::Json};

use super::rows::run_from_row;
use crate::domain::{Run, RunFilter};
use crate::store::StoreError;

pub(super) async fn search_runs(pool: &PgPool, filter: &RunFilter) -> Result<Vec<Run>, StoreError> {
    if filter.matches_nothing() {
        return Ok(Vec::new());
    }
    query("", filter)
        .build()
        .fetch_all(pool)
        .await?
        .iter()
        .map(run_from_row)
        .collect()
}

/// `EXPLAIN (ANALYZE, FORMAT JSON)` of the search for `filter`.
pub(super) async fn explain_search_runs(
    pool: &PgPool,
    filter: &RunFilter,
) -> Result<Value, StoreError> {
    let plan: Json<Value> = query("EXPLAIN (ANALYZE, FORMAT JSON) ", filter)
        .build_query_scalar()
        .fetch_one(pool)
        .await?;
    Ok(plan.0)
}

/// `prefix` (empty, or `EXPLAIN …`) and a query of runs matching `filter`, newest first,
/// one page: one indexed range per part of [`RunFilter::branches`], merged.
fn query(prefix: &str, filter: &RunFilter) -> QueryBuilder<Postgres> {
    let mut q = QueryBuilder::new(prefix);
    match filter.branches().as_slice() {
        [one] => page(&mut q, one),
        parts => {
            q.push("SELECT * FROM (");
            for (i, part) in parts.iter().enumerate() {
                if i > 0 {
                    q.push(" UNION ALL SELECT * FROM (");
                }
                page(&mut q, part);
                q.push(format_args!(") AS part{i}"));
            }
            q.push(" ORDER BY fire_time DESC, id DESC LIMIT ")
                .push_bind(i64::from(filter.limit));
        }
    }
    q
}

/// One page of runs matching `filter` (its lists as they are), newest first.
fn page(q: &mut QueryBuilder<Postgres>, filter: &RunFilter) {
    q.push(concat!("SELECT ", run_columns!(), " FROM runs WHERE true"));
    match filter.states.as_slice() {
        [] => {}
        [state] => {
            q.push(" AND state = ").push_bind(state.as_str());
        }
        states => {
            let names: Vec<String> = states.iter().map(|s| s.as_str().to_string()).collect();
            q.push(" AND state = ANY(").push_bind(names).push(")");
        }
    }
    match filter.apps.as_deref() {
        None => {}
        Some([app]) => {
            q.push(" AND app = ").push_bind(app.clone());
        }
        Some(apps) => {
            q.push(" AND app = ANY(").push_bind(apps.to_vec()).push(")");
        }
    }
    if let Some(job) = filter.job {
        q.push(" AND job_id = ").push_bind(job);
    }
    if let Some(group) = &filter.group {
        q.push(" AND target_group = ").push_bind(group.clone());
    }
    if let Some(mode) = filter.mode {
        q.push(" AND mode = ").push_bind(mode.as_str());
    }
    if let Some(at) = filter.fired_after {
        q.push(" AND fire_time >= ").push_bind(at);
    }
    if let Some(at) = filter.fired_before {
        q.push(" AND fire_time < ").push_bind(at);
    }
    if let Some(at) = filter.finished_after {
        q.push(" AND finished_at >= ").push_bind(at);
    }
    if let Some(at) = filter.finished_before {
        q.push(" AND finished_at < ").push_bind(at);
    }
    if let Some((at, id)) = filter.before {
        q.push(" AND (fire_time, id) < (")
            .push_bind(at)
            .push(", ")
            .push_bind(id)
            .push(")");
    }
    q.push(" ORDER BY fire_time DESC, id DESC LIMIT ")
        .push_bind(i64::from(filter.limit));
}
