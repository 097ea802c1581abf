//! `GET /v1/cluster`: which node holds which shards. On PostgreSQL this is the node
//! registry with each node's unexpired leases; on SQLite, this one node with every shard.

use axum::{Json, extract::State};
use chrono::Utc;

use super::{
    AppState,
    dto::{ClusterResponse, NodeResponse},
    error::ApiError,
};
use crate::{domain::timestamp::timestamp, store::Backend};

pub(super) async fn status(
    State(state): State<AppState>,
) -> Result<Json<ClusterResponse>, ApiError> {
    let inner = &state.inner;
    let ownership = &inner.ownership;
    let (backend, mut nodes) = match &inner.backend {
        Backend::Postgres(store) => {
            let rows = store.nodes(inner.cluster.lease_ttl).await?;
            let nodes = rows
                .into_iter()
                .map(|n| NodeResponse {
                    id: n.id,
                    http_addr: n.http_addr,
                    live: n.live,
                    shards: n.shards,
                    started_at: timestamp(n.started_at),
                    heartbeat_at: timestamp(n.heartbeat_at),
                })
                .collect();
            ("postgres", nodes)
        }
        Backend::Sqlite(_) => {
            let now = timestamp(Utc::now());
            let node = NodeResponse {
                id: ownership.node().to_string(),
                http_addr: String::new(),
                live: true,
                shards: ownership.current().shards().collect(),
                started_at: now.clone(),
                heartbeat_at: now,
            };
            ("sqlite", vec![node])
        }
    };
    nodes.sort_by(|a, b| b.live.cmp(&a.live).then_with(|| a.id.cmp(&b.id)));
    let owned: std::collections::HashSet<u32> = nodes
        .iter()
        .filter(|n| n.live)
        .flat_map(|n| n.shards.iter().copied())
        .collect();
    let unowned_shards = (0..ownership.shard_count())
        .filter(|s| !owned.contains(s))
        .collect();
    Ok(Json(ClusterResponse {
        backend: backend.to_string(),
        shard_count: ownership.shard_count(),
        this_node: ownership.node().to_string(),
        lease_ttl_s: inner.cluster.lease_ttl.as_secs_f64(),
        nodes,
        unowned_shards,
    }))
}
