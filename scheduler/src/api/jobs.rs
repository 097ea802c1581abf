//! `/v1/jobs`: create, list, read, change, delete, pause, resume and trigger jobs. Each
//! handler parses the request, calls [`crate::app::Jobs`] and shapes the answer.

use axum::{
    Json,
    body::Body,
    extract::{Extension, Path, Query, State, rejection::QueryRejection},
    http::{HeaderMap, StatusCode, header},
    response::IntoResponse,
};
use serde_json::Value;
use uuid::Uuid;

use super::{
    body::{from_value, parse_json, read_body, read_no_arguments},
    dto::{JobListQuery, JobRequest, JobResponse, ListResponse, RunResponse},
    error::{ApiError, ErrorCode},
    state::AppState,
};
use crate::domain::{Job, access::Caller};

/// Creates a job.
#[utoipa::path(
    post, path = "/v1/jobs", operation_id = "createJob", tag = "jobs",
    request_body = super::dto::JobRequest,
    responses(
        (status = 201, description = "The job, as stored.", body = JobResponse,
            headers(("Location" = String, description = "The job's path."))),
        (status = 403, description = "The token may not change jobs of this app, or the change would take the app over a quota (`forbidden`, `quota_exceeded`).", body = super::error::ErrorBody),
        (status = 409, description = "Another job has this app and name (`duplicate_name`).", body = super::error::ErrorBody),
    ),
)]
pub(super) async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let bytes = read_body(body, state.body_limit()).await?;
    let request: JobRequest = parse_json(&bytes)?;
    let spec = request.into_spec(state.payload_limit())?;
    let job = state.jobs().create(&caller, spec).await?;
    let location = format!("/v1/jobs/{}", job.id);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(JobResponse::from(&job)),
    ))
}

/// Lists jobs a page at a time: filtered, in the order asked (creation order by
/// default), each page from the previous one's cursor.
#[utoipa::path(
    get, path = "/v1/jobs", operation_id = "listJobs", tag = "jobs",
    params(JobListQuery),
    responses(
        (status = 200, description = "A page of jobs.", body = ListResponse<JobResponse>),
        (status = 400, description = "A bad parameter, named as `field` (`invalid_field`); a cursor of a list in another order is refused (`cursor`).", body = super::error::ErrorBody),
    ),
)]
pub(super) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<JobListQuery>, QueryRejection>,
) -> Result<Json<ListResponse<JobResponse>>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::new(ErrorCode::InvalidField, e.body_text()))?;
    let filter = query.to_filter()?;
    let jobs = state.jobs().list(&caller, &filter).await?;
    let next = (jobs.len() == filter.limit as usize)
        .then(|| {
            jobs.last()
                .map(|j| filter.sort.position_of(j).cursor(filter.sort))
        })
        .flatten();
    Ok(Json(ListResponse {
        items: jobs.iter().map(JobResponse::from).collect(),
        next,
    }))
}

/// Reads a job.
#[utoipa::path(
    get, path = "/v1/jobs/{id}", operation_id = "getJob", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "The job id.")),
    responses((status = 200, description = "The job.", body = JobResponse), (status = 404, description = "No job with this id (`not_found`).", body = super::error::ErrorBody)),
)]
pub(super) async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<JobResponse>, ApiError> {
    let job = state.jobs().get(&caller, parse_id(&id)?).await?;
    Ok(Json(JobResponse::from(&job)))
}

