//! `GET /v1/cluster`: which node holds which shards. On PostgreSQL this is the node
//! registry with each node's unexpired leases; on SQLite, this one node with every shard.

use axum::{Json, extract::State};
use serde::{Deserialize, Serialize};

use super::{dto::timestamp, error::ApiError, state::AppState};

/// The cluster as the API shows it.
#[derive(Debug, Serialize, Deserialize)]
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
#[derive(Debug, Serialize, Deserialize)]
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

pub(super) async fn status(
    State(state): State<AppState>,
) -> Result<Json<ClusterResponse>, ApiError> {
    let status = state.node().cluster().await?;
    Ok(Json(ClusterResponse {
        backend: status.backend.to_string(),
        shard_count: status.shard_count,
        this_node: status.this_node,
        lease_ttl_s: status.lease_ttl.as_secs_f64(),
        nodes: status
            .nodes
            .into_iter()
            .map(|n| NodeResponse {
                id: n.id,
                http_addr: n.http_addr,
                live: n.live,
                shards: n.shards,
                started_at: timestamp(n.started_at),
                heartbeat_at: timestamp(n.heartbeat_at),
            })
            .collect(),
        unowned_shards: status.unowned_shards,
    }))
}
