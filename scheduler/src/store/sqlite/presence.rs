//! Consumers' presence and observers' registrations on SQLite, as the fire path and
//! the dispatcher read them, and the consumers as `GET /v1/consumers` lists them.

use chrono::{DateTime, Utc};
use sqlx::{Executor, Sqlite, SqlitePool};

use super::rows::{instant, ms};
use crate::domain::LiveZones;
use crate::store::{ConsumerInstance, StoreError};

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

/// Open broadcast runs' `running` receipts, by instance, computed once; and each
/// instance's `acked` group runs through `runs_running`. Predicates match the partial
/// indexes verbatim.
const CONSUMERS: &str = "WITH receipts AS (
         SELECT json_extract(e.value, '$.instance') AS instance, count(*) AS n
         FROM runs r, json_each(r.instances) AS e
         WHERE r.state IN ('dispatched', 'acked') AND r.mode = 'broadcast'
             AND json_extract(e.value, '$.state') = 'running'
         GROUP BY 1)
     SELECT c.instance, c.group_name, c.zone, c.broadcast, c.version, c.first_seen,
         c.last_seen,
         (SELECT count(*) FROM runs r
          WHERE r.consumer = c.instance AND r.state = 'acked' AND r.mode <> 'broadcast')
             + COALESCE(b.n, 0) AS running
     FROM consumers c LEFT JOIN receipts b ON b.instance = c.instance
     WHERE c.last_seen >= ?1 AND (?2 IS NULL OR c.group_name = ?2)
     ORDER BY c.group_name, c.instance";

type ConsumerRow = (
    String,
    String,
    Option<String>,
    bool,
    Option<String>,
    i64,
    i64,
    i64,
);

pub(super) async fn consumers(
    readers: &SqlitePool,
    since: DateTime<Utc>,
    group: Option<&str>,
) -> Result<Vec<ConsumerInstance>, StoreError> {
    let rows: Vec<ConsumerRow> = sqlx::query_as(CONSUMERS)
        .bind(ms(since))
        .bind(group)
        .fetch_all(readers)
        .await?;
    rows.into_iter()
        .map(
            |(instance, group, zone, broadcast, version, first_seen, last_seen, running)| {
                Ok(ConsumerInstance {
                    first_seen: instant("consumer first_seen", first_seen)?,
                    last_seen: instant("consumer last_seen", last_seen)?,
                    instance,
                    group,
                    zone,
                    broadcast,
                    version,
                    running: running.max(0) as u64,
                })
            },
        )
        .collect()
}

pub(super) async fn queued_by_group(
    readers: &SqlitePool,
) -> Result<Vec<(String, u64)>, StoreError> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT json_extract(j.settings, '$.target.group') AS grp, count(*)
         FROM runs r JOIN jobs j ON j.id = r.job_id
         WHERE r.state IN ('dispatched', 'acked') AND r.state = 'dispatched'
         GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(readers)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(group, n)| (group, n.max(0) as u64))
        .collect())
}
