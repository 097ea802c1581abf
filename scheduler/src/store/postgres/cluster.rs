//! Cluster coordination in PostgreSQL: the shard count, the node registry, shard leases
//! with fencing tokens, and the notification channels that wake other nodes. Every expiry
//! is computed with the database's clock (`now()`), never a node's. The functions take
//! the pool; [`PostgresStore`](super::PostgresStore) offers them as methods.

use crate::{
    domain::shard::{LeaseView, ShardToken, shard_of},
    store::StoreError,
};
use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, Row, Transaction, postgres::PgListener};
use std::{
    collections::{BTreeSet, HashSet},
    time::Duration,
};
use uuid::Uuid;

/// Notified with a job id whenever a job is created, changed or deleted.
pub const JOBS_CHANNEL: &str = "chime_jobs";

/// Notified whenever a node joins, leaves or releases shards.
pub const CLUSTER_CHANNEL: &str = "chime_cluster";

/// A lease this node just took.
#[derive(Debug, Clone, PartialEq)]
pub struct Acquired {
    /// The shard and its new fencing token.
    pub lease: ShardToken,
    /// The node that held it before, if it expired on that node (a takeover) rather than
    /// being released.
    pub previous_owner: Option<String>,
    /// For a takeover: seconds between the previous lease's expiry and now.
    pub expired_for_s: Option<f64>,
}

/// A node as the registry shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    /// Node id.
    pub id: String,
    /// Its HTTP address.
    pub http_addr: String,
    /// When it registered.
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat.
    pub heartbeat_at: DateTime<Utc>,
    /// Whether the heartbeat is fresh.
    pub live: bool,
    /// Shards it holds unexpired leases on.
    pub shards: Vec<u32>,
}

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Creates the cluster row and one lease row per shard unless they exist, gives
/// pre-cluster jobs their shard, and returns the cluster's shard count.
pub(super) async fn init(pool: &PgPool, requested: u32) -> Result<u32, StoreError> {
    let mut tx = pool.begin().await?;
    // Two nodes starting at once on an empty database must agree on one shard count.
    sqlx::query("LOCK TABLE cluster IN EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await?;
    sqlx::query("INSERT INTO cluster (shard_count) VALUES ($1) ON CONFLICT DO NOTHING")
        .bind(requested as i32)
        .execute(&mut *tx)
        .await?;
    let count: i32 = sqlx::query_scalar("SELECT shard_count FROM cluster")
        .fetch_one(&mut *tx)
        .await?;
    let count = count as u32;
    sqlx::query(
        "INSERT INTO shard_leases (shard) SELECT generate_series(0, $1 - 1)
         ON CONFLICT DO NOTHING",
    )
    .bind(count as i32)
    .execute(&mut *tx)
    .await?;
    let unsharded: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM jobs WHERE shard IS NULL")
        .fetch_all(&mut *tx)
        .await?;
    if !unsharded.is_empty() {
        let shards: Vec<i32> = unsharded
            .iter()
            .map(|id| shard_of(*id, count) as i32)
            .collect();
        sqlx::query(
            "UPDATE jobs SET shard = u.shard FROM UNNEST($1::uuid[], $2::int[]) AS u(id, shard)
             WHERE jobs.id = u.id",
        )
        .bind(&unsharded)
        .bind(&shards)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(count)
}

/// Inside a fire transaction: which of `fence`'s shards `node` still holds with the same
/// token, unexpired by the database's clock. The rows stay locked until commit in the
/// weakest mode that still fences: `FOR KEY SHARE` conflicts with the `FOR UPDATE` a
/// takeover takes (see [`PostgresStore::acquire_leases`]), so no other node can own the
/// shard before this fire commits, but not with the owner's own renewal, which updates
/// only `expires_at`. With `FOR SHARE`, each renewal waited for every fire transaction
/// in flight, and under a steady stream of them took over a second, long enough for the
/// node to stop trusting its own leases.
pub(super) async fn prove_leases(
    tx: &mut Transaction<'_, Postgres>,
    node: &str,
    fence: &[ShardToken],
) -> Result<HashSet<u32>, StoreError> {
    let shards: Vec<i32> = fence.iter().map(|t| t.shard as i32).collect();
    let tokens: Vec<i64> = fence.iter().map(|t| t.token).collect();
    let proven: Vec<i32> = sqlx::query_scalar(
        "SELECT l.shard FROM shard_leases l
         JOIN UNNEST($2::int[], $3::bigint[]) AS f(shard, token)
           ON l.shard = f.shard AND l.token = f.token
         WHERE l.owner = $1 AND l.expires_at > clock_timestamp()
         FOR KEY SHARE OF l",
    )
    .bind(node)
    .bind(&shards)
    .bind(&tokens)
    .fetch_all(&mut **tx)
    .await?;
    Ok(proven.into_iter().map(|s| s as u32).collect())
}

/// Registers `node` or refreshes its heartbeat.
pub(super) async fn heartbeat(
    pool: &PgPool,
    node: &str,
    http_addr: &str,
) -> Result<(), StoreError> {
    let inserted: bool = sqlx::query_scalar(
        "INSERT INTO nodes (id, http_addr) VALUES ($1, $2)
         ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), http_addr = $2
         RETURNING (xmax = 0)",
    )
    .bind(node)
    .bind(http_addr)
    .fetch_one(pool)
    .await?;
    if inserted {
        notify_cluster(pool).await?;
    }
    Ok(())
}

/// Ids of nodes whose heartbeat is younger than `ttl`.
pub(super) async fn live_nodes(
    pool: &PgPool,
    ttl: Duration,
) -> Result<BTreeSet<String>, StoreError> {
    let ids: Vec<String> = sqlx::query_scalar(
        "SELECT id FROM nodes WHERE heartbeat_at > now() - $1 * interval '1 second'",
    )
    .bind(seconds(ttl))
    .fetch_all(pool)
    .await?;
    Ok(ids.into_iter().collect())
}

/// Every lease row, as the rebalancer needs it.
pub(super) async fn lease_table(pool: &PgPool) -> Result<Vec<LeaseView>, StoreError> {
    let rows = sqlx::query(
        "SELECT shard, owner, expires_at <= now() AS expired FROM shard_leases ORDER BY shard",
    )
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(LeaseView {
                shard: row.try_get::<i32, _>("shard")? as u32,
                owner: row.try_get("owner")?,
                expired: row.try_get("expired")?,
            })
        })
        .collect()
}

