//! The reconciler's query costs what the overdue runs cost, not what the table holds:
//! with 100 000 finished runs and 100 overdue ones, PostgreSQL's executed plan touches a
//! few hundred rows at most, and SQLite's plan searches the `runs_due` index instead of
//! scanning the table. Likewise one retention batch on PostgreSQL reads its batch, not
//! the table.

use chime_scheduler::{
    domain::{Job, JobSettings, JobSpec},
    store::{Backend, PostgresStore, Store, open_backend},
};
use chime_testkit::TestDatabase;
use chrono::{Duration, Utc};
use serde_json::{Value, json};
use sqlx::Connection;

const FINISHED: i64 = 100_000;
const OVERDUE: i64 = 100;

fn job() -> Job {
    let settings: JobSettings = serde_json::from_value(json!({
        "schedule": {"every": "1h"},
        "target": {"group": "cost"},
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
            app: "default".into(),
            name: "cost".into(),
            paused: false,
            settings,
        },
        Utc::now(),
    )
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

/// A PostgreSQL store holding [`FINISHED`] runs finished now and [`OVERDUE`] dispatched
/// runs a minute past their deadline, analyzed.
async fn postgres_with_history(db: &TestDatabase) -> (PostgresStore, std::sync::Arc<dyn Store>) {
    let Backend::Postgres(store) = open_backend(db.url(), 256).await.unwrap() else {
        panic!("a PostgreSQL url opens PostgreSQL")
    };
    let store_dyn = Backend::Postgres(store.clone()).store();
    let job = job();
    store_dyn.insert_job(&job).await.unwrap();
    let mut conn = sqlx::PgConnection::connect(db.url()).await.unwrap();
    sqlx::query(
        "INSERT INTO runs (id, job_id, fire_time, shard, shard_total, attempt, state, trigger,
                           payload, created_at, finished_at, due_at)
         SELECT gen_random_uuid(), $1, now() - g * interval '1 second', 0, 1, 1,
                CASE WHEN g <= $3 THEN 'dispatched' ELSE 'succeeded' END, 'schedule', 'null',
                now() - g * interval '1 second', now(),
                CASE WHEN g <= $3 THEN now() - interval '1 minute' END
         FROM generate_series(1, $2 + $3) AS g",
    )
    .bind(job.id)
    .bind(FINISHED)
    .bind(OVERDUE)
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query("ANALYZE runs")
        .execute(&mut conn)
        .await
        .unwrap();
    (store, store_dyn)
}

#[tokio::test]
async fn postgres_reconciler_reads_only_overdue_runs() {
    let db = TestDatabase::postgres().await;
    let (store, store_dyn) = postgres_with_history(&db).await;
    let now = Utc::now();
    let overdue = store_dyn
        .overdue_runs(now, now - Duration::seconds(10), None, 1000, None)
        .await
        .unwrap();
    assert_eq!(overdue.len() as i64, OVERDUE);
    for shards in [None, Some(vec![0u32, 1, 2])] {
        let plan = store.explain_overdue(shards.as_deref()).await.unwrap();
        let examined = rows_examined(&plan[0]["Plan"]);
        println!("rows of runs examined (shards {shards:?}): {examined}");
        assert!(
            examined <= (OVERDUE * 3) as f64,
            "the reconciler query examined {examined} rows for {OVERDUE} overdue runs \
             among {FINISHED} finished ones:\n{plan:#}"
        );
        assert!(
            plan.to_string().contains("runs_due"),
            "it reads through the runs_due index:\n{plan:#}"
        );
    }
}

#[tokio::test]
async fn postgres_retention_batch_reads_only_its_batch() {
    const BATCH: u32 = 1000;
    let db = TestDatabase::postgres().await;
    let (store, _) = postgres_with_history(&db).await;
    let plan = store
        .explain_prune_runs(Utc::now() + Duration::hours(1), BATCH)
        .await
        .unwrap();
    let deleted = plan[0]["Plan"]["Plans"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(std::iter::once(&plan[0]["Plan"]))
        .filter(|node| node["Node Type"] == "ModifyTable")
        .count();
    assert_eq!(deleted, 1, "one delete:\n{plan:#}");
    let examined = rows_examined(&plan[0]["Plan"]);
    println!("rows of runs examined by one retention batch: {examined}");
    assert!(
        examined >= f64::from(BATCH) && examined <= f64::from(BATCH) * 3.0,
        "one batch of {BATCH} examined {examined} rows of {FINISHED} finished runs:\n{plan:#}"
    );
    assert!(
        !plan.to_string().contains("Seq Scan"),
        "no sequential scan:\n{plan:#}"
    );
}

#[tokio::test]
async fn sqlite_reconciler_searches_the_due_index() {
    let db = TestDatabase::sqlite();
    let Backend::Sqlite(store) = open_backend(db.url(), 256).await.unwrap() else {
        panic!("a SQLite url opens SQLite")
    };
    let store_dyn = Backend::Sqlite(store.clone()).store();
    let job = job();
    store_dyn.insert_job(&job).await.unwrap();
    let mut conn = sqlx::SqliteConnection::connect(db.url()).await.unwrap();
    let now_ms = Utc::now().timestamp_millis();
    sqlx::query(
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?2 + ?3)
         INSERT INTO runs (id, job_id, fire_time, shard, shard_total, attempt, state, trigger,
                           payload, created_at, finished_at, due_at)
         SELECT lower(hex(randomblob(16))), ?1, ?4 - n * 1000, 0, 1, 1,
                CASE WHEN n <= ?3 THEN 'dispatched' ELSE 'succeeded' END, 'schedule', 'null',
                ?4 - n * 1000, ?4, CASE WHEN n <= ?3 THEN ?4 - 60000 END
         FROM g",
    )
    .bind(job.id.to_string())
    .bind(FINISHED)
    .bind(OVERDUE)
    .bind(now_ms)
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query("ANALYZE").execute(&mut conn).await.unwrap();

    let now = Utc::now();
    let overdue = store_dyn
        .overdue_runs(now, now - Duration::seconds(10), None, 1000, None)
        .await
        .unwrap();
    assert_eq!(overdue.len() as i64, OVERDUE);
    for shards in [None, Some(vec![0u32, 1, 2])] {
        let plan = store.explain_overdue(shards.as_deref()).await.unwrap();
        println!("plan (shards {shards:?}): {plan:?}");
        assert!(
            plan.iter()
                .any(|step| step.contains("runs USING INDEX runs_due (due_at<?)")),
            "the query searches runs through runs_due: {plan:?}"
        );
        assert!(
            !plan.iter().any(|step| step.starts_with("SCAN runs")),
            "no full scan of runs: {plan:?}"
        );
    }
}
