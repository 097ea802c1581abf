//! The PostgreSQL store: the clustered store. Batches use arrays (`= ANY`, `UNNEST`) so a
//! fire of many jobs is a handful of statements; instants are `timestamptz`. Cluster
//! coordination (nodes, shard leases, notifications) lives in [`cluster`]. Each concern's
//! SQL lives in its own file, named as in the SQLite store (`rows`, `jobs`, `fire`,
//! `runs`, `replies`, `reconcile`, `presence`, `retention`); this file connects, routes
//! the cluster's methods to them, and has the trait's routed by name (`store/delegate.rs`).

mod audit;
pub mod cluster;
mod failures;
mod fire;
mod job_search;
mod jobs;
mod presence;
mod reconcile;
mod replies;
mod retention;
mod rows;
mod run_search;
mod run_stats;
mod runs;
mod tokens;

use std::{collections::BTreeSet, str::FromStr, time::Duration as StdDuration};

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use sqlx::{
    PgPool,
    postgres::{PgConnectOptions, PgListener, PgPoolOptions, PgSslMode},
};
use uuid::Uuid;

use super::{FireBatch, Firing, StoreError};
use crate::domain::Job;
use crate::domain::shard::{LeaseView, ShardToken};
use cluster::{Acquired, NodeRow};

/// Healthy transactions here never wait between statements; this bounds how long a
/// stalled node can block a takeover of its shards.
const IDLE_IN_TRANSACTION_TIMEOUT: &str = "2s";

/// Jobs and runs in PostgreSQL.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    shard_count: u32,
}

/// `sslmode=require` with a CA bundle (`sslrootcert`) verifies the server's certificate
/// against it, as libpq does (sqlx alone would encrypt without verifying). Without a CA
/// bundle, `require` encrypts only; `verify-full` also checks the host name.
fn tls_like_libpq(url: &str, options: PgConnectOptions) -> PgConnectOptions {
    let query = url.split_once('?').map_or("", |(_, query)| query);
    let has_root_cert = query.split('&').any(|pair| {
        let key = pair.split_once('=').map_or(pair, |(key, _)| key);
        ["sslrootcert", "ssl-root-cert", "ssl-ca"].contains(&key.to_ascii_lowercase().as_str())
    });
    if has_root_cert && matches!(options.get_ssl_mode(), PgSslMode::Require) {
        options.ssl_mode(PgSslMode::VerifyCa)
    } else {
        options
    }
}

impl PostgresStore {
    /// Connects to `url`, applies migrations, and creates the cluster with
    /// `shard_count` shards unless it exists (an existing cluster keeps its count).
    pub async fn open(url: &str, shard_count: u32) -> Result<Self, StoreError> {
        // A node stalled inside a transaction (SIGSTOP, a long pause) would keep its lease
        // rows locked, and no other node could take them over; the server ends
        // such a transaction instead, and the stalled node's commit then fails.
        // JIT off: chimed's statements are short, and the reconciler's page query over a
        // large backlog is estimated above `jit_above_cost`, so every pass paid tens of
        // milliseconds of compilation for a query that runs in a few.
        let options = tls_like_libpq(url, PgConnectOptions::from_str(url)?).options([
            (
                "idle_in_transaction_session_timeout",
                IDLE_IN_TRANSACTION_TIMEOUT,
            ),
            ("jit", "off"),
        ]);
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .acquire_timeout(StdDuration::from_secs(5))
            .connect_with(options)
            .await?;
        sqlx::migrate!("./migrations/postgres").run(&pool).await?;
        let shard_count = cluster::init(&pool, shard_count).await?;
        Ok(Self { pool, shard_count })
    }

    /// The cluster's shard count.
    pub fn shard_count(&self) -> u32 {
        self.shard_count
    }

    /// Registers `node` or refreshes its heartbeat.
    pub async fn heartbeat(&self, node: &str, http_addr: &str) -> Result<(), StoreError> {
        cluster::heartbeat(&self.pool, node, http_addr).await
    }

    /// Ids of nodes whose heartbeat is younger than `ttl`.
    pub async fn live_nodes(&self, ttl: StdDuration) -> Result<BTreeSet<String>, StoreError> {
        cluster::live_nodes(&self.pool, ttl).await
    }

    /// Every lease row, as the rebalancer needs it.
    pub async fn lease_table(&self) -> Result<Vec<LeaseView>, StoreError> {
        cluster::lease_table(&self.pool).await
    }

