//! The cluster shape of the HTTP API (`GET /v1/cluster`): which node holds which shards.

use serde::{Deserialize, Serialize};

/// The cluster as the API shows it.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ClusterResponse {
    /// `postgres` (a cluster) or `sqlite` (one node).
    pub backend: String,
    /// Shards jobs hash into.
    pub shard_count: u32,
    /// The node that answered.
    pub this_node: String,
    /// Lease lifetime in seconds.
    pub lease_ttl_s: f64,
    /// Registered nodes, live first.
    pub nodes: Vec<NodeResponse>,
    /// Shards no live node holds right now (being handed over).
    pub unowned_shards: Vec<u32>,
}

/// One node.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeResponse {
    /// Node id.
    pub id: String,
    /// Its HTTP address.
    pub http_addr: String,
    /// Whether its heartbeat is fresh.
    pub live: bool,
    /// Shards it holds.
    pub shards: Vec<u32>,
    /// When it registered.
    pub started_at: String,
    /// Its last heartbeat.
    pub heartbeat_at: String,
}
