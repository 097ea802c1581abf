//! A search across jobs (`GET /v1/runs`) costs about a page, not the table: with 100 000
//! runs of 20 jobs in 5 apps and 4 groups (98 % succeeded, 1 % failed, 1 % dead),
//! PostgreSQL's executed plan of each main filter reads through its index without a
//! sequential scan and touches a few pages of rows, and SQLite's plan searches the same
//! indexes in page order (no sort of the table). The indexes are migrations
//! `0014_run_search.sql` (PostgreSQL) and `0013_run_search.sql` (SQLite).

use chime_scheduler::{
    domain::{DeliveryMode, Job, JobSettings, JobSpec, RunFilter, RunState},
    store::{Backend, PostgresStore, SqliteStore, Store, open_backend},
};
use chime_testkit::TestDatabase;
use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use sqlx::Connection;
use uuid::Uuid;

const RUNS: i64 = 100_000;
const JOBS: usize = 20;
const PAGE: u32 = 100;

/// Job `k`: app `app{k % 5}`, group `g{k % 4}`; job 0 broadcasts.
fn job(k: usize) -> Job {
    let settings: JobSettings = serde_json::from_value(json!({
        "schedule": {"every": "1h"},
        "target": {"group": format!("g{}", k % 4), "mode": if k == 0 { "broadcast" } else { "group" }},
        "payload": null,
        "ack_timeout": "30s",
        "max_attempts": 5,
        "misfire": "fire_once",
        "catch_up_limit": 10,
        "overlap": "allow",
    }))
    .unwrap();
    Job::new(
        JobSpec {
            app: format!("app{}", k % 5),
            name: format!("job{k}"),
            paused: false,
            settings,
        },
        Utc::now(),
    )
}

async fn insert_jobs(store: &dyn Store) -> Vec<Uuid> {
    let mut ids = Vec::new();
    for k in 0..JOBS {
        let job = job(k);
        store.insert_job(&job).await.unwrap();
        ids.push(job.id);
    }
    ids
}

