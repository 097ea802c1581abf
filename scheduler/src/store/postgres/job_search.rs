//! The job list on PostgreSQL (`GET /v1/jobs`): one query built from the filters given,
//! read in the order asked through an index on that order (`jobs_pkey`, the `(app, name)`
//! key, `jobs_by_next_fire`, `jobs_by_updated`, and their `jobs_by_app_*` forms for one
//! app; migration 0019), from the cursor's position on (keyset paging, no OFFSET), so a
//! page costs about a page of index entries; a few apps (a scoped token's) are read one
//! app each and merged ([`JobFilter::branches`]). Absent filters add no SQL. Jobs with no
//! next fire come last in both next-fire orders: a second query reads them (by id) when
//! the jobs with one do not fill the page.

use serde_json::Value;
use sqlx::{PgPool, Postgres, QueryBuilder, types::Json};

use super::rows::job_from_row;
use crate::domain::{Job, JobFilter, JobPosition, JobSort};
use crate::store::StoreError;

/// Which jobs of a next-fire order one query reads.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Part {
    /// The whole order (every sort but next fire).
    All,
    /// Jobs with a next fire time.
    Firing,
    /// Jobs without one, by id.
    Finished,
}

pub(super) async fn search_jobs(pool: &PgPool, filter: &JobFilter) -> Result<Vec<Job>, StoreError> {
    if filter.matches_nothing() {
        return Ok(Vec::new());
    }
    let mut jobs = Vec::new();
    for part in parts(filter) {
        let left = filter.limit as usize - jobs.len();
        if left == 0 {
            break;
        }
        let rows = query("", filter, part, left)
            .build()
            .fetch_all(pool)
            .await?;
        for row in &rows {
            jobs.push(job_from_row(row)?);
        }
    }
    Ok(jobs)
}

/// `EXPLAIN (ANALYZE, FORMAT JSON)` of each query the list for `filter` may run.
pub(super) async fn explain_search_jobs(
    pool: &PgPool,
    filter: &JobFilter,
) -> Result<Vec<Value>, StoreError> {
    let mut plans = Vec::new();
    for part in parts(filter) {
        let plan: Json<Value> = query(
            "EXPLAIN (ANALYZE, FORMAT JSON) ",
            filter,
            part,
            filter.limit as usize,
        )
        .build_query_scalar()
        .fetch_one(pool)
        .await?;
        plans.push(plan.0);
    }
    Ok(plans)
}

/// The queries a page of `filter` reads, in order.
fn parts(filter: &JobFilter) -> Vec<Part> {
    match (filter.sort, &filter.after) {
        (JobSort::NextFire { .. }, Some(JobPosition::NextFire(None, _))) => vec![Part::Finished],
        (JobSort::NextFire { .. }, _) => vec![Part::Firing, Part::Finished],
        _ => vec![Part::All],
    }
}

/// `prefix` and one query of `part` of the jobs of `filter`, at most `limit`: one
/// indexed range per part of [`JobFilter::branches`], merged.
fn query(prefix: &str, filter: &JobFilter, part: Part, limit: usize) -> QueryBuilder<Postgres> {
    let mut q = QueryBuilder::new(prefix);
    match filter.branches().as_slice() {
        [one] => page(&mut q, one, part, limit),
        parts => {
            q.push("SELECT * FROM (");
            for (i, branch) in parts.iter().enumerate() {
                if i > 0 {
                    q.push(" UNION ALL SELECT * FROM (");
                }
                page(&mut q, branch, part, limit);
                q.push(format_args!(") AS part{i}"));
            }
            q.push(format_args!(
                " ORDER BY {} LIMIT ",
                order(filter.sort, part)
            ))
            .push_bind(limit as i64);
        }
    }
    q
}

/// The `ORDER BY` of `part` of a list in `sort`.
fn order(sort: JobSort, part: Part) -> String {
    let dir = if sort.descending() { "DESC" } else { "ASC" };
    match (sort, part) {
        (JobSort::Created, _) => "id".to_string(),
        (JobSort::Name { .. }, _) => format!("app {dir}, name {dir}"),
        (_, Part::Finished) => format!("id {dir}"),
        (JobSort::NextFire { .. }, _) => format!("next_fire_at {dir}, id {dir}"),
        (JobSort::Updated { .. }, _) => format!("updated_at {dir}, id {dir}"),
    }
}

/// One page of `part` of the jobs of `filter` (its app list as it is), at most `limit`.
fn page(q: &mut QueryBuilder<Postgres>, filter: &JobFilter, part: Part, limit: usize) {
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
    match part {
        Part::Firing => {
            q.push(" AND next_fire_at IS NOT NULL");
        }
        Part::Finished => {
            q.push(" AND next_fire_at IS NULL");
        }
        Part::All => {}
    }
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
        Some(JobPosition::NextFire(Some(at), id)) if part == Part::Firing => {
            q.push(format_args!(" AND (next_fire_at, id) {before} ("))
                .push_bind(*at)
                .push(", ")
                .push_bind(*id)
                .push(")");
        }
        // Jobs that fire no more all come after a job that fires: read from their start.
        Some(JobPosition::NextFire(Some(_), _)) => {}
        Some(JobPosition::NextFire(None, id)) => {
            q.push(format_args!(" AND id {before} ")).push_bind(*id);
        }
        Some(JobPosition::Updated(at, id)) => {
            q.push(format_args!(" AND (updated_at, id) {before} ("))
                .push_bind(*at)
                .push(", ")
                .push_bind(*id)
                .push(")");
        }
    }
    q.push(format_args!(
        " ORDER BY {} LIMIT ",
        order(filter.sort, part)
    ))
    .push_bind(limit as i64);
}
