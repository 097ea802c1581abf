//! Consumers' presence and observers' registrations on SQLite, as the fire path and
//! the dispatcher read them.

use chrono::{DateTime, Utc};
use sqlx::{Executor, Sqlite, SqlitePool};

use super::rows::ms;
use crate::domain::LiveZones;
use crate::store::StoreError;

pub(super) async fn live_zones_in<'e, E: Executor<'e, Database = Sqlite>>(
    executor: E,
    since: DateTime<Utc>,
) -> Result<LiveZones, StoreError> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT group_name, zone FROM consumers WHERE zone IS NOT NULL AND last_seen >= ?",
    )
    .bind(ms(since))
    .fetch_all(executor)
    .await?;
    Ok(LiveZones::new(rows))
}

pub(super) async fn live_zones(
    readers: &SqlitePool,
    since: DateTime<Utc>,
) -> Result<LiveZones, StoreError> {
    live_zones_in(readers, since).await
}

pub(super) async fn observed_patterns(
    readers: &SqlitePool,
    since: DateTime<Utc>,
) -> Result<Vec<String>, StoreError> {
    let patterns =
        sqlx::query_scalar("SELECT DISTINCT pattern FROM observers WHERE last_seen >= ?")
            .bind(ms(since))
            .fetch_all(readers)
            .await?;
    Ok(patterns)
}

pub(super) async fn observer_names(readers: &SqlitePool) -> Result<Vec<String>, StoreError> {
    let names = sqlx::query_scalar("SELECT DISTINCT name FROM observers ORDER BY name")
        .fetch_all(readers)
        .await?;
    Ok(names)
}
