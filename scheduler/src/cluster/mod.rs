//! The cluster: which shards this node may fire for. Jobs hash into a fixed number of
//! shards ([`crate::domain::shard`]); on PostgreSQL each shard is leased by one node with a fencing token
//! and an expiry on the database's clock ([`membership`] keeps them, [`balance`] decides
//! how to spread them, [`lease`] says how long a lease can be trusted locally). On SQLite
//! one node holds every shard for good, guarded by a file lock.
//!
//! The rest of `chimed` reads [`Ownership`]: the timer fires only jobs of trusted shards
//! and sends their tokens as the fire transaction's fence, the dispatcher publishes
//! scheduled tasks only while their shard is trusted, and the reconciler works only on
//! held shards.

pub mod balance;
pub mod lease;
pub mod membership;
pub mod notices;

use std::{sync::Arc, time::Instant};

use tokio::sync::watch;
use uuid::Uuid;

pub use crate::domain::shard::{
    DEFAULT_SHARD_COUNT, LeaseView, ShardToken, shard_of, shard_ranges,
};
pub use balance::Rebalance;
pub use lease::{Held, Leases};
pub use membership::{ClusterSettings, Membership};

/// The shards this node holds, shared by the services that act on them. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Ownership {
    node: Arc<str>,
    shard_count: u32,
    leases: Arc<watch::Sender<Arc<Leases>>>,
}

impl Ownership {
    /// A single-node store's ownership: every shard, for good.
    pub fn single_node(node: impl Into<Arc<str>>, shard_count: u32) -> Self {
        Self::with(node, shard_count, Leases::everything(shard_count))
    }

    /// A cluster node's ownership: nothing until [`Membership`] acquires leases.
    pub fn clustered(node: impl Into<Arc<str>>, shard_count: u32) -> Self {
        Self::with(node, shard_count, Leases::fenced(Default::default()))
    }

    fn with(node: impl Into<Arc<str>>, shard_count: u32, leases: Leases) -> Self {
        Self {
            node: node.into(),
            shard_count,
            leases: Arc::new(watch::Sender::new(Arc::new(leases))),
        }
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The cluster's shard count.
    pub fn shard_count(&self) -> u32 {
        self.shard_count
    }

    /// The shard of `job`.
    pub fn shard_of(&self, job: Uuid) -> u32 {
        shard_of(job, self.shard_count)
    }

    /// The current leases.
    pub fn current(&self) -> Arc<Leases> {
        self.leases.borrow().clone()
    }

    /// Notified on every change of leases (including renewals).
    pub fn subscribe(&self) -> watch::Receiver<Arc<Leases>> {
        self.leases.subscribe()
    }

    /// Whether this node may act for `job`'s shard right now.
    pub fn trusts_job(&self, job: Uuid) -> bool {
        self.current().trusts(self.shard_of(job), Instant::now())
    }

    /// The shard filter for store queries: `None` when every shard is held for good.
    pub fn shard_filter(&self) -> Option<Vec<u32>> {
        let leases = self.current();
        leases.is_fenced().then(|| leases.shards().collect())
    }

    pub(crate) fn set(&self, leases: Leases) {
        self.leases.send_replace(Arc::new(leases));
    }
}
