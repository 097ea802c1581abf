//! The membership service of a PostgreSQL node: heartbeats in the node registry, renews
//! its leases, and rebalances — releasing shards above its fair share, taking free or
//! expired ones below it. Runs every renew interval, and at once when another node joins,
//! leaves or releases shards (see [`super::notices`]). Every change of ownership is logged.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Held, Leases, Ownership, balance, lease::local_deadline, shard_ranges};
use crate::{
    domain::shard::ShardToken,
    store::{PostgresStore, StoreError},
    telemetry,
};

/// Lease timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterSettings {
    /// How long a lease lasts after its last renewal (database clock). Also how long a
    /// node stays live after its last heartbeat.
    pub lease_ttl: Duration,
    /// How often leases are renewed and the cluster rebalanced.
    pub renew_interval: Duration,
    /// How often the node heartbeats in the registry.
    pub heartbeat_interval: Duration,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(2),
            renew_interval: Duration::from_millis(500),
            heartbeat_interval: Duration::from_millis(500),
        }
    }
}

/// The membership service.
pub struct Membership {
    store: PostgresStore,
    ownership: Ownership,
    settings: ClusterSettings,
    http_addr: String,
    wake: Arc<Notify>,
    last_heartbeat: Option<Instant>,
    last_cleanup: Instant,
}

impl Membership {
    /// Membership of `ownership`'s node in the cluster stored in `store`; `wake` is
    /// notified when another node changes the cluster.
    pub fn new(
        store: PostgresStore,
        ownership: Ownership,
        settings: ClusterSettings,
        http_addr: String,
        wake: Arc<Notify>,
    ) -> Self {
        Self {
            store,
            ownership,
            settings,
            http_addr,
            wake,
            last_heartbeat: None,
            last_cleanup: Instant::now(),
        }
    }

    /// Keeps leases and heartbeats until `stop` fires. Does not leave the cluster: call
    /// [`Membership::leave`] once nothing depends on the leases any more.
    pub async fn run(mut self, stop: CancellationToken) -> Self {
        loop {
            let delay = match self.tick().await {
                Ok(()) => self.settings.renew_interval,
                Err(error) => {
                    warn!(%error, held = self.ownership.current().len(),
                        "cannot reach the cluster's store; leases lapse unless renewed in time");
                    metrics::counter!(telemetry::LEASE_RENEWALS, "outcome" => "error").increment(1);
                    self.settings.renew_interval.min(Duration::from_millis(500))
                }
            };
            tokio::select! {
                () = stop.cancelled() => return self,
                () = tokio::time::sleep(delay) => {}
                () = self.wake.notified() => {}
            }
        }
    }

    /// Hands every shard back at once and leaves the registry, so other nodes take over
    /// without waiting for expiry.
    pub async fn leave(&self) {
        let held = self.ownership.current();
        self.ownership.set(Leases::fenced(BTreeMap::new()));
        match self.store.leave(self.ownership.node()).await {
            Ok(()) => {
                info!(shards = held.len(), "left the cluster; shards released");
                metrics::counter!(telemetry::SHARD_RELEASES).increment(held.len() as u64);
            }
            Err(error) => {
                warn!(%error, "could not leave the cluster cleanly; leases expire instead")
            }
        }
    }