    /// Extends `node`'s leases by `ttl` from the database's now; returns the ones still
    /// held with the same token (the others were lost).
    pub async fn renew_leases(
        &self,
        node: &str,
        held: &[ShardToken],
        ttl: StdDuration,
    ) -> Result<Vec<ShardToken>, StoreError> {
        cluster::renew_leases(&self.pool, node, held, ttl).await
    }

    /// Takes up to `count` of `candidates` that are free or expired, in the given order,
    /// each with a new fencing token.
    pub async fn acquire_leases(
        &self,
        node: &str,
        candidates: &[u32],
        count: usize,
        ttl: StdDuration,
    ) -> Result<Vec<Acquired>, StoreError> {
        cluster::acquire_leases(&self.pool, node, candidates, count, ttl).await
    }

    /// Hands `shards` back (only those `node` still holds) and wakes the other nodes.
    pub async fn release_leases(&self, node: &str, shards: &[u32]) -> Result<(), StoreError> {
        cluster::release_leases(&self.pool, node, shards).await
    }

    /// Releases every lease of `node`, removes it from the registry and wakes the others.
    pub async fn leave(&self, node: &str) -> Result<(), StoreError> {
        cluster::leave(&self.pool, node).await
    }

    /// Drops registry rows of nodes silent for longer than `after` (their leases expired
    /// long ago; this only keeps `/v1/cluster` short).
    pub async fn forget_silent_nodes(&self, after: StdDuration) -> Result<u64, StoreError> {
        cluster::forget_silent_nodes(&self.pool, after).await
    }

    /// The registry with each node's unexpired shards; `ttl` decides liveness.
    pub async fn nodes(&self, ttl: StdDuration) -> Result<Vec<NodeRow>, StoreError> {
        cluster::nodes(&self.pool, ttl).await
    }

    /// A listener on the job and cluster channels (its own connection).
    pub async fn listener(&self) -> Result<PgListener, StoreError> {
        cluster::listener(&self.pool).await
    }
}

// The trait's other methods are routed by name (see `store/delegate.rs`).
route_store!(PostgresStore, reads: pool, writes: pool, {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn insert_job(&self, job: &Job) -> Result<(), StoreError> {
        jobs::insert_job(&self.pool, self.shard_count, job).await
    }

    async fn insert_jobs(&self, jobs: &[Job]) -> Result<Vec<usize>, StoreError> {
        jobs::insert_jobs(&self.pool, self.shard_count, jobs).await
    }

    async fn fire(
        &self,
        job_ids: &[Uuid],
        now: DateTime<Utc>,
        grace: Duration,
        firing: &Firing,
    ) -> Result<FireBatch, StoreError> {
        fire::fire(&self.pool, self.shard_count, job_ids, now, grace, firing).await
    }
});

impl PostgresStore {
    /// `EXPLAIN (ANALYZE, FORMAT JSON)` of one retention batch, rolled back, for tests
    /// that its cost follows the batch, not the table.
    pub async fn explain_prune_runs(
        &self,
        cutoff: DateTime<Utc>,
        limit: u32,
    ) -> Result<Value, StoreError> {
        retention::explain_prune_runs(&self.pool, cutoff, limit).await
    }

    /// `EXPLAIN (ANALYZE, FORMAT JSON)` of the reconciler's overdue-runs query, for tests
    /// that its cost follows the number of overdue runs.
    pub async fn explain_overdue(&self, shards: Option<&[u32]>) -> Result<Value, StoreError> {
        reconcile::explain_overdue(&self.pool, shards).await
    }

    /// `EXPLAIN (ANALYZE, FORMAT JSON)` of the search across jobs for `filter`, for tests
    /// that each main filter reads through its index.
    pub async fn explain_search_runs(
        &self,
        filter: &crate::domain::RunFilter,
    ) -> Result<Value, StoreError> {
        run_search::explain_search_runs(&self.pool, filter).await
    }

    /// `EXPLAIN (ANALYZE, FORMAT JSON)` of the query of a page of the job list for
    /// `filter`, for tests that each order and filter reads through an index.
    pub async fn explain_search_jobs(
        &self,
        filter: &crate::domain::JobFilter,
    ) -> Result<Value, StoreError> {
        job_search::explain_search_jobs(&self.pool, filter).await
    }

    /// The plan of the run statistics' count (`GET /v1/stats/runs`) for fire times in
    /// `[from, until]` of `apps`, for tests that it reads a range of fire times through
    /// an index.
    pub async fn explain_run_stats(
        &self,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
        apps: Option<&[String]>,
    ) -> Result<Value, StoreError> {
        run_stats::explain_run_stats(&self.pool, from, until, apps).await
    }
}
