//! A page of the job list (`GET /v1/jobs`) costs about a page, not the table: with
//! 100 000 jobs in 50 apps and 20 groups (1 % broadcast, 1 % paused, 2 % finished; apps,
//! groups and the rest independent of each other), every order (creation, name, last
//! change; both ways) with no filter and with each single filter (app, group,
//! mode, paused, running, a search text), first page and a page from the middle, reads
//! through an index: PostgreSQL's executed plans have no sequential scan and examine at
//! most 25 pages of rows (a group's or a mode's jobs are read through their index and
//! sorted: 5 % and 1 % of the table here), SQLite's plans scan or search an index, never
//! the table itself. The indexes are migrations `0019_job_search.sql` (PostgreSQL) and
//! `0018_job_search.sql` (SQLite). And on PostgreSQL no index of `jobs` names
//! `next_fire_at`, so a fire stays an in-place (HOT) update (migration 0007).

use chime_scheduler::{
    domain::{DeliveryMode, Job, JobFilter, JobPosition, JobSettings, JobSort, JobSpec},
    store::{Backend, open_backend},
};
use chime_testkit::TestDatabase;
use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use sqlx::Connection;

const JOBS: i64 = 100_000;
const PAGE: u32 = 100;

/// The settings every seeded job starts from (its group and mode are set per job).
fn settings_template() -> String {
    let settings: JobSettings = serde_json::from_value(json!({
        "schedule": {"every": "1h"},
        "target": {"group": "g0", "mode": "group"},
        "payload": null,
        "ack_timeout": "30s",
        "max_attempts": 5,
        "misfire": "fire_once",
        "catch_up_limit": 10,
        "overlap": "allow",
    }))
    .unwrap();
    let job = Job::new(
        JobSpec {
            app: "app0".into(),
            name: "template".into(),
            paused: false,
            settings,
        },
        Utc::now(),
    );
    serde_json::to_string(&job.spec.settings).unwrap()
}

fn sorts() -> Vec<JobSort> {
    let mut sorts = vec![JobSort::Created];
    for descending in [false, true] {
        sorts.extend([
            JobSort::Name { descending },
            JobSort::Updated { descending },
        ]);
    }
    sorts
}

/// Each order with no filter and with each single filter, a page from the start and a
/// page from a position in the middle: (name, filter).
fn cases(now: DateTime<Utc>) -> Vec<(String, JobFilter)> {
    let filters: Vec<(&str, JobFilter)> = vec![
        ("no filter", JobFilter::default()),
        (
            "app",
            JobFilter {
                apps: Some(vec!["app7".into()]),
                ..JobFilter::default()
            },
        ),
        (
            "apps (a scoped token)",
            JobFilter {
                apps: Some(vec!["app7".into(), "app8".into(), "app9".into()]),
                ..JobFilter::default()
            },
        ),
        (
            "group",
            JobFilter {
                group: Some("g3".into()),
                ..JobFilter::default()
            },
        ),
        (
            "mode",
            JobFilter {
                mode: Some(DeliveryMode::Broadcast),
                ..JobFilter::default()
            },
        ),
        (
            "paused",
            JobFilter {
                paused: Some(true),
                ..JobFilter::default()
            },
        ),
        (
            "running",
            JobFilter {
                paused: Some(false),
                ..JobFilter::default()
            },
        ),
        (
            "q",
            JobFilter {
                search: Some("b1".into()),
                ..JobFilter::default()
            },
        ),
    ];
    let middle = uuid::Uuid::from_u128(u128::MAX / 2);
    let mut cases = Vec::new();
    for sort in sorts() {
        for (name, filter) in &filters {
            let first = JobFilter {
                sort,
                limit: PAGE,
                ..filter.clone()
            };
            let after = match sort {
                JobSort::Created => JobPosition::Id(middle),
                JobSort::Name { .. } => JobPosition::Name {
                    app: "app7".into(),
                    name: "job5".into(),
                    id: middle,
                },
                JobSort::Updated { .. } => {
                    JobPosition::Updated(now - Duration::seconds(JOBS / 2), middle)
                }
            };
            let next = JobFilter {
                after: Some(after),
                ..first.clone()
            };
            let label = sort.as_str().unwrap_or("created");
            cases.push((format!("{label}, {name}"), first));
            cases.push((format!("{label}, {name}, next page"), next));
        }
    }
    cases
}

/// Sums, over every node of an executed plan that reads table `jobs`, the rows it
/// produced and the rows its filter threw away.
fn rows_examined(node: &Value) -> f64 {
    let mut total = 0.0;
    if node["Relation Name"] == "jobs" {
        let loops = node["Actual Loops"].as_f64().unwrap_or(1.0);
        total += (node["Actual Rows"].as_f64().unwrap_or(0.0)
            + node["Rows Removed by Filter"].as_f64().unwrap_or(0.0)
            + node["Rows Removed by Index Recheck"]
                .as_f64()
                .unwrap_or(0.0))
            * loops;
    }
    for child in node["Plans"].as_array().into_iter().flatten() {
        total += rows_examined(child);
    }
    total
}

