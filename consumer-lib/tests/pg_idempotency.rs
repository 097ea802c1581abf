//! `PgIdempotencyStore` retention against a real PostgreSQL: each test gets a schema of its
//! own on the server at `CHIME_TEST_POSTGRES_URL` (default
//! `postgres://postgres:postgres@127.0.0.1:5432/postgres`; start one with
//! deploy/local/postgres.sh), dropped afterwards. Fails loudly when the server is missing.
//! Needs feature `postgres`: `cargo test -p chime-consumer --features postgres` (a
//! workspace test run has it on).
#![cfg(feature = "postgres")]

use std::{str::FromStr, time::Duration};

use chime_consumer::{
    idempotency::{IdempotencyStore, PgIdempotencyStore, RecordedOutcome},
    protocol::TaskOutcome,
};
use chrono::{DateTime, Utc};
use sqlx::{
    AssertSqlSafe, Connection, PgConnection, PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};
use uuid::Uuid;

const POSTGRES_URL_ENV: &str = "CHIME_TEST_POSTGRES_URL";
const DEFAULT_POSTGRES_URL: &str = "postgres://postgres:postgres@127.0.0.1:5432/postgres";

/// A schema that exists for one test, and a pool whose `search_path` is it.
struct TestSchema {
    url: String,
    name: String,
    pool: PgPool,
}

impl TestSchema {
    async fn new() -> Self {
        let url = std::env::var(POSTGRES_URL_ENV).unwrap_or_else(|_| DEFAULT_POSTGRES_URL.into());
        let mut admin = PgConnection::connect(&url).await.unwrap_or_else(|e| {
            panic!(
                "PostgreSQL is required for this test but {url} is unreachable: {e}. \
                 Start it with deploy/local/postgres.sh or set {POSTGRES_URL_ENV}."
            )
        });
        let name = format!("chime_idem_{}", Uuid::now_v7().simple());
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA {name}")))
            .execute(&mut admin)
            .await
            .expect("create a test schema");
        let _ = admin.close().await;
        let options = PgConnectOptions::from_str(&url)
            .expect("a PostgreSQL url")
            .options([("search_path", name.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .expect("connect to the test schema");
        Self { url, name, pool }
    }

    /// An idempotency store in this schema keeping outcomes for `retention`.
    async fn store(&self, retention: Duration) -> PgIdempotencyStore {
        PgIdempotencyStore::new(self.pool.clone())
            .await
            .expect("create the idempotency table")
            .retention(retention)
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // Drop may run inside a runtime; use a thread with its own.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime for test cleanup");
            runtime.block_on(async {
                if let Ok(mut admin) = PgConnection::connect(&url).await {
                    let _ = sqlx::raw_sql(AssertSqlSafe(format!(
                        "DROP SCHEMA IF EXISTS {name} CASCADE"
                    )))
                    .execute(&mut admin)
                    .await;
                }
            });
        })
        .join();
    }
}

fn success() -> TaskOutcome {
    TaskOutcome::Succeeded { output: None }
}

/// Inserts `count` outcomes that finished at `finished_at` (`None`: claimed, unfinished);
/// returns their keys.
async fn seed(pool: &PgPool, count: usize, finished_at: Option<DateTime<Utc>>) -> Vec<Uuid> {
    let keys: Vec<Uuid> = (0..count).map(|_| Uuid::now_v7()).collect();
    let outcome = finished_at.map(|_| serde_json::to_value(success()).unwrap());
    sqlx::query(
        "INSERT INTO chime_idempotency (key, outcome, finished_at)
         SELECT key, $2, $3 FROM UNNEST($1::uuid[]) AS key",
    )
    .bind(&keys)
    .bind(outcome)
    .bind(finished_at)
    .execute(pool)
    .await
    .unwrap();
    keys
}

async fn count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM chime_idempotency")
        .fetch_one(pool)
        .await
        .unwrap()
}

const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);

#[tokio::test]
async fn prune_deletes_outcomes_past_retention_in_batches() {
    let db = TestSchema::new().await;
    let store = db.store(WEEK).await;
    let now = Utc::now();
    seed(&db.pool, 2500, Some(now - chrono::Duration::days(10))).await;
    let young = seed(&db.pool, 3, Some(now - chrono::Duration::days(6))).await;
    seed(&db.pool, 1, None).await;

    assert_eq!(store.prune(now).await.unwrap(), 2500, "three batches");
    assert_eq!(count(&db.pool).await, 4, "young and unfinished keys stay");
    let kept = store.lookup(young[0]).await.unwrap().unwrap();
    assert_eq!(kept.outcome, success());
    assert_eq!(store.prune(now).await.unwrap(), 0);
}

#[tokio::test]
async fn writes_prune_in_the_background() {
    let db = TestSchema::new().await;
    let store = db.store(Duration::from_secs(3600)).await;
    seed(&db.pool, 10, Some(Utc::now() - chrono::Duration::hours(2))).await;
    let recorded = RecordedOutcome {
        outcome: success(),
        finished_at: Utc::now(),
    };
    store.record(Uuid::now_v7(), &recorded).await.unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while count(&db.pool).await > 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first write starts a prune"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn zero_retention_keeps_outcomes_forever() {
    let db = TestSchema::new().await;
    let store = db.store(Duration::ZERO).await;
    let now = Utc::now();
    seed(&db.pool, 5, Some(now - chrono::Duration::days(3650))).await;
    assert_eq!(store.prune(now).await.unwrap(), 0);
    assert_eq!(count(&db.pool).await, 5);
}
