//! The job list on PostgreSQL (`GET /v1/jobs`): one query built from the filters given,
//! read in the order asked through an index on that order (`jobs_pkey`, the `(app, name)`
//! key, `jobs_by_updated`, and their `jobs_by_app_*` forms for one app; migration
//! 0019), from the cursor's position on (keyset paging, no OFFSET), so a page costs about
//! a page of index entries; a few apps (a scoped token's) are read one app each and
//! merged ([`JobFilter::branches`]). Absent filters add no SQL. No order reads
//! `next_fire_at` (no index names it: see [`crate::domain::job_filter::SORTS`]).

use serde_json::Value;
use sqlx::{PgPool, Postgres, QueryBuilder, types::Json};

use super::rows::job_from_row;
use crate::domain::{Job, JobFilter, JobPosition, JobSort};
use crate::store::StoreError;

pub(super) async fn search_jobs(pool: &PgPool, filter: &JobFilter) -> Result<Vec<Job>, StoreError> {
    if filter.matches_nothing() {
        return Ok(Vec::new());
    }
    let rows = query("", filter).build().fetch_all(pool).await?;
    rows.iter().map(job_from_row).collect()
}

/// `EXPLAIN (ANALYZE, FORMAT JSON)` of the query of the list for `filter`.
pub(super) async fn explain_search_jobs(
    pool: &PgPool,
    filter: &JobFilter,
) -> Result<Value, StoreError> {
    let plan: Json<Value> = query("EXPLAIN (ANALYZE, FORMAT JSON) ", filter)
        .build_query_scalar()
        .fetch_one(pool)
        .await?;
    Ok(plan.0)
}

/// `prefix` and the query of a page of `filter`: one indexed range per part of
/// [`JobFilter::branches`], merged.
fn query(prefix: &str, filter: &JobFilter) -> QueryBuilder<Postgres> {
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
fn page(q: &mut QueryBuilder<Postgres>, filter: &JobFilter) {
    q.push(concat!(
        "SELECT ",
        job_read_columns!(),
        " FROM jobs WHERE true"
    ));
    match filter.apps.as_deref() {
        None => {}
        Some([app]) => {
            q.push(" AND app = ").push_bind(app.clone());
        }
        Some(apps) => {
            q.push(" AND app = ANY(").push_bind(apps.to_vec()).push(")");
        }
    }
    if let Some(group) = &filter.group {
        q.push(" AND settings->'target'->>'group' = ")
            .push_bind(group.clone());
    }
    if let Some(mode) = filter.mode {
        q.push(" AND settings->'target'->>'mode' = ")
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
        q.push(" AND strpos(lower(app || '/' || name), ")
            .push_bind(search.clone())
            .push(") > 0");
    }
    let before = if filter.sort.descending() { "<" } else { ">" };
    match &filter.after {
        None => {}
        Some(JobPosition::Id(id)) => {
            q.push(" AND id > ").push_bind(*id);
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
                .push_bind(*at)
                .push(", ")
                .push_bind(*id)
                .push(")");
        }
    }
    q.push(format_args!(" ORDER BY {} LIMIT ", order(filter.sort)))
        .push_bind(i64::from(filter.limit));
}
