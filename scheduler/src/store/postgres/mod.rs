//! The PostgreSQL store: the clustered store. Batches use arrays (`= ANY`, `UNNEST`) so a
//! fire of many jobs is a handful of statements; instants are `timestamptz`. Cluster
//! coordination (nodes, shard leases, notifications) lives in [`cluster`]. Each concern's
//! SQL lives in its own file, named as in the SQLite store (`rows`, `jobs`, `fire`,
//! `runs`, `replies`, `reconcile`, `presence`, `retention`); this file connects and
//! routes the trait's methods (and the cluster's) to them.

pub mod cluster;
mod fire;
mod jobs;
mod presence;
mod reconcile;
mod replies;
mod retention;
mod rows;
mod runs;

use std::{
    collections::{BTreeSet, HashSet},
    str::FromStr,
    time::Duration as StdDuration,
};

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use sqlx::{
    PgPool,
    postgres::{PgConnectOptions, PgListener, PgPoolOptions},
};
use uuid::Uuid;

use chime_consumer::protocol::{AttemptRecord, Reply};

use super::{
    DueCursor, DuePage, Expect, FireBatch, Firing, Jitter, JobPage, NextAttempt, OverdueRun,
    ReplyApplied, RunChange, RunPage, Store, StoreError, reply_plan,
};
use crate::domain::shard::{LeaseView, ShardToken};
use crate::domain::{Job, LiveZones, Run};
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
        let options = PgConnectOptions::from_str(url)?.options([
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

#[async_trait]
impl Store for PostgresStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn insert_job(&self, job: &Job) -> Result<(), StoreError> {
        jobs::insert_job(&self.pool, self.shard_count, job).await
    }

    async fn get_job(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        jobs::get_job(&self.pool, id).await
    }

    async fn list_jobs(&self, page: &JobPage) -> Result<Vec<Job>, StoreError> {
        jobs::list_jobs(&self.pool, page).await
    }

    async fn update_job(
        &self,
        job: &Job,
        expected_version: i64,
        set_next_fire: bool,
    ) -> Result<Job, StoreError> {
        jobs::update_job(&self.pool, job, expected_version, set_next_fire).await
    }

    async fn delete_job(&self, id: Uuid) -> Result<bool, StoreError> {
        jobs::delete_job(&self.pool, id).await
    }

    async fn due_jobs(
        &self,
        after: DueCursor,
        before: DateTime<Utc>,
        limit: u32,
        shards: Option<&[u32]>,
    ) -> Result<DuePage, StoreError> {
        fire::due_jobs(&self.pool, after, before, limit, shards).await
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

    async fn insert_run(&self, run: &Run) -> Result<bool, StoreError> {
        fire::insert_run(&self.pool, run).await
    }

    async fn mark_dispatched(&self, run_ids: &[Uuid], at: DateTime<Utc>) -> Result<(), StoreError> {
        runs::mark_dispatched(&self.pool, run_ids, at).await
    }

    async fn note_publish_failure(&self, run_id: Uuid, reason: &str) -> Result<(), StoreError> {
        runs::note_publish_failure(&self.pool, run_id, reason).await
    }

    fn reply_rounds(&self, batch: &[&Reply]) -> Vec<Vec<usize>> {
        reply_plan::rounds(batch)
    }

    async fn record_replies(
        &self,
        batch: &[&Reply],
        now: DateTime<Utc>,
        jitter: &Jitter<'_>,
    ) -> Result<Vec<ReplyApplied>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let applied = replies::record_replies(&mut tx, batch, now, jitter).await?;
        tx.commit().await?;
        Ok(applied)
    }

    async fn get_run(&self, id: Uuid) -> Result<Option<Run>, StoreError> {
        runs::get_run(&self.pool, id).await
    }

    async fn list_runs(&self, job_id: Uuid, page: &RunPage) -> Result<Vec<Run>, StoreError> {
        runs::list_runs(&self.pool, job_id, page).await
    }

    async fn scheduled_runs(&self, run_ids: &[Uuid]) -> Result<HashSet<Uuid>, StoreError> {
        runs::scheduled_runs(&self.pool, run_ids).await
    }

    async fn overdue_runs(
        &self,
        now: DateTime<Utc>,
        unconfirmed_before: DateTime<Utc>,
        after: Option<(DateTime<Utc>, Uuid)>,
        limit: u32,
        shards: Option<&[u32]>,
    ) -> Result<Vec<OverdueRun>, StoreError> {
        reconcile::overdue_runs(&self.pool, now, unconfirmed_before, after, limit, shards).await
    }

    async fn next_attempts(
        &self,
        runs: &[NextAttempt<'_>],
        now: DateTime<Utc>,
    ) -> Result<HashSet<Uuid>, StoreError> {
        reconcile::next_attempts(&self.pool, runs, now).await
    }

    async fn kill_run(
        &self,
        run_id: Uuid,
        expect: Expect,
        reason: &str,
        record: Option<&AttemptRecord>,
        dead_lettered: bool,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        reconcile::kill_run(
            &self.pool,
            run_id,
            expect,
            reason,
            record,
            dead_lettered,
            now,
        )
        .await
    }

    async fn mark_dead_lettered(&self, run_id: Uuid) -> Result<(), StoreError> {
        reconcile::mark_dead_lettered(&self.pool, run_id).await
    }

    async fn await_consumer(
        &self,
        runs: &[(Uuid, u32)],
        now: DateTime<Utc>,
    ) -> Result<HashSet<Uuid>, StoreError> {
        reconcile::await_consumer(&self.pool, runs, now).await
    }

    async fn target_groups(&self) -> Result<Vec<String>, StoreError> {
        jobs::target_groups(&self.pool).await
    }

    async fn update_run(
        &self,
        run_id: Uuid,
        change: &RunChange<'_>,
    ) -> Result<Option<(bool, Run)>, StoreError> {
        runs::update_run(&self.pool, run_id, change).await
    }

    async fn live_zones(&self, since: DateTime<Utc>) -> Result<LiveZones, StoreError> {
        presence::live_zones(&self.pool, since).await
    }

    async fn observed_patterns(&self, since: DateTime<Utc>) -> Result<Vec<String>, StoreError> {
        presence::observed_patterns(&self.pool, since).await
    }

    async fn observer_names(&self) -> Result<Vec<String>, StoreError> {
        presence::observer_names(&self.pool).await
    }

    async fn note_on_run(&self, run_id: Uuid, record: &AttemptRecord) -> Result<bool, StoreError> {
        runs::note_on_run(&self.pool, run_id, record).await
    }

    async fn prune_runs(&self, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError> {
        retention::prune_runs(&self.pool, cutoff, limit).await
    }

    async fn prune_consumers(&self, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError> {
        retention::prune_consumers(&self.pool, cutoff, limit).await
    }

    async fn prune_observers(&self, cutoff: DateTime<Utc>, limit: u32) -> Result<u64, StoreError> {
        retention::prune_observers(&self.pool, cutoff, limit).await
    }

    async fn fire_items(
        &self,
        job_id: Uuid,
        fire_time: DateTime<Utc>,
    ) -> Result<Vec<Run>, StoreError> {
        runs::fire_items(&self.pool, job_id, fire_time).await
    }
}

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
}