    async fn tick(&mut self) -> Result<(), StoreError> {
        let node = self.ownership.node().to_string();
        let ttl = self.settings.lease_ttl;
        let heartbeat_due = self
            .last_heartbeat
            .is_none_or(|at| at.elapsed() >= self.settings.heartbeat_interval);
        if heartbeat_due {
            self.store.heartbeat(&node, &self.http_addr).await?;
            self.last_heartbeat = Some(Instant::now());
        }

        // Renew what we hold; anything not renewed was taken over while we were away.
        let before = self.ownership.current();
        let sent = Instant::now();
        let renewed = self
            .store
            .renew_leases(&node, &before.tokens(), ttl)
            .await?;
        metrics::counter!(telemetry::LEASE_RENEWALS, "outcome" => "ok").increment(1);
        let mut held: BTreeMap<u32, Held> = renewed
            .iter()
            .map(|t| (t.shard, held_lease(*t, sent, ttl)))
            .collect();
        let lost: Vec<u32> = before.shards().filter(|s| !held.contains_key(s)).collect();
        if !lost.is_empty() {
            warn!(shards = %shard_ranges(&lost), "lost shard leases to another node; not firing them");
            metrics::counter!(telemetry::LEASE_LOSSES).increment(lost.len() as u64);
        }
        self.ownership.set(Leases::fenced(held.clone()));

        let live = self.store.live_nodes(ttl).await?;
        metrics::gauge!(telemetry::CLUSTER_LIVE_NODES).set(live.len() as f64);
        let table = self.store.lease_table().await?;
        let plan = balance::plan(&node, self.ownership.shard_count(), &live, &table);
        if !plan.release.is_empty() {
            // Stop trusting them before they are free, so nothing is published for them
            // after another node may have taken them.
            for shard in &plan.release {
                held.remove(shard);
            }
            self.ownership.set(Leases::fenced(held.clone()));
            self.store.release_leases(&node, &plan.release).await?;
            info!(shards = %shard_ranges(&plan.release), live_nodes = live.len(), "released shards to rebalance");
            metrics::counter!(telemetry::SHARD_RELEASES).increment(plan.release.len() as u64);
        }
        if plan.take > 0 {
            let sent = Instant::now();
            let acquired = self
                .store
                .acquire_leases(&node, &plan.candidates, plan.take, ttl)
                .await?;
            let mut fresh = Vec::new();
            // Per previous owner: the shards taken from it and the longest gap.
            let mut taken: BTreeMap<&str, (Vec<u32>, f64)> = BTreeMap::new();
            for got in &acquired {
                held.insert(got.lease.shard, held_lease(got.lease, sent, ttl));
                match &got.previous_owner {
                    Some(previous) => {
                        // Time since the previous owner last renewed, assuming it used the
                        // same TTL: how long the shard's jobs could not fire.
                        let gap = got.expired_for_s.unwrap_or(0.0).max(0.0) + ttl.as_secs_f64();
                        let (shards, longest) = taken.entry(previous.as_str()).or_default();
                        shards.push(got.lease.shard);
                        *longest = longest.max(gap);
                        metrics::counter!(telemetry::SHARD_TAKEOVERS).increment(1);
                        metrics::histogram!(telemetry::FAILOVER_GAP).record(gap);
                    }
                    None => fresh.push(got.lease.shard),
                }
            }
            // One line per node taken over from, not one per shard.
            for (previous, (mut shards, gap)) in taken {
                shards.sort_unstable();
                info!(shards = %shard_ranges(&shards), count = shards.len(),
                    previous_owner = %previous, gap_s = gap, "took over expired shards");
            }
            if !fresh.is_empty() {
                fresh.sort_unstable();
                info!(shards = %shard_ranges(&fresh), count = fresh.len(), "acquired free shards");
            }
            metrics::counter!(telemetry::SHARD_ACQUISITIONS).increment(acquired.len() as u64);
            self.ownership.set(Leases::fenced(held.clone()));
        }
        metrics::gauge!(telemetry::SHARDS_OWNED).set(held.len() as f64);

        if self.last_cleanup.elapsed() > ttl * 10 {
            self.last_cleanup = Instant::now();
            let forgotten = self.store.forget_silent_nodes(ttl * 10).await?;
            if forgotten > 0 {
                info!(nodes = forgotten, "forgot nodes silent for a long time");
            }
        }
        Ok(())
    }
}

fn held_lease(lease: ShardToken, sent: Instant, ttl: Duration) -> Held {
    Held {
        token: lease.token,
        trusted_until: Some(local_deadline(sent, ttl)),
    }
}
