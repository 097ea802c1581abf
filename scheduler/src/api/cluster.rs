//! `GET /v1/cluster`: which node holds which shards. On PostgreSQL this is the node
//! registry with each node's unexpired leases; on SQLite, this one node with every shard.

use super::{
    dto::{ClusterResponse, NodeResponse},
    error::ApiError,
    state::AppState,
};
use crate::domain::access::Caller;
use crate::domain::timestamp::timestamp;
use axum::{
    Json,
    extract::{Extension, State},
};

/// Which node holds which shards.
#[utoipa::path(
    get, path = "/v1/cluster", operation_id = "getCluster", tag = "operations",
    responses((status = 200, description = "The cluster.", body = ClusterResponse)),
)]
pub(super) async fn status(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<ClusterResponse>, ApiError> {
    let status = state.node().cluster(&caller).await?;
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
