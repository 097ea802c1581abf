//! [`Node`]: this node as operators see it — the cluster from where it stands (which node
//! holds which shards) and whether it is ready to serve (its database answers and its
//! dispatcher has a broker channel).

use std::{collections::HashSet, sync::Arc, time::Duration};

use chrono::{DateTime, Utc};

use crate::{
    cluster::{ClusterSettings, Ownership},
    dispatch::DispatchHandle,
    domain::access::{Action, Caller, Denied},
    store::{Backend, Store, StoreError},
};

/// Why the cluster view could not be given.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The caller may not read the cluster.
    #[error(transparent)]
    Denied(#[from] Denied),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How long the readiness check waits for the database.
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// The cluster as this node sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterStatus {
    /// `postgres` (a cluster) or `sqlite` (one node).
    pub backend: &'static str,
    /// Shards jobs hash into.
    pub shard_count: u32,
    /// This node's id.
    pub this_node: String,
    /// This node's lease lifetime.
    pub lease_ttl: Duration,
    /// Registered nodes, live ones first, then by id.
    pub nodes: Vec<NodeStatus>,
    /// Shards no live node holds right now (being handed over).
    pub unowned_shards: Vec<u32>,
}

/// One registered node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeStatus {
    /// Node id.
    pub id: String,
    /// Its HTTP address (empty on SQLite).
    pub http_addr: String,
    /// Whether its heartbeat is fresh.
    pub live: bool,
    /// Shards it holds unexpired leases on.
    pub shards: Vec<u32>,
    /// When it registered.
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat.
    pub heartbeat_at: DateTime<Utc>,
}

/// Whether this node can serve, check by check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    /// The database answered within 2 s.
    pub database: bool,
    /// The dispatcher has an open channel to the broker.
    pub broker: bool,
}

impl Readiness {
    /// Every check passed.
    pub fn is_ready(self) -> bool {
        self.database && self.broker
    }
}

/// This node's view. Cheap to share.
pub struct Node {
    backend: Backend,
    store: Arc<dyn Store>,
    ownership: Ownership,
    cluster: ClusterSettings,
    dispatch: DispatchHandle,
}

impl Node {
    /// The node of `ownership` over `backend`, with its lease settings and dispatcher.
    pub fn new(
        backend: Backend,
        ownership: Ownership,
        cluster: ClusterSettings,
        dispatch: DispatchHandle,
    ) -> Self {
        Self {
            store: backend.store(),
            backend,
            ownership,
            cluster,
            dispatch,
        }
    }

    /// Which node holds which shards: on PostgreSQL the node registry with each node's
    /// unexpired leases; on SQLite this one node with every shard.
    pub async fn cluster(&self, caller: &Caller) -> Result<ClusterStatus, NodeError> {
        caller.check(Action::ReadCluster, None)?;
        let ownership = &self.ownership;
        let (backend, mut nodes) = match &self.backend {
            Backend::Postgres(store) => {
                let rows = store.nodes(self.cluster.lease_ttl).await?;
                let nodes = rows
                    .into_iter()
                    .map(|n| NodeStatus {
                        id: n.id,
                        http_addr: n.http_addr,
                        live: n.live,
                        shards: n.shards,
                        started_at: n.started_at,
                        heartbeat_at: n.heartbeat_at,
                    })
                    .collect();
                ("postgres", nodes)
            }
            Backend::Sqlite(_) => {
                let now = Utc::now();
                let node = NodeStatus {
                    id: ownership.node().to_string(),
                    http_addr: String::new(),
                    live: true,
                    shards: ownership.current().shards().collect(),
                    started_at: now,
                    heartbeat_at: now,
                };
                ("sqlite", vec![node])
            }
        };
        nodes.sort_by(|a, b| b.live.cmp(&a.live).then_with(|| a.id.cmp(&b.id)));
        let owned: HashSet<u32> = nodes
            .iter()
            .filter(|n| n.live)
            .flat_map(|n| n.shards.iter().copied())
            .collect();
        let unowned_shards = (0..ownership.shard_count())
            .filter(|s| !owned.contains(s))
            .collect();
        Ok(ClusterStatus {
            backend,
            shard_count: ownership.shard_count(),
            this_node: ownership.node().to_string(),
            lease_ttl: self.cluster.lease_ttl,
            nodes,
            unowned_shards,
        })
    }

    /// Whether the database answers (within 2 s) and the dispatcher has a broker channel.
    pub async fn readiness(&self) -> Readiness {
        let database = matches!(
            tokio::time::timeout(PING_TIMEOUT, self.store.ping()).await,
            Ok(Ok(()))
        );
        Readiness {
            database,
            broker: self.dispatch.is_connected(),
        }
    }
}
