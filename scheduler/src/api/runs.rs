//! `/v1/jobs/{id}/runs` and `/v1/runs/{id}`: run history.

use axum::{
    Json,
    extract::{Path, Query, State, rejection::QueryRejection},
};
use uuid::Uuid;

use super::{
    AppState,
    dto::{ListQuery, ListResponse, RunResponse, parse_run_cursor, run_cursor},
    error::{ApiError, ErrorCode},
};
use crate::store::RunPage;

pub(super) async fn list(
    State(state): State<AppState>,
    Path(job_id): Path<String>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<ListResponse<RunResponse>>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::new(ErrorCode::InvalidField, e.body_text()))?;
    let limit = query.limit()?;
    let before = query.cursor.as_deref().map(parse_run_cursor).transpose()?;
    let id = Uuid::parse_str(&job_id).map_err(|_| ApiError::job_not_found(&job_id))?;
    if state.store().get_job(id).await?.is_none() {
        return Err(ApiError::job_not_found(&job_id));
    }
    let runs = state
        .store()
        .list_runs(id, &RunPage { before, limit })
        .await?;
    let next = (runs.len() == limit as usize)
        .then(|| runs.last().map(run_cursor))
        .flatten();
    Ok(Json(ListResponse {
        items: runs.iter().map(RunResponse::from).collect(),
        next,
    }))
}

pub(super) async fn get(
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<RunResponse>, ApiError> {
    let not_found = || ApiError::new(ErrorCode::NotFound, format!("no run with id {run_id:?}"));
    let id = Uuid::parse_str(&run_id).map_err(|_| not_found())?;
    let run = state.store().get_run(id).await?.ok_or_else(not_found)?;
    Ok(Json(RunResponse::from(&run)))
}
