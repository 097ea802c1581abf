//! `/v1/jobs/{id}/runs` and `/v1/runs/{id}`: run history, read through
//! [`crate::app::Runs`].

use axum::{
    Json,
    extract::{Extension, Path, Query, State, rejection::QueryRejection},
};
use uuid::Uuid;

use super::{
    dto::{ListQuery, ListResponse, RunResponse, parse_run_cursor, run_cursor},
    error::{ApiError, ErrorCode},
    state::AppState,
};
use crate::{domain::access::Caller, store::RunPage};

/// Lists a job's runs, newest first, a page at a time.
#[utoipa::path(
    get, path = "/v1/jobs/{id}/runs", operation_id = "listJobRuns", tag = "runs",
    params(("id" = uuid::Uuid, Path, description = "The job id."), super::dto::ListQuery),
    responses((status = 200, description = "A page of runs.", body = ListResponse<RunResponse>), (status = 404, description = "No job with this id (`not_found`).", body = super::error::ErrorBody)),
)]
pub(super) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(job_id): Path<String>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<ListResponse<RunResponse>>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::new(ErrorCode::InvalidField, e.body_text()))?;
    let limit = query.limit()?;
    let before = query.cursor.as_deref().map(parse_run_cursor).transpose()?;
    let id = Uuid::parse_str(&job_id).map_err(|_| ApiError::job_not_found(&job_id))?;
    let runs = state
        .runs()
        .list(&caller, id, &RunPage { before, limit })
        .await?;
    let next = (runs.len() == limit as usize)
        .then(|| runs.last().map(run_cursor))
        .flatten();
    Ok(Json(ListResponse {
        items: runs.iter().map(RunResponse::from).collect(),
        next,
    }))
}

/// One run, with the view of its whole fire (`items`, `fire_state`).
/// Reads a run, with every item of its fire.
#[utoipa::path(
    get, path = "/v1/runs/{id}", operation_id = "getRun", tag = "runs",
    params(("id" = uuid::Uuid, Path, description = "The run id.")),
    responses(
        (status = 200, description = "The run.", body = RunResponse),
        (status = 404, description = "No run with this id (`not_found`).", body = super::error::ErrorBody),
    ),
)]
pub(super) async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(run_id): Path<String>,
) -> Result<Json<RunResponse>, ApiError> {
    let id = Uuid::parse_str(&run_id).map_err(|_| ApiError::run_not_found(&run_id))?;
    let fire = state.runs().get(&caller, id).await?;
    Ok(Json(RunResponse::from(&fire.run).with_fire(&fire.items)))
}
