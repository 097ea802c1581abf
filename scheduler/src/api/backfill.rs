//! `POST /v1/jobs/{id}/backfill`: records a job's past fires in a range, through
//! [`crate::app::Jobs::backfill`].

use axum::{
    Json,
    body::Body,
    extract::{Extension, Path, State},
    http::StatusCode,
    response::IntoResponse,
};
use chrono::Utc;

use super::{
    body::{parse_json, read_body},
    dto::{BackfillRequestBody, BackfillResponse, timestamp},
    error::ApiError,
    state::AppState,
};
use crate::{
    app::Backfill,
    domain::{access::Caller, backfill::BackfillRequest},
};

#[utoipa::path(
    post, path = "/v1/jobs/{id}/backfill", operation_id = "backfillJob", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "The job id.")),
    request_body = BackfillRequestBody,
    responses(
        (status = 202, description = "The range's fires are recorded and dispatched at the rate.", body = BackfillResponse),
        (status = 200, description = "A dry run: the range's fires counted, nothing recorded.", body = BackfillResponse),
        (status = 404, description = "No job with this id (`not_found`).", body = super::error::ErrorBody),
        (status = 409, description = "`overlap: forbid` and the job has an unfinished run (`job_busy`).", body = super::error::ErrorBody),
    ),
)]
pub(super) async fn backfill(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let id = uuid::Uuid::parse_str(&id).map_err(|_| ApiError::job_not_found(&id))?;
    let bytes = read_body(body, state.body_limit()).await?;
    let body: BackfillRequestBody = parse_json(&bytes)?;
    let request =
        BackfillRequest::check(&body.from, &body.to, body.rate, body.overlap, Utc::now())?;
    let done = state
        .jobs()
        .backfill(&caller, id, request, body.dry_run)
        .await?;
    let status = if done.dry_run {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(response(&done))))
}

fn response(done: &Backfill) -> BackfillResponse {
    BackfillResponse {
        job_id: done.job_id.to_string(),
        from: timestamp(done.request.from),
        to: timestamp(done.request.to),
        rate: done.request.rate,
        overlap: done.request.overlap,
        dry_run: done.dry_run,
        fires: done.fire_times.len(),
        first_fire: done.fire_times.first().map(|t| timestamp(*t)),
        last_fire: done.fire_times.last().map(|t| timestamp(*t)),
        recorded: done.recorded,
        present: done.present,
        runs: done.runs,
        last_due_at: done.last_due_at.map(timestamp),
    }
}
