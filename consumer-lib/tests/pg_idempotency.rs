//! `PgIdempotencyStore` retention against a real PostgreSQL: each test gets a database of
//! its own ([`chime_testkit::TestDatabase`]) on the server at `CHIME_TEST_POSTGRES_URL`
//! (default `postgres://postgres:postgres@127.0.0.1:5432/postgres`; start one with
//! deploy/local/postgres.sh), dropped afterwards. Fails loudly when the server is missing.
//! Needs feature `postgres`: `cargo test -p chime-consumer --features postgres` (a
//! workspace test run has it on).
#![cfg(feature = "postgres")]

use std::time::Duration;

use chime_consumer::{
    idempotency::{IdempotencyStore, PgIdempotencyStore, RecordedOutcome},
    protocol::TaskOutcome,
};
use chime_testkit::TestDatabase;
use chrono::{DateTime, Utc};
use sqlx::{PgPool, postgres::PgPoolOptions};
use uuid::Uuid;

/// A database that exists for one test, and a pool on it.
struct TestStore {
    pool: PgPool,
    // Dropped after the pool (fields drop in order); the drop removes the database.
    _db: TestDatabase,
}

impl TestStore {
    async fn new() -> Self {
        let db = TestDatabase::postgres().await;
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect(db.url())
            .await
            .expect("connect to the test database");
        Self { pool, _db: db }
    }

    /// An idempotency store in this database keeping outcomes for `retention`.
    async fn store(&self, retention: Duration) -> PgIdempotencyStore {
        PgIdempotencyStore::new(self.pool.clone())
            .await
            .expect("create the idempotency table")
            .retention(retention)
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
    let db = TestStore::new().await;
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
    let db = TestStore::new().await;
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
    let db = TestStore::new().await;
    let store = db.store(Duration::ZERO).await;
    let now = Utc::now();
    seed(&db.pool, 5, Some(now - chrono::Duration::days(3650))).await;
    assert_eq!(store.prune(now).await.unwrap(), 0);
    assert_eq!(count(&db.pool).await, 5);
}
