//! Consumers' presence and observers' registrations on PostgreSQL, as the fire path and
//! the dispatcher read them.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::domain::LiveZones;
use crate::store::StoreError;

pub(super) async fn live_zones_in(
    conn: &mut sqlx::PgConnection,
    since: DateTime<Utc>,
) -> Result<LiveZones, StoreError> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT group_name, zone FROM consumers WHERE zone IS NOT NULL AND last_seen >= $1",
    )
    .bind(since)
    .fetch_all(conn)
    .await?;
    Ok(LiveZones::new(rows))
}

pub(super) async fn live_zones(
    pool: &PgPool,
    since: DateTime<Utc>,
) -> Result<LiveZones, StoreError> {
    let mut conn = pool.acquire().await?;
    live_zones_in(&mut conn, since).await
}

pub(super) async fn observed_patterns(
    pool: &PgPool,
    since: DateTime<Utc>,
) -> Result<Vec<String>, StoreError> {
    let patterns =
        sqlx::query_scalar("SELECT DISTINCT pattern FROM observers WHERE last_seen >= $1")
            .bind(since)
            .fetch_all(pool)
            .await?;
    Ok(patterns)
}

pub(super) async fn observer_names(pool: &PgPool) -> Result<Vec<String>, StoreError> {
    let names = sqlx::query_scalar("SELECT DISTINCT name FROM observers ORDER BY name")
        .fetch_all(pool)
        .await?;
    Ok(names)
}