#[tokio::test]
async fn postgres_job_list_reads_each_order_and_filter_through_an_index() {
    let db = TestDatabase::postgres().await;
    let Backend::Postgres(store) = open_backend(db.url(), 256).await.unwrap() else {
        panic!("a PostgreSQL url opens PostgreSQL")
    };
    let store_dyn = Backend::Postgres(store.clone()).store();
    let now = Utc::now();
    let mut conn = sqlx::PgConnection::connect(db.url()).await.unwrap();
    sqlx::query(
        "INSERT INTO jobs (id, app, name, settings, paused, version, next_fire_at, created_at,
                           updated_at, shard, due_bound)
         SELECT gen_random_uuid(), 'app' || (g % 50), 'job' || g,
                jsonb_set(jsonb_set($1::jsonb, '{target,group}', to_jsonb('g' || (g / 50 % 20))),
                          '{target,mode}',
                          to_jsonb(CASE WHEN g * 7 % 97 = 3 THEN 'broadcast' ELSE 'group' END)),
                g * 13 % 101 = 5, 1,
                CASE WHEN g * 17 % 53 = 1 THEN NULL ELSE $3 + ((g * 7919) % $2) * interval '1 second' END,
                $3, $3 - ((g * 104729) % $2) * interval '1 second', g % 256,
                CASE WHEN g * 17 % 53 = 1 THEN NULL ELSE $3 + ((g * 7919) % $2) * interval '1 second' END
         FROM generate_series(1, $2) AS g",
    )
    .bind(settings_template())
    .bind(JOBS)
    .bind(now)
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query("ANALYZE jobs")
        .execute(&mut conn)
        .await
        .unwrap();

    for (name, filter) in cases(now) {
        let found = store_dyn.search_jobs(&filter).await.unwrap();
        assert!(!found.is_empty(), "{name}: the case selects jobs");
        let plan = store.explain_search_jobs(&filter).await.unwrap();
        let text = plan.to_string();
        let examined = rows_examined(&plan[0]["Plan"]);
        println!("{name}: {examined} rows of jobs examined");
        assert!(
            !text.contains("Seq Scan"),
            "{name}: no sequential scan:\n{plan:#}"
        );
        // A page (no filter, an app, paused or running), or the jobs a group or a mode
        // selects (5 %, 1 % here) read through their index and sorted, or a page of
        // search matches (1 job in 9 here) read in order: far from the table. Several
        // apps are one such read per app (the planner may read a small app's 2 000 jobs
        // whole and sort them rather than walk its index).
        let bound = f64::from(PAGE) * 25.0 * filter.branches().len() as f64;
        assert!(
            examined <= bound,
            "{name}: examined {examined} rows of {JOBS} for a page of {PAGE}:\n{plan:#}"
        );
    }
}

/// A fire changes `next_fire_at` (and rarely `due_bound`) and nothing else indexed, so
/// PostgreSQL updates the job in place (a HOT update, migration 0007): no index of
/// `jobs` may name `next_fire_at`, in its key, an expression or its predicate. The job
/// list has no next-fire order for this reason.
#[tokio::test]
async fn postgres_no_index_of_jobs_names_next_fire_at() {
    let db = TestDatabase::postgres().await;
    let Backend::Postgres(_store) = open_backend(db.url(), 256).await.unwrap() else {
        panic!("a PostgreSQL url opens PostgreSQL")
    };
    let mut conn = sqlx::PgConnection::connect(db.url()).await.unwrap();
    let indexes: Vec<(String, String)> = sqlx::query_as(
        "SELECT indexname, indexdef FROM pg_indexes
         WHERE schemaname = current_schema() AND tablename = 'jobs'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let names: Vec<&str> = indexes.iter().map(|(name, _)| name.as_str()).collect();
    for expected in ["jobs_pkey", "jobs_due", "jobs_by_updated", "jobs_by_app"] {
        assert!(names.contains(&expected), "{expected} among {names:?}");
    }
    for (name, definition) in &indexes {
        assert!(
            !definition.contains("next_fire_at"),
            "index {name} names next_fire_at ({definition}): fires must stay HOT updates, \
             see migration 0007"
        );
    }
}

#[tokio::test]
async fn sqlite_job_list_uses_an_index_for_each_order_and_filter() {
    let db = TestDatabase::sqlite();
    let Backend::Sqlite(store) = open_backend(db.url(), 256).await.unwrap() else {
        panic!("a SQLite url opens SQLite")
    };
    let store_dyn = Backend::Sqlite(store.clone()).store();
    let now = Utc::now();
    let now_ms = now.timestamp_millis();
    let mut conn = sqlx::SqliteConnection::connect(db.url()).await.unwrap();
    sqlx::query(
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?2)
         INSERT INTO jobs (id, app, name, settings, paused, version, next_fire_at, created_at,
                           updated_at, shard)
         SELECT lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-7' ||
                substr(lower(hex(randomblob(2))), 2) || '-8' ||
                substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6))),
                'app' || (n % 50), 'job' || n,
                json_set(?1, '$.target.group', 'g' || (n / 50 % 20),
                         '$.target.mode', CASE WHEN n * 7 % 97 = 3 THEN 'broadcast' ELSE 'group' END),
                n * 13 % 101 = 5, 1,
                CASE WHEN n * 17 % 53 = 1 THEN NULL ELSE ?3 + ((n * 7919) % ?2) * 1000 END,
                ?3, ?3 - ((n * 104729) % ?2) * 1000, n % 256
         FROM g",
    )
    .bind(settings_template())
    .bind(JOBS)
    .bind(now_ms)
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query("ANALYZE").execute(&mut conn).await.unwrap();

    for (name, filter) in cases(now) {
        let found = store_dyn.search_jobs(&filter).await.unwrap();
        assert!(!found.is_empty(), "{name}: the case selects jobs");
        let plan = store.explain_search_jobs(&filter).await.unwrap();
        println!("{name}: {plan:?}");
        assert!(
            plan.iter().any(|step| step.contains("USING")
                && (step.contains("INDEX") || step.contains("PRIMARY KEY"))),
            "{name}: reads through an index: {plan:?}"
        );
        assert!(
            !plan.iter().any(|step| step == "SCAN jobs"),
            "{name}: no scan of the table itself: {plan:?}"
        );
    }
}