/// The main filter combinations, each with what it should read through: (name, filter,
/// the index names any of which its plan may use).
fn cases(
    jobs: &[Uuid],
    now: DateTime<Utc>,
) -> Vec<(&'static str, RunFilter, &'static [&'static str])> {
    let page = |filter: RunFilter| RunFilter {
        limit: PAGE,
        ..filter
    };
    vec![
        ("newest", page(RunFilter::default()), &["runs_recent"]),
        (
            "app",
            page(RunFilter {
                apps: Some(vec!["app1".into()]),
                ..RunFilter::default()
            }),
            &["runs_by_app"],
        ),
        (
            "several apps (a scoped token)",
            page(RunFilter {
                apps: Some(vec!["app1".into(), "app2".into()]),
                ..RunFilter::default()
            }),
            &["runs_by_app"],
        ),
        (
            "job",
            page(RunFilter {
                job: Some(jobs[3]),
                ..RunFilter::default()
            }),
            &["runs_by_job"],
        ),
        (
            "group",
            page(RunFilter {
                group: Some("g2".into()),
                ..RunFilter::default()
            }),
            &["runs_by_group"],
        ),
        (
            "state",
            page(RunFilter {
                states: vec![RunState::Failed],
                ..RunFilter::default()
            }),
            &["runs_by_state"],
        ),
        (
            "several states",
            page(RunFilter {
                states: vec![RunState::Failed, RunState::Dead],
                ..RunFilter::default()
            }),
            &["runs_by_state"],
        ),
        (
            "app and state",
            page(RunFilter {
                apps: Some(vec!["app1".into()]),
                states: vec![RunState::Dead],
                ..RunFilter::default()
            }),
            &["runs_by_state", "runs_by_app"],
        ),
        (
            "mode",
            page(RunFilter {
                mode: Some(DeliveryMode::Broadcast),
                ..RunFilter::default()
            }),
            &["runs_recent"],
        ),
        (
            "fire-time range",
            page(RunFilter {
                fired_after: Some(now - Duration::seconds(50_000)),
                fired_before: Some(now - Duration::seconds(40_000)),
                ..RunFilter::default()
            }),
            &["runs_recent"],
        ),
        (
            "finish-time range",
            page(RunFilter {
                finished_after: Some(now - Duration::seconds(30_000)),
                finished_before: Some(now - Duration::seconds(29_800)),
                ..RunFilter::default()
            }),
            &["runs_by_finish"],
        ),
        (
            "next page",
            page(RunFilter {
                apps: Some(vec!["app1".into()]),
                before: Some((now - Duration::seconds(60_000), Uuid::max())),
                ..RunFilter::default()
            }),
            &["runs_by_app"],
        ),
    ]
}

/// Sums, over every node of an executed plan that reads table `runs`, the rows it
/// produced and the rows its filter threw away.
fn rows_examined(node: &Value) -> f64 {
    let mut total = 0.0;
    if node["Relation Name"] == "runs" {
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
async fn postgres_search_reads_each_filter_through_its_index() {
    let db = TestDatabase::postgres().await;
    let Backend::Postgres(store) = open_backend(db.url(), 256).await.unwrap() else {
        panic!("a PostgreSQL url opens PostgreSQL")
    };
    let store_dyn = Backend::Postgres(store.clone()).store();
    let jobs = insert_jobs(store_dyn.as_ref()).await;
    let now = Utc::now();
    let mut conn = sqlx::PgConnection::connect(db.url()).await.unwrap();
    // app and target_group are left to the insert trigger, as the fire path does.
    sqlx::query(
        "INSERT INTO runs (id, job_id, fire_time, shard, shard_total, attempt, state, trigger,
                           payload, created_at, finished_at, mode)
         SELECT gen_random_uuid(), ($1::uuid[])[(1 + g % $3)::int], $4 - g * interval '1 second',
                0, 1, 1,
                CASE g % 100 WHEN 0 THEN 'failed' WHEN 1 THEN 'dead' ELSE 'succeeded' END,
                'schedule', 'null', $4 - g * interval '1 second',
                $4 - g * interval '1 second' + interval '1 second',
                CASE WHEN g % $3 = 0 THEN 'broadcast' ELSE 'group' END
         FROM generate_series(1, $2) AS g",
    )
    .bind(&jobs)
    .bind(RUNS)
    .bind(JOBS as i64)
    .bind(now)
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query("ANALYZE runs")
        .execute(&mut conn)
        .await
        .unwrap();
    let filled: i64 =
        sqlx::query_scalar("SELECT count(*) FROM runs WHERE app IS NULL OR target_group IS NULL")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(filled, 0, "the trigger gives every run its app and group");

    for (name, filter, indexes) in cases(&jobs, now) {
        let found = store_dyn.search_runs(&filter).await.unwrap();
        assert!(!found.is_empty(), "{name}: the case selects runs");
        let plan = explain(&store, &filter).await;
        let text = plan.to_string();
        let examined = rows_examined(&plan[0]["Plan"]);
        println!("{name}: {examined} rows of runs examined");
        // PostgreSQL may read a common app's or group's page (1 run in 5 here) from the
        // newest runs of all, filtering: a few pages of rows, as the bound below checks.
        assert!(
            indexes
                .iter()
                .chain(&["runs_recent"])
                .any(|index| text.contains(index)),
            "{name}: reads through one of {indexes:?} or runs_recent:\n{plan:#}"
        );
        assert!(
            !text.contains("Seq Scan"),
            "{name}: no sequential scan:\n{plan:#}"
        );
        // A page per part, a few pages for a filter no index orders (mode: 1 run in 20
        // matches, read in fire order; a finish range: its 200 runs, then sorted).
        let bound = f64::from(PAGE) * 25.0;
        assert!(
            examined <= bound,
            "{name}: examined {examined} rows of {RUNS} for a page of {PAGE}:\n{plan:#}"
        );
    }
}

async fn explain(store: &PostgresStore, filter: &RunFilter) -> Value {
    store.explain_search_runs(filter).await.unwrap()
}

#[tokio::test]
async fn sqlite_search_uses_each_filters_index() {
    let db = TestDatabase::sqlite();
    let Backend::Sqlite(store) = open_backend(db.url(), 256).await.unwrap() else {
        panic!("a SQLite url opens SQLite")
    };
    let store_dyn = Backend::Sqlite(store.clone()).store();
    let jobs = insert_jobs(store_dyn.as_ref()).await;
    let now = Utc::now();
    let now_ms = now.timestamp_millis();
    let ids = serde_json::to_string(&jobs).unwrap();
    let mut conn = sqlx::SqliteConnection::connect(db.url()).await.unwrap();
    sqlx::query(
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?2)
         INSERT INTO runs (id, job_id, fire_time, shard, shard_total, attempt, state, trigger,
                           payload, created_at, finished_at, mode)
         SELECT lower(hex(randomblob(16))), json_extract(?1, '$[' || (n % ?3) || ']'),
                ?4 - n * 1000, 0, 1, 1,
                CASE n % 100 WHEN 0 THEN 'failed' WHEN 1 THEN 'dead' ELSE 'succeeded' END,
                'schedule', 'null', ?4 - n * 1000, ?4 - n * 1000 + 1000,
                CASE WHEN n % ?3 = 0 THEN 'broadcast' ELSE 'group' END
         FROM g",
    )
    .bind(&ids)
    .bind(RUNS)
    .bind(JOBS as i64)
    .bind(now_ms)
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query("ANALYZE").execute(&mut conn).await.unwrap();
    let unfilled: i64 =
        sqlx::query_scalar("SELECT count(*) FROM runs WHERE app IS NULL OR target_group IS NULL")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(unfilled, 0, "the trigger gives every run its app and group");

    for (name, filter, indexes) in cases(&jobs, now) {
        let found = store_dyn.search_runs(&filter).await.unwrap();
        assert!(!found.is_empty(), "{name}: the case selects runs");
        let plan = explain_sqlite(&store, &filter).await;
        println!("{name}: {plan:?}");
        assert!(
            plan.iter().any(|step| indexes
                .iter()
                .any(|index| step.contains(&format!("USING INDEX {index}")))),
            "{name}: searches one of {indexes:?}: {plan:?}"
        );
        assert!(
            !plan.iter().any(|step| step == "SCAN runs"),
            "{name}: no scan of the table itself: {plan:?}"
        );
        // Only a finish range, which no index orders by fire time, sorts what it reads
        // (a compound's merge sorts its parts' pages, not the table).
        if name != "finish-time range" && !name.starts_with("several") {
            assert!(
                !plan.iter().any(|step| step.contains("TEMP B-TREE")),
                "{name}: read in page order, no sort: {plan:?}"
            );
        }
    }
}

async fn explain_sqlite(store: &SqliteStore, filter: &RunFilter) -> Vec<String> {
    store.explain_search_runs(filter).await.unwrap()
}
