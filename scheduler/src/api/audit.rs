//! `GET /v1/audit` (the trail, newest first, filtered and paged) and
//! `GET /v1/jobs/{id}/versions` (a job's definitions), read through [`crate::app::Audit`].

use axum::{
    Json,
    extract::{Extension, Path, Query, State, rejection::QueryRejection},
};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    dto::{AuditEntryResponse, AuditListQuery, ListQuery, ListResponse, parse_run_cursor},
    error::{ApiError, ErrorCode},
    state::AppState,
};
use crate::domain::{access::Caller, audit::AuditQuery};

/// The audit trail, newest first, filtered to the token's apps.
#[utoipa::path(
    get, path = "/v1/audit", operation_id = "listAudit", tag = "security",
    params(AuditListQuery),
    responses((status = 200, description = "A page of audit entries.", body = ListResponse<AuditEntryResponse>)),
)]
pub(super) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<AuditListQuery>, QueryRejection>,
) -> Result<Json<ListResponse<AuditEntryResponse>>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::new(ErrorCode::InvalidField, e.body_text()))?;
    let limit = ListQuery {
        limit: query.limit,
        ..ListQuery::default()
    }
    .limit()?;
    let before = query.cursor.as_deref().map(parse_run_cursor).transpose()?;
    let entries = state
        .audit()
        .list(
            &caller,
            &AuditQuery {
                actor: query.actor,
                action: query.action,
                target: query.target,
                apps: query.app.map(|app| vec![app]),
                since: instant("since", query.since.as_deref())?,
                until: instant("until", query.until.as_deref())?,
                before,
                limit,
            },
        )
        .await?;
    let next = (entries.len() == limit as usize)
        .then(|| {
            entries
                .last()
                .map(|e| format!("{}_{}", e.at.timestamp_millis(), e.id))
        })
        .flatten();
    Ok(Json(ListResponse {
        items: entries.iter().map(AuditEntryResponse::from).collect(),
        next,
    }))
}

/// A job's changes, newest first (including its deletion).
#[utoipa::path(
    get, path = "/v1/jobs/{id}/versions", operation_id = "listJobVersions", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "The job id.")),
    responses((status = 200, description = "The job's audit entries; `next` is always null.", body = ListResponse<AuditEntryResponse>), (status = 404, description = "No job with this id (`not_found`).", body = super::error::ErrorBody)),
)]
pub(super) async fn versions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<ListResponse<AuditEntryResponse>>, ApiError> {
    let id = Uuid::parse_str(&id).map_err(|_| ApiError::job_not_found(&id))?;
    let entries = state.audit().versions(&caller, id, 1000).await?;
    if entries.is_empty() {
        return Err(ApiError::job_not_found(&id.to_string()));
    }
    Ok(Json(ListResponse {
        items: entries.iter().map(AuditEntryResponse::from).collect(),
        next: None,
    }))
}

fn instant(field: &str, value: Option<&str>) -> Result<Option<DateTime<Utc>>, ApiError> {
    value
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| {
                    ApiError::field(
                        ErrorCode::InvalidField,
                        field,
                        format!("{field} must be an RFC 3339 instant: {e}"),
                    )
                })
        })
        .transpose()
}