/// Replaces the fields present in the body; the rest keep their values. Read-only fields
/// (`id`, `next_fire_at`, `created_at`, `updated_at`) are ignored, so a job read with GET
/// can be edited and sent back. The job version read before may be named as `"version"`
/// in the body or an `If-Match` header; the change then fails with `version_conflict` if
/// the job changed since. Without a version the change applies to whatever is current.
#[utoipa::path(
    patch, path = "/v1/jobs/{id}", operation_id = "updateJob", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "The job id."),
        ("If-Match" = Option<String>, Header, description = "The job version read before, e.g. `\"3\"`.")),
    responses(
        (status = 200, description = "The job, changed.", body = JobResponse),
        (status = 404, description = "No job with this id (`not_found`).", body = super::error::ErrorBody),
        (status = 409, description = "The job changed since `version` (`version_conflict`), or another job has the new app and name (`duplicate_name`).", body = super::error::ErrorBody),
    ),
)]
pub(super) async fn patch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<JobResponse>, ApiError> {
    let bytes = read_body(body, state.body_limit()).await?;
    let mut changes = match parse_json::<Value>(&bytes)? {
        Value::Object(map) => map,
        _ => {
            return Err(ApiError::field(
                ErrorCode::InvalidField,
                "body",
                "expected a JSON object of the fields to change",
            ));
        }
    };
    let expected = expected_version(changes.remove("version"), &headers)?;
    for read_only in ["id", "next_fire_at", "finished", "created_at", "updated_at"] {
        changes.remove(read_only);
    }
    let payload_limit = state.payload_limit();
    let stored = state
        .jobs()
        .update(&caller, parse_id(&id)?, expected, |current: &Job| {
            let mut merged = match serde_json::to_value(JobRequest::from_spec(&current.spec)) {
                Ok(Value::Object(map)) => map,
                _ => unreachable!("a job request serialises to an object"),
            };
            merged.extend(changes.clone());
            let request: JobRequest = from_value(Value::Object(merged))?;
            request.into_spec(payload_limit).map_err(ApiError::from)
        })
        .await?;
    Ok(Json(JobResponse::from(&stored)))
}

/// Deletes a job (its runs stay readable by run id until pruned).
#[utoipa::path(
    delete, path = "/v1/jobs/{id}", operation_id = "deleteJob", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "The job id.")),
    responses((status = 204, description = "Deleted."), (status = 404, description = "No job with this id (`not_found`).", body = super::error::ErrorBody)),
)]
pub(super) async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.jobs().delete(&caller, parse_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Pauses a job.
#[utoipa::path(
    post, path = "/v1/jobs/{id}/pause", operation_id = "pauseJob", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "The job id.")),
    responses((status = 200, description = "The job, paused.", body = JobResponse), (status = 404, description = "No job with this id (`not_found`).", body = super::error::ErrorBody)),
)]
pub(super) async fn pause(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Body,
) -> Result<Json<JobResponse>, ApiError> {
    read_no_arguments(body, state.body_limit()).await?;
    let job = state.jobs().pause(&caller, parse_id(&id)?).await?;
    Ok(Json(JobResponse::from(&job)))
}

/// Resumes a job.
#[utoipa::path(
    post, path = "/v1/jobs/{id}/resume", operation_id = "resumeJob", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "The job id.")),
    responses((status = 200, description = "The job, resumed.", body = JobResponse), (status = 404, description = "No job with this id (`not_found`).", body = super::error::ErrorBody)),
)]
pub(super) async fn resume(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Body,
) -> Result<Json<JobResponse>, ApiError> {
    read_no_arguments(body, state.body_limit()).await?;
    let job = state.jobs().resume(&caller, parse_id(&id)?).await?;
    Ok(Json(JobResponse::from(&job)))
}

/// Fires the job now (even when paused), as runs with trigger `manual` (one per item, see
/// [`crate::domain::Target::items`]); answers the first item with the whole fire's
/// `items`. A zone job with no zone to run answers `unavailable`.
#[utoipa::path(
    post, path = "/v1/jobs/{id}/trigger", operation_id = "triggerJob", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "The job id.")),
    responses(
        (status = 202, description = "The fire's first run, with the whole fire's `items`.", body = RunResponse),
        (status = 404, description = "No job with this id (`not_found`).", body = super::error::ErrorBody),
        (status = 503, description = "A zone job with no zone to run, or a dependency unavailable (`unavailable`).", body = super::error::ErrorBody),
    ),
)]
pub(super) async fn trigger(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    read_no_arguments(body, state.body_limit()).await?;
    let fire = state.jobs().trigger(&caller, parse_id(&id)?).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(RunResponse::from(&fire.run).with_fire(&fire.items)),
    ))
}

/// A job id from the path; one that is not a UUID names no job.
fn parse_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id).map_err(|_| ApiError::job_not_found(id))
}

fn expected_version(body: Option<Value>, headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    if let Some(value) = body {
        return value.as_i64().map(Some).ok_or_else(|| {
            ApiError::field(
                ErrorCode::InvalidField,
                "version",
                "version must be an integer",
            )
        });
    }
    let Some(tag) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    tag.to_str()
        .ok()
        .map(|t| t.trim().trim_start_matches("W/").trim_matches('"'))
        .and_then(|t| t.parse().ok())
        .map(Some)
        .ok_or_else(|| {
            ApiError::field(
                ErrorCode::InvalidField,
                "If-Match",
                "If-Match must carry the job version, e.g. \"3\"",
            )
        })
}