/// Extends `node`'s leases by `ttl` from the database's now; returns the ones still
/// held with the same token (the others were lost).
pub(super) async fn renew_leases(
    pool: &PgPool,
    node: &str,
    held: &[ShardToken],
    ttl: Duration,
) -> Result<Vec<ShardToken>, StoreError> {
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let shards: Vec<i32> = held.iter().map(|t| t.shard as i32).collect();
    let tokens: Vec<i64> = held.iter().map(|t| t.token).collect();
    let rows = sqlx::query(
        "UPDATE shard_leases l SET expires_at = now() + $4 * interval '1 second'
         FROM UNNEST($2::int[], $3::bigint[]) AS f(shard, token)
         WHERE l.shard = f.shard AND l.token = f.token AND l.owner = $1
         RETURNING l.shard, l.token",
    )
    .bind(node)
    .bind(&shards)
    .bind(&tokens)
    .bind(seconds(ttl))
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(ShardToken::new(
                row.try_get::<i32, _>("shard")? as u32,
                row.try_get("token")?,
            ))
        })
        .collect()
}

/// Takes up to `count` of `candidates` that are free or expired, in the given order,
/// each with a new fencing token.
pub(super) async fn acquire_leases(
    pool: &PgPool,
    node: &str,
    candidates: &[u32],
    count: usize,
    ttl: Duration,
) -> Result<Vec<Acquired>, StoreError> {
    if candidates.is_empty() || count == 0 {
        return Ok(Vec::new());
    }
    let candidates: Vec<i32> = candidates.iter().map(|s| *s as i32).collect();
    let rows = sqlx::query(
        "WITH picked AS (
             SELECT shard, owner AS previous, expires_at AS previous_expiry
             FROM shard_leases
             WHERE shard = ANY($2) AND (owner IS NULL OR expires_at <= now())
             ORDER BY array_position($2, shard)
             LIMIT $3
             FOR UPDATE SKIP LOCKED)
         UPDATE shard_leases l
         SET owner = $1, token = l.token + 1, acquired_at = now(),
             expires_at = now() + $4 * interval '1 second'
         FROM picked WHERE l.shard = picked.shard
         RETURNING l.shard, l.token, picked.previous,
             CASE WHEN picked.previous IS NULL THEN NULL
                  ELSE EXTRACT(EPOCH FROM now() - picked.previous_expiry)::float8 END
                 AS expired_for_s",
    )
    .bind(node)
    .bind(&candidates)
    .bind(count as i64)
    .bind(seconds(ttl))
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(Acquired {
                lease: ShardToken::new(
                    row.try_get::<i32, _>("shard")? as u32,
                    row.try_get("token")?,
                ),
                previous_owner: row.try_get("previous")?,
                expired_for_s: row.try_get("expired_for_s")?,
            })
        })
        .collect()
}

