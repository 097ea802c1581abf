//! Consumers' presence and observers' registrations on PostgreSQL, as the fire path and
//! the dispatcher read them, and the consumers as `GET /v1/consumers` lists them.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::domain::LiveZones;
use crate::store::{ConsumerInstance, StoreError};

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

/// Open broadcast runs' `running` receipts, by instance, computed once; and each
/// instance's `acked` group runs through `runs_running`. Predicates match the partial
/// indexes verbatim.
const CONSUMERS: &str = "WITH receipts AS (
         SELECT e->>'instance' AS instance, count(*) AS n
         FROM runs r CROSS JOIN LATERAL jsonb_array_elements(r.instances) AS e
         WHERE r.state IN ('dispatched', 'acked') AND r.mode = 'broadcast'
             AND e->>'state' = 'running'
         GROUP BY 1)
     SELECT c.instance, c.group_name, c.zone, c.broadcast, c.version, c.first_seen,
         c.last_seen,
         (SELECT count(*) FROM runs r
          WHERE r.consumer = c.instance AND r.state = 'acked' AND r.mode <> 'broadcast')
             + COALESCE(b.n, 0) AS running
     FROM consumers c LEFT JOIN receipts b ON b.instance = c.instance
     WHERE c.last_seen >= $1 AND ($2::text IS NULL OR c.group_name = $2)
     ORDER BY c.group_name, c.instance";

type ConsumerRow = (
    String,
    String,
    Option<String>,
    bool,
    Option<String>,
    DateTime<Utc>,
    DateTime<Utc>,
    i64,
);

pub(super) async fn consumers(
    pool: &PgPool,
    since: DateTime<Utc>,
    group: Option<&str>,
) -> Result<Vec<ConsumerInstance>, StoreError> {
    let rows: Vec<ConsumerRow> = sqlx::query_as(CONSUMERS)
        .bind(since)
        .bind(group)
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(
            |(instance, group, zone, broadcast, version, first_seen, last_seen, running)| {
                ConsumerInstance {
                    instance,
                    group,
                    zone,
                    broadcast,
                    version,
                    first_seen,
                    last_seen,
                    running: running.max(0) as u64,
                }
            },
        )
        .collect())
}

pub(super) async fn queued_by_group(pool: &PgPool) -> Result<Vec<(String, u64)>, StoreError> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT j.settings->'target'->>'group' AS grp, count(*)
         FROM runs r JOIN jobs j ON j.id = r.job_id
         WHERE r.state IN ('dispatched', 'acked') AND r.state = 'dispatched'
         GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(group, n)| (group, n.max(0) as u64))
        .collect())
}
