//! `GET /v1/runs`: runs searched across jobs, newest fire first, filtered and paged,
//! read through [`crate::app::Runs::search`].

use axum::{
    Json,
    extract::{Extension, Query, State, rejection::QueryRejection},
};

use super::{
    dto::{ListResponse, RunResponse, RunSearchQuery, run_cursor},
    error::{ApiError, ErrorCode},
    state::AppState,
};
use crate::domain::access::Caller;

#[utoipa::path(
    get, path = "/v1/runs", operation_id = "searchRuns", tag = "runs",
    params(RunSearchQuery),
    responses((status = 200, description = "A page of runs across jobs, newest fire first.", body = ListResponse<RunResponse>)),
)]
pub(super) async fn search(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<RunSearchQuery>, QueryRejection>,
) -> Result<Json<ListResponse<RunResponse>>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::new(ErrorCode::InvalidField, e.body_text()))?;
    let filter = query.to_filter()?;
    let runs = state.runs().search(&caller, &filter).await?;
    let next = (runs.len() == filter.limit as usize)
        .then(|| runs.last().map(run_cursor))
        .flatten();
    Ok(Json(ListResponse {
        items: runs.iter().map(RunResponse::from).collect(),
        next,
    }))
}
