//! The job list on SQLite (`GET /v1/jobs`): one query built from the filters given,
//! read in the order asked through an index on that order (`jobs_pkey`, the `(app, name)`
//! key, `jobs_by_updated`, and their `jobs_by_app_*` forms for one app; migration
//! 0018), from the cursor's position on (keyset paging, no OFFSET), so a page costs about
//! a page of index entries; a few apps (a scoped token's) are read one app each and
//! merged ([`JobFilter::branches`]). Absent filters add no SQL. No order reads
//! `next_fire_at` (no index names it: see [`crate::domain::job_filter::SORTS`]).

use sqlx::{QueryBuilder, Row, Sqlite, SqlitePool};

use super::rows::{job_from_row, ms};
use crate::domain::{Job, JobFilter, JobPosition, JobSort};
use crate::store::StoreError;

pub(super) async fn search_jobs(
    readers: &SqlitePool,
    filter: &JobFilter,
) -> Result<Vec<Job>, StoreError> {
    if filter.matches_nothing() {
        return Ok(Vec::new());
    }
    let rows = query("", filter).build().fetch_all(readers).await?;
    rows.iter().map(job_from_row).collect()
}

/// The plan of the query of the list for `filter`, one line per step, as
/// `EXPLAIN QUERY PLAN` prints it.
pub(super) async fn explain_search_jobs(
    readers: &SqlitePool,
    filter: &JobFilter,
) -> Result<Vec<String>, StoreError> {
    let rows = query("EXPLAIN QUERY PLAN ", filter)
        .build()
        .fetch_all(readers)
        .await?;
    Ok(rows
        .iter()
        .map(|row| row.try_get::<String, _>("detail"))
        .collect::<Result<Vec<_>, _>>()?)
}

/// `prefix` and the query of a page of `filter`: one indexed range per part of
/// [`JobFilter::branches`], merged.
fn query(prefix: &str, filter: &JobFilter) -> QueryBuilder<Sqlite> {
    let mut q = QueryBuilder::new(prefix);
    match filter.branches().as_slice() {
        [one] => page(&mut q, one),
        parts => {
            q.push("SELECT * FROM (");
            for (i, branch) in parts.iter().enumerate() {
                if i > 0 {
                    q.push(" UNION ALL SELECT * FROM (");
                }
                page(&mut q, branch);
                q.push(format_args!(") AS part{i}"));
            }
            q.push(format_args!(" ORDER BY {} LIMIT ", order(filter.sort)))
                .push_bind(i64::from(filter.limit));
        }
    }
    q
}

/// The `ORDER BY` of a list in `sort`.
fn order(sort: JobSort) -> String {
    let dir = if sort.descending() { "DESC" } else { "ASC" };
    match sort {
        JobSort::Created => "id".to_string(),
        JobSort::Name { .. } => format!("app {dir}, name {dir}"),
        JobSort::Updated { .. } => format!("updated_at {dir}, id {dir}"),
    }
}

/// One page of the jobs of `filter` (its app list as it is).
fn page(q: &mut QueryBuilder<Sqlite>, filter: &JobFilter) {
    q.push(concat!(
        "SELECT ",
        job_read_columns!(),
        " FROM jobs WHERE 1"
    ));
    match filter.apps.as_deref() {
        None => {}
        Some([app]) => {
            q.push(" AND app = ").push_bind(app.clone());
        }
        Some(apps) => {
            q.push(" AND app IN (");
            let mut list = q.separated(", ");
            for app in apps {
                list.push_bind(app.clone());
            }
            q.push(")");
        }
    }
    if let Some(group) = &filter.group {
        q.push(" AND json_extract(settings, '$.target.group') = ")
            .push_bind(group.clone());
    }
    if let Some(mode) = filter.mode {
        q.push(" AND json_extract(settings, '$.target.mode') = ")
            .push_bind(mode.as_str());
    }
    if let Some(paused) = filter.paused {
        // A literal, so the partial index of paused jobs can serve it.
        q.push(if paused {
            " AND paused"
        } else {
            " AND NOT paused"
        });
    }
    if let Some(search) = &filter.search {
        q.push(" AND instr(lower(app || '/' || name), ")
            .push_bind(search.clone())
            .push(") > 0");
    }
    let before = if filter.sort.descending() { "<" } else { ">" };
    match &filter.after {
        None => {}
        Some(JobPosition::Id(id)) => {
            q.push(" AND id > ").push_bind(id.to_string());
        }
        Some(JobPosition::Name { app, name, .. }) => {
            // (app, name) is unique: the id adds nothing to the position.
            q.push(format_args!(" AND (app, name) {before} ("))
                .push_bind(app.clone())
                .push(", ")
                .push_bind(name.clone())
                .push(")");
        }
        Some(JobPosition::Updated(at, id)) => {
            q.push(format_args!(" AND (updated_at, id) {before} ("))
                .push_bind(ms(*at))
                .push(", ")
                .push_bind(id.to_string())
                .push(")");
        }
    }
    q.push(format_args!(" ORDER BY {} LIMIT ", order(filter.sort)))
        .push_bind(i64::from(filter.limit));
}
