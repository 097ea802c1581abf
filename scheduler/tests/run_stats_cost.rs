//! Run statistics (`GET /v1/stats/runs`) cost the runs fired in the window, not the
//! table: with 100 000 runs one second apart (about 28 hours) of 20 jobs in 5 apps,
//! the count of the last hour reads its 3 600 runs (720 for one app) through a range of
//! fire times in `runs_recent` or `runs_by_app` (PostgreSQL migration 0014, SQLite 0013),
//! never a scan of the table, on both backends. The same plan holds at 10 000 000 runs:
//! a range scan reads the window's entries whatever the table holds around them.

use chime_scheduler::{
    domain::{Job, JobSettings, JobSpec},
    store::{Backend, Store, open_backend},
};
use chime_testkit::TestDatabase;
use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use sqlx::Connection;
use uuid::Uuid;

const RUNS: i64 = 100_000;
const JOBS: usize = 20;
/// Runs fired in the last hour: one a second.
const WINDOW_RUNS: f64 = 3_600.0;

/// Job `k`: app `app{k % 5}`.
fn job(k: usize) -> Job {
    let settings: JobSettings = serde_json::from_value(json!({
        "schedule": {"every": "1h"},
        "target": {"group": "g", "mode": "group"},
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

/// A window asked: its name, the apps counted, the runs the answer counts, and the
/// index names its plan may use.
type Case = (
    &'static str,
    Option<Vec<String>>,
    u64,
    &'static [&'static str],
);

/// The windows asked.
fn cases() -> Vec<Case> {
    vec![
        ("every app", None, 3_600, &["runs_recent"]),
        (
            "one app",
            Some(vec!["app1".into()]),
            720,
            &["runs_by_app", "runs_recent"],
        ),
        (
            "a scoped token's two apps",
            Some(vec!["app1".into(), "app2".into()]),
            1_440,
            &["runs_by_app", "runs_recent"],
        ),
    ]
}

/// The last hour before `now`, minus a millisecond at the start so that exactly 3 600
/// fires (one a second, at `now` − k s) fall in `[from, until]`.
fn window(now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    (
        now - Duration::seconds(3_600) + Duration::milliseconds(1),
        now,
    )
}

/// Sums, over every node of an executed plan that reads table `runs`, the rows it
/// produced and the rows its filter threw away.
fn rows_examined(node: &Value) -> f64 {
    let mut total = 0.0;
    if node["Relation Name"] == "runs" || node["Index Name"].as_str().is_some() {
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
async fn postgres_counts_the_window_through_a_fire_time_range() {
    let db = TestDatabase::postgres().await;
    let Backend::Postgres(store) = open_backend(db.url(), 256).await.unwrap() else {
        panic!("a PostgreSQL url opens PostgreSQL")
    };
    let store_dyn = Backend::Postgres(store.clone()).store();
    let jobs = insert_jobs(store_dyn.as_ref()).await;
    let now = chime_scheduler::domain::schedule::truncate_ms(Utc::now());
    let mut conn = sqlx::PgConnection::connect(db.url()).await.unwrap();
    sqlx::query(
        "INSERT INTO runs (id, job_id, fire_time, shard, shard_total, attempt, state, trigger,
                           payload, created_at, dispatched_at, finished_at, mode)
         SELECT gen_random_uuid(), ($1::uuid[])[(1 + g % $3)::int], $4 - g * interval '1 second',
                0, 1, 1 + (g % 50 = 0)::int,
                CASE g % 100 WHEN 0 THEN 'failed' WHEN 1 THEN 'dead' ELSE 'succeeded' END,
                'schedule', 'null', $4 - g * interval '1 second',
                $4 - g * interval '1 second' + (g % 97) * interval '1 millisecond',
                $4 - g * interval '1 second' + interval '1 second', 'group'
         FROM generate_series(0, $2 - 1) AS g",
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

    let (from, until) = window(now);
    for (name, apps, runs, indexes) in cases() {
        let counts = store_dyn
            .run_stats(from, until, apps.as_deref())
            .await
            .unwrap();
        assert_eq!(
            counts.iter().map(|c| c.runs).sum::<u64>(),
            runs,
            "{name}: counts the window's runs"
        );
        let plan = store
            .explain_run_stats(from, until, apps.as_deref())
            .await
            .unwrap();
        let text = plan.to_string();
        let examined = rows_examined(&plan[0]["Plan"]);
        println!("{name}: {examined} rows of runs examined");
        assert!(
            indexes.iter().any(|index| text.contains(index)),
            "{name}: reads through one of {indexes:?}:\n{plan:#}"
        );
        assert!(
            text.contains("fire_time >="),
            "{name}: a range of fire times in the index:\n{plan:#}"
        );
        assert!(
            !text.contains("Seq Scan"),
            "{name}: no sequential scan:\n{plan:#}"
        );
        // The window's runs, read once by the index and once from the heap at most.
        assert!(
            examined <= WINDOW_RUNS * 2.2,
            "{name}: examined {examined} rows of {RUNS} for a window of {WINDOW_RUNS}:\n{plan:#}"
        );
    }
}

#[tokio::test]
async fn sqlite_counts_the_window_through_a_fire_time_range() {
    let db = TestDatabase::sqlite();
    let Backend::Sqlite(store) = open_backend(db.url(), 256).await.unwrap() else {
        panic!("a SQLite url opens SQLite")
    };
    let store_dyn = Backend::Sqlite(store.clone()).store();
    let jobs = insert_jobs(store_dyn.as_ref()).await;
    let now = chime_scheduler::domain::schedule::truncate_ms(Utc::now());
    let now_ms = now.timestamp_millis();
    let ids = serde_json::to_string(&jobs).unwrap();
    let mut conn = sqlx::SqliteConnection::connect(db.url()).await.unwrap();
    sqlx::query(
        "WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n < ?2 - 1)
         INSERT INTO runs (id, job_id, fire_time, shard, shard_total, attempt, state, trigger,
                           payload, created_at, dispatched_at, finished_at, mode)
         SELECT lower(hex(randomblob(16))), json_extract(?1, '$[' || (n % ?3) || ']'),
                ?4 - n * 1000, 0, 1, 1 + (n % 50 = 0),
                CASE n % 100 WHEN 0 THEN 'failed' WHEN 1 THEN 'dead' ELSE 'succeeded' END,
                'schedule', 'null', ?4 - n * 1000, ?4 - n * 1000 + n % 97,
                ?4 - n * 1000 + 1000, 'group'
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

    let (from, until) = window(now);
    for (name, apps, runs, indexes) in cases() {
        let counts = store_dyn
            .run_stats(from, until, apps.as_deref())
            .await
            .unwrap();
        assert_eq!(
            counts.iter().map(|c| c.runs).sum::<u64>(),
            runs,
            "{name}: counts the window's runs"
        );
        let plan = store
            .explain_run_stats(from, until, apps.as_deref())
            .await
            .unwrap();
        println!("{name}: {plan:?}");
        assert!(
            plan.iter().any(|step| step.starts_with("SEARCH runs")
                && step.contains("fire_time>? AND fire_time<?")
                && indexes.iter().any(|index| step.contains(index))),
            "{name}: searches a fire-time range of one of {indexes:?}: {plan:?}"
        );
        assert!(
            !plan.iter().any(|step| step.starts_with("SCAN runs")),
            "{name}: no scan of the table: {plan:?}"
        );
    }
}
