//! Retention on SQLite: short write transactions that delete old finished runs, silent
//! consumers and stale observer registrations, a batch at a time.

use chrono::{DateTime, Utc};
use sqlx::SqlitePool;

use super::rows::ms;
use crate::store::StoreError;

/// Runs one retention `DELETE` (bound to a cutoff `?1` and a row limit `?2`) in its
/// own short write transaction; returns the rows deleted.
pub(super) async fn delete_batch(
    writer: &SqlitePool,
    sql: &'static str,
    cutoff: DateTime<Utc>,
    limit: u32,
) -> Result<u64, StoreError> {
    let mut tx = writer.begin_with("BEGIN IMMEDIATE").await?;
    let deleted = sqlx::query(sql)
        .bind(ms(cutoff))
        .bind(limit)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    Ok(deleted)
}

pub(super) async fn prune_runs(
    writer: &SqlitePool,
    cutoff: DateTime<Utc>,
    limit: u32,
) -> Result<u64, StoreError> {
    delete_batch(
        writer,
        concat!(
            "DELETE FROM runs WHERE id IN (SELECT id FROM runs WHERE ",
            finished_runs!(),
            " AND finished_at < ?1 ORDER BY finished_at LIMIT ?2)"
        ),
        cutoff,
        limit,
    )
    .await
}

pub(super) async fn prune_consumers(
    writer: &SqlitePool,
    cutoff: DateTime<Utc>,
    limit: u32,
) -> Result<u64, StoreError> {
    delete_batch(
        writer,
        "DELETE FROM consumers WHERE instance IN (SELECT instance FROM consumers
             WHERE last_seen < ?1 ORDER BY last_seen LIMIT ?2)",
        cutoff,
        limit,
    )
    .await
}

pub(super) async fn prune_observers(
    writer: &SqlitePool,
    cutoff: DateTime<Utc>,
    limit: u32,
) -> Result<u64, StoreError> {
    delete_batch(
        writer,
        "DELETE FROM observers WHERE rowid IN (SELECT rowid FROM observers
             WHERE last_seen < ?1 ORDER BY last_seen LIMIT ?2)",
        cutoff,
        limit,
    )
    .await
}
