//! `GET /v1/stats/runs`: statistics of the runs fired in a recent window, cluster-wide,
//! read through [`crate::app::Runs::stats`] (which narrows them to the caller's apps and
//! keeps each answer for 5 s).

use axum::{
    Json,
    extract::{Extension, Query, State, rejection::QueryRejection},
};

use super::{
    dto::{RunStatsQuery, RunStatsResponse},
    error::{ApiError, ErrorBody, ErrorCode},
    state::AppState,
};
use crate::domain::access::Caller;

#[utoipa::path(
    get, path = "/v1/stats/runs", operation_id = "getRunStats", tag = "runs",
    params(RunStatsQuery),
    responses(
        (status = 200, description = "Run statistics of the window, bucket by bucket, oldest first.", body = RunStatsResponse),
        (status = 403, description = "The token may not read runs of the app named.", body = ErrorBody),
    ),
)]
pub(super) async fn stats(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<RunStatsQuery>, QueryRejection>,
) -> Result<Json<RunStatsResponse>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::new(ErrorCode::InvalidField, e.body_text()))?;
    let (minutes, app) = query.parse()?;
    let stats = state.runs().stats(&caller, minutes, app.as_deref()).await?;
    Ok(Json(RunStatsResponse::from(stats.as_ref())))
}
