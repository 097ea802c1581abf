//! Retention on PostgreSQL: one-statement batches that delete old finished runs, silent
//! consumers and stale observer registrations, `SKIP LOCKED` so nodes share the work.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgPool, types::Json};

use crate::store::StoreError;

/// One retention batch. `= ANY(ARRAY(..))`, not `IN (..)`: planned as a join, `IN` hashed
/// the batch and read the whole table for it on every batch; the array is looked up
/// through the primary key.
macro_rules! prune_runs {
    () => {
        concat!(
            "DELETE FROM runs WHERE id = ANY(ARRAY(SELECT id FROM runs WHERE ",
            finished_runs!(),
            " AND finished_at < $1 ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED))"
        )
    };
}

/// Runs one retention `DELETE` (bound to a cutoff `$1` and a row limit `$2`) as its
/// own statement. The rows it picks are locked `SKIP LOCKED`, so nodes pruning at the
/// same time take different rows instead of waiting on each other.
pub(super) async fn delete_batch(
    pool: &PgPool,
    sql: &'static str,
    cutoff: DateTime<Utc>,
    limit: u32,
) -> Result<u64, StoreError> {
    Ok(sqlx::query(sql)
        .bind(cutoff)
        .bind(i64::from(limit))
        .execute(pool)
        .await?
        .rows_affected())
}

/// `EXPLAIN (ANALYZE, FORMAT JSON)` of one retention batch, rolled back, for tests
/// that its cost follows the batch, not the table.
pub(super) async fn explain_prune_runs(
    pool: &PgPool,
    cutoff: DateTime<Utc>,
    limit: u32,
) -> Result<Value, StoreError> {
    let mut tx = pool.begin().await?;
    let plan: Json<Value> =
        sqlx::query_scalar(concat!("EXPLAIN (ANALYZE, FORMAT JSON) ", prune_runs!()))
            .bind(cutoff)
            .bind(i64::from(limit))
            .fetch_one(&mut *tx)
            .await?;
    tx.rollback().await?;
    Ok(plan.0)
}

pub(super) async fn prune_runs(
    pool: &PgPool,
    cutoff: DateTime<Utc>,
    limit: u32,
) -> Result<u64, StoreError> {
    delete_batch(pool, prune_runs!(), cutoff, limit).await
}

pub(super) async fn prune_consumers(
    pool: &PgPool,
    cutoff: DateTime<Utc>,
    limit: u32,
) -> Result<u64, StoreError> {
    delete_batch(
        pool,
        "DELETE FROM consumers WHERE instance IN (SELECT instance FROM consumers
             WHERE last_seen < $1 ORDER BY last_seen LIMIT $2 FOR UPDATE SKIP LOCKED)",
        cutoff,
        limit,
    )
    .await
}

pub(super) async fn prune_observers(
    pool: &PgPool,
    cutoff: DateTime<Utc>,
    limit: u32,
) -> Result<u64, StoreError> {
    delete_batch(
        pool,
        "DELETE FROM observers WHERE (name, pattern) IN (SELECT name, pattern FROM observers
             WHERE last_seen < $1 ORDER BY last_seen LIMIT $2 FOR UPDATE SKIP LOCKED)",
        cutoff,
        limit,
    )
    .await
}
