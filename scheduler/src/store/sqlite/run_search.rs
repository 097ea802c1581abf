//! Runs searched across jobs on SQLite (`GET /v1/runs`): one query built from the filters
//! given, so each filter that has an index (`runs_by_app`, `runs_by_group`,
//! `runs_by_state`, `runs_by_job`, `runs_recent`, `runs_by_finish`; migration 0013) is a
//! plain condition the planner can search through it in page order. Absent filters add
//! no SQL (SQLite plans `?n IS NULL OR …` without the index).

use sqlx::{QueryBuilder, Row, Sqlite, SqlitePool};

use super::rows::{ms, run_from_row};
use crate::domain::{Run, RunFilter};
use crate::store::StoreError;

pub(super) async fn search_runs(
    readers: &SqlitePool,
    filter: &RunFilter,
) -> Result<Vec<Run>, StoreError> {
    if filter.matches_nothing() {
        return Ok(Vec::new());
    }
    query("", filter)
        .build()
        .fetch_all(readers)
        .await?
        .iter()
        .map(run_from_row)
        .collect()
}

/// The plan of the search for `filter`, one line per step, as `EXPLAIN QUERY PLAN`
/// prints it.
pub(super) async fn explain_search_runs(
    readers: &SqlitePool,
    filter: &RunFilter,
) -> Result<Vec<String>, StoreError> {
    let rows = query("EXPLAIN QUERY PLAN ", filter)
        .build()
        .fetch_all(readers)
        .await?;
    rows.iter()
        .map(|row| Ok(row.try_get::<String, _>("detail")?))
        .collect()
}

/// `prefix` (empty, or `EXPLAIN …`) and a query of runs matching `filter`, newest first,
/// one page: one indexed range per part of [`RunFilter::branches`], merged.
fn query(prefix: &str, filter: &RunFilter) -> QueryBuilder<Sqlite> {
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
fn page(q: &mut QueryBuilder<Sqlite>, filter: &RunFilter) {
    q.push(concat!("SELECT ", run_columns!(), " FROM runs WHERE 1"));
    in_list(
        q,
        "state",
        filter.states.iter().map(|s| s.as_str().to_string()),
    );
    if let Some(apps) = &filter.apps {
        in_list(q, "app", apps.iter().cloned());
    }
    if let Some(job) = filter.job {
        q.push(" AND job_id = ").push_bind(job.to_string());
    }
    if let Some(group) = &filter.group {
        q.push(" AND target_group = ").push_bind(group.clone());
    }
    if let Some(mode) = filter.mode {
        q.push(" AND mode = ").push_bind(mode.as_str());
    }
    if let Some(at) = filter.fired_after {
        q.push(" AND fire_time >= ").push_bind(ms(at));
    }
    if let Some(at) = filter.fired_before {
        q.push(" AND fire_time < ").push_bind(ms(at));
    }
    if let Some(at) = filter.finished_after {
        q.push(" AND finished_at >= ").push_bind(ms(at));
    }
    if let Some(at) = filter.finished_before {
        q.push(" AND finished_at < ").push_bind(ms(at));
    }
    if let Some((at, id)) = filter.before {
        q.push(" AND (fire_time, id) < (")
            .push_bind(ms(at))
            .push(", ")
            .push_bind(id.to_string())
            .push(")");
    }
    q.push(" ORDER BY fire_time DESC, id DESC LIMIT ")
        .push_bind(i64::from(filter.limit));
}

/// ` AND column = ?` for one value, ` AND column IN (?, …)` for several, nothing for none.
fn in_list(q: &mut QueryBuilder<Sqlite>, column: &str, values: impl Iterator<Item = String>) {
    let values: Vec<String> = values.collect();
    match values.as_slice() {
        [] => {}
        [one] => {
            q.push(format_args!(" AND {column} = "))
                .push_bind(one.clone());
        }
        many => {
            q.push(format_args!(" AND {column} IN ("));
            let mut list = q.separated(", ");
            for value in many {
                list.push_bind(value.clone());
            }
            q.push(")");
        }
    }
}
