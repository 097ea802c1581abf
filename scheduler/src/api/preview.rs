//! `GET /v1/jobs/{id}/preview` and `POST /v1/schedules/preview`: the next fires of a
//! stored job or of a schedule not yet saved, read through [`crate::app::Jobs`].

use axum::{
    Json,
    body::Body,
    extract::{Extension, Path, Query, State, rejection::QueryRejection},
};

use super::{
    body::{parse_json, read_body},
    dto::{PreviewQuery, PreviewResponse, SchedulePreviewRequest},
    error::{ApiError, ErrorCode},
    state::AppState,
};
use crate::domain::access::Caller;

/// The job's next fires, in its time zone.
#[utoipa::path(
    get, path = "/v1/jobs/{id}/preview", operation_id = "previewJob", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "The job id."), super::dto::PreviewQuery),
    responses((status = 200, description = "The next fires.", body = PreviewResponse), (status = 404, description = "No job with this id (`not_found`).", body = super::error::ErrorBody)),
)]
pub(super) async fn job(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    query: Result<Query<PreviewQuery>, QueryRejection>,
) -> Result<Json<PreviewResponse>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::new(ErrorCode::InvalidField, e.body_text()))?;
    let id = uuid::Uuid::parse_str(&id).map_err(|_| ApiError::job_not_found(&id))?;
    let (job, preview) = state.jobs().preview(&caller, id, query.count).await?;
    Ok(Json(PreviewResponse::new(&preview, Some(job.spec.paused))))
}

/// The next fires of a schedule not saved as a job.
#[utoipa::path(
    post, path = "/v1/schedules/preview", operation_id = "previewSchedule", tag = "jobs",
    request_body = SchedulePreviewRequest,
    responses((status = 200, description = "The next fires.", body = PreviewResponse)),
)]
pub(super) async fn schedule(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> Result<Json<PreviewResponse>, ApiError> {
    let bytes = read_body(body, state.body_limit()).await?;
    let request: SchedulePreviewRequest = parse_json(&bytes)?;
    let window = request.window()?;
    let preview =
        state
            .jobs()
            .preview_schedule(&caller, &request.schedule, &window, request.count)?;
    Ok(Json(PreviewResponse::new(&preview, None)))
}
