//! `GET /v1/consumers`: the consumer instances `chimed` has heard from and, per group,
//! the live ones and the work waiting for them. The listing itself is
//! [`crate::app::Consumers`]; this handler parses the query and shapes the answer.

use axum::{
    Json,
    extract::{Extension, Query, State, rejection::QueryRejection},
};
use chrono::Utc;

use super::{
    dto::{ConsumerGroupResponse, ConsumerResponse, ConsumersQuery, ConsumersResponse},
    error::{ApiError, ErrorCode},
    state::AppState,
};
use crate::{app, domain::access::Caller, domain::timestamp::timestamp};

/// Consumer instances and groups (of the groups the token's apps' jobs target).
#[utoipa::path(
    get, path = "/v1/consumers", operation_id = "listConsumers", tag = "operations",
    params(super::dto::ConsumersQuery),
    responses((status = 200, description = "Instances and groups.", body = ConsumersResponse)),
)]
pub(super) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<ConsumersQuery>, QueryRejection>,
) -> Result<Json<ConsumersResponse>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::new(ErrorCode::InvalidField, e.body_text()))?;
    let include_stale = match query.stale.as_deref() {
        None | Some("exclude") => false,
        Some("include") => true,
        Some(other) => {
            return Err(ApiError::field(
                ErrorCode::InvalidField,
                "stale",
                format!("stale {other:?} is not include or exclude"),
            ));
        }
    };
    // A group that breaks the naming rule names no group (and a NUL in it is one the
    // database would refuse to compare), as for a job listing's `app`.
    if let Some(group) = &query.group {
        crate::domain::job::validate_name("group", group)?;
    }
    let query = app::ConsumersQuery {
        group: query.group,
        include_stale,
    };
    let status = state.consumers().list(&caller, &query, Utc::now()).await?;
    Ok(Json(ConsumersResponse {
        instances: status
            .instances
            .into_iter()
            .map(|status| {
                let i = status.instance;
                ConsumerResponse {
                    instance: i.instance,
                    group: i.group,
                    zone: i.zone,
                    broadcast: i.broadcast,
                    version: i.version,
                    first_seen: timestamp(i.first_seen),
                    last_seen: timestamp(i.last_seen),
                    live: status.live,
                    running: i.running,
                }
            })
            .collect(),
        groups: status
            .groups
            .into_iter()
            .map(|g| ConsumerGroupResponse {
                group: g.group,
                live_consumers: g.live_consumers,
                queued: g.queued,
                running: g.running,
                unattended: g.unattended,
            })
            .collect(),
    }))
}
