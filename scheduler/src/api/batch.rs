//! `POST /v1/jobs/batch`: bulk job import, all or none. Every item is read and checked
//! as `POST /v1/jobs` reads one ([`JobRequest::into_spec`], then the jobs service's
//! checks); a refusal names every job at fault, by index, and stores nothing.

use axum::{
    Json,
    body::Body,
    extract::{Extension, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use chrono::Utc;
use serde::Serialize;

use super::{
    body::{BATCH_BODY_LIMIT, from_value, parse_json, read_body},
    dto::{
        BatchItemError, JobBatchRequest, JobBatchResponse, JobRequest, JobResponse,
        batch::{MAX_LISTED_ERRORS, item_field},
    },
    error::{ApiError, ErrorCode},
    state::AppState,
};
use crate::{
    app::jobs::{BatchError, check_batch_size, check_new},
    domain::access::Caller,
};

/// Creates jobs, all or none.
#[utoipa::path(
    post, path = "/v1/jobs/batch", operation_id = "createJobBatch", tag = "jobs",
    request_body = JobBatchRequest,
    responses(
        (status = 201, description = "The jobs, as stored, in the order sent.", body = JobBatchResponse),
        (status = 400, description = "Refused: every job at fault, by index; nothing stored.", body = BatchErrorBody),
        (status = 403, description = "Refused: the token may not change jobs of an app, or a quota (`forbidden`, `quota_exceeded`).", body = BatchErrorBody),
        (status = 409, description = "Refused: a duplicate name (`duplicate_name`).", body = BatchErrorBody),
        (status = 413, description = "A payload over the limit (`payload_too_large`).", body = BatchErrorBody),
    ),
)]
pub(super) async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> Result<impl IntoResponse, Refusal> {
    let limit = state.body_limit().max(BATCH_BODY_LIMIT);
    let bytes = read_body(body, limit).await?;
    let request: JobBatchRequest = parse_json(&bytes)?;
    drop(bytes);
    check_batch_size(request.jobs.len()).map_err(refusal)?;
    let payload_limit = state.payload_limit();
    let mut specs = Vec::with_capacity(request.jobs.len());
    let mut refused = Vec::new();
    for (index, item) in request.jobs.into_iter().enumerate() {
        let spec = from_value::<JobRequest>(item)
            .and_then(|job| job.into_spec(payload_limit).map_err(ApiError::from));
        match spec {
            Ok(spec) => specs.push((index, spec)),
            Err(error) => refused.push((index, error)),
        }
    }
    if !refused.is_empty() {
        // The jobs that parsed are checked too, so the refusal lists everything at fault.
        let checked = check_new(specs.iter().map(|(i, spec)| (*i, spec)), Utc::now());
        refused.extend(checked.into_iter().map(|(i, e)| (i, ApiError::from(e))));
        refused.sort_by_key(|(index, _)| *index);
        return Err(Refusal::Items(refused));
    }
    let specs = specs.into_iter().map(|(_, spec)| spec).collect();
    let jobs = state
        .jobs()
        .create_many(&caller, specs)
        .await
        .map_err(refusal)?;
    Ok((
        StatusCode::CREATED,
        Json(JobBatchResponse {
            items: jobs.iter().map(JobResponse::from).collect(),
        }),
    ))
}

/// How the jobs service's refusal of a batch answers: refused jobs as a list, a batch
/// refused as a whole (its size, the store) as any request.
fn refusal(error: BatchError) -> Refusal {
    match error {
        BatchError::Items(items) => Refusal::Items(
            items
                .into_iter()
                .map(|(i, e)| (i, ApiError::from(e)))
                .collect(),
        ),
        BatchError::Size(_) => Refusal::Whole(ApiError::field(
            ErrorCode::InvalidField,
            "jobs",
            error.to_string(),
        )),
        BatchError::Failed(e) => Refusal::Whole(e.into()),
    }
}

/// Why a batch was refused.
pub(super) enum Refusal {
    /// The request as a whole: the usual error body.
    Whole(ApiError),
    /// These jobs, by index in `jobs` (ascending, at least one): the first one's error
    /// as `error` (and its status), with every one's in `errors` (up to
    /// [`MAX_LISTED_ERRORS`]) and their count in `refused`.
    Items(Vec<(usize, ApiError)>),
}

impl From<ApiError> for Refusal {
    fn from(error: ApiError) -> Self {
        Self::Whole(error)
    }
}

/// A refused batch: the first refused job's error, then every refused job by index.
/// A refusal of the request as a whole (bad JSON, no jobs, too many) has `error` only.
#[derive(Serialize, utoipa::ToSchema)]
pub struct BatchErrorBody {
    /// The first refused job's error, or the request's.
    error: ApiError,
    /// The refused jobs, by index (at most 100); absent when the request as a whole is.
    #[serde(default)]
    errors: Vec<BatchItemError>,
    /// How many jobs were refused in all; absent when the request as a whole is.
    #[serde(default)]
    refused: usize,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let items = match self {
            Refusal::Whole(error) => return error.into_response(),
            Refusal::Items(items) => items,
        };
        let Some(code) = items.first().map(|(_, error)| error.code) else {
            return ApiError::internal().into_response();
        };
        let refused = items.len();
        let errors: Vec<BatchItemError> = items
            .into_iter()
            .take(MAX_LISTED_ERRORS)
            .map(|(index, error)| BatchItemError {
                index,
                code: code_name(error.code),
                field: Some(item_field(index, error.field.as_deref())),
                message: error.message,
            })
            .collect();
        let first = &errors[0];
        let error = ApiError {
            code,
            message: format!(
                "jobs[{}]: {} ({refused} refused; nothing was stored)",
                first.index, first.message
            ),
            field: first.field.clone(),
        };
        let body = BatchErrorBody {
            error,
            errors,
            refused,
        };
        (code.status(), Json(body)).into_response()
    }
}

/// The wire name of `code`, as an error body spells it.
fn code_name(code: ErrorCode) -> String {
    match serde_json::to_value(code) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "internal".into(),
    }
}