/// Hands `shards` back (only those `node` still holds) and wakes the other nodes.
pub(super) async fn release_leases(
    pool: &PgPool,
    node: &str,
    shards: &[u32],
) -> Result<(), StoreError> {
    if shards.is_empty() {
        return Ok(());
    }
    let shards: Vec<i32> = shards.iter().map(|s| *s as i32).collect();
    sqlx::query(
        "UPDATE shard_leases SET owner = NULL, expires_at = '-infinity'
         WHERE owner = $1 AND shard = ANY($2)",
    )
    .bind(node)
    .bind(&shards)
    .execute(pool)
    .await?;
    notify_cluster(pool).await
}

/// Releases every lease of `node`, removes it from the registry and wakes the others.
pub(super) async fn leave(pool: &PgPool, node: &str) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("UPDATE shard_leases SET owner = NULL, expires_at = '-infinity' WHERE owner = $1")
        .bind(node)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM nodes WHERE id = $1")
        .bind(node)
        .execute(&mut *tx)
        .await?;
    sqlx::query("SELECT pg_notify($1, 'leave')")
        .bind(CLUSTER_CHANNEL)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// Drops registry rows of nodes silent for longer than `after` (their leases expired
/// long ago; this only keeps `/v1/cluster` short).
pub(super) async fn forget_silent_nodes(pool: &PgPool, after: Duration) -> Result<u64, StoreError> {
    Ok(
        sqlx::query("DELETE FROM nodes WHERE heartbeat_at < now() - $1 * interval '1 second'")
            .bind(seconds(after))
            .execute(pool)
            .await?
            .rows_affected(),
    )
}

/// The registry with each node's unexpired shards; `ttl` decides liveness.
pub(super) async fn nodes(pool: &PgPool, ttl: Duration) -> Result<Vec<NodeRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT n.id, n.http_addr, n.started_at, n.heartbeat_at,
                n.heartbeat_at > now() - $1 * interval '1 second' AS live,
                COALESCE(array_agg(l.shard ORDER BY l.shard)
                         FILTER (WHERE l.shard IS NOT NULL), '{}') AS shards
         FROM nodes n
         LEFT JOIN shard_leases l ON l.owner = n.id AND l.expires_at > now()
         GROUP BY n.id ORDER BY n.id",
    )
    .bind(seconds(ttl))
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            let shards: Vec<i32> = row.try_get("shards")?;
            Ok(NodeRow {
                id: row.try_get("id")?,
                http_addr: row.try_get("http_addr")?,
                started_at: row.try_get("started_at")?,
                heartbeat_at: row.try_get("heartbeat_at")?,
                live: row.try_get("live")?,
                shards: shards.into_iter().map(|s| s as u32).collect(),
            })
        })
        .collect()
}

/// A listener on the job and cluster channels (its own connection).
pub(super) async fn listener(pool: &PgPool) -> Result<PgListener, StoreError> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen_all([JOBS_CHANNEL, CLUSTER_CHANNEL]).await?;
    Ok(listener)
}

pub(super) async fn notify_cluster(pool: &PgPool) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_notify($1, 'change')")
        .bind(CLUSTER_CHANNEL)
        .execute(pool)
        .await?;
    Ok(())
}
