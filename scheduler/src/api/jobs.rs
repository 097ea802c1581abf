//! `/v1/jobs`: create, list, read, change, delete, pause, resume and trigger jobs.

use std::future::Future;

use axum::{
    Json,
    body::Body,
    extract::{Path, Query, State, rejection::QueryRejection},
    http::{HeaderMap, StatusCode, header},
    response::IntoResponse,
};
use chrono::{DateTime, Utc};
use serde_json::Value;
use tracing::error;
use uuid::Uuid;

use super::{
    AppState,
    body::{from_value, parse_json, read_body, read_no_arguments},
    dto::{JobRequest, JobResponse, ListQuery, ListResponse, RunResponse},
    error::{ApiError, ErrorCode},
};
use crate::{
    domain::{Job, JobSpec, LiveZones, RunTrigger, job::reschedules},
    store::{JobPage, StoreError, live_since, needs_live_zones},
    telemetry,
};

pub(super) async fn create(
    State(state): State<AppState>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    let bytes = read_body(body, state.body_limit()).await?;
    let request: JobRequest = parse_json(&bytes)?;
    let now = Utc::now();
    let spec = request.into_spec(state.inner.payload_limit)?;
    spec.settings.schedule.check_fires(now)?;
    let job = Job::new(spec, now);
    state.store().insert_job(&job).await?;
    state.inner.timer.job_changed(job.id);
    state.declare_target(&job).await;
    let location = format!("/v1/jobs/{}", job.id);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(JobResponse::from(&job)),
    ))
}

pub(super) async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<ListResponse<JobResponse>>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::new(ErrorCode::InvalidField, e.body_text()))?;
    let limit = query.limit()?;
    // An app that breaks the naming rule names no job (and a NUL in it is one the
    // database would refuse to compare).
    if let Some(app) = &query.app {
        crate::domain::job::validate_name("app", app)?;
    }
    let after = query
        .cursor
        .as_deref()
        .map(|c| {
            Uuid::parse_str(c).map_err(|_| {
                ApiError::field(
                    ErrorCode::InvalidField,
                    "cursor",
                    format!("invalid cursor {c:?}"),
                )
            })
        })
        .transpose()?;
    let jobs = state
        .store()
        .list_jobs(&JobPage {
            app: query.app.clone(),
            after,
            limit,
        })
        .await?;
    let next = (jobs.len() == limit as usize)
        .then(|| jobs.last().map(|j| j.id.to_string()))
        .flatten();
    Ok(Json(ListResponse {
        items: jobs.iter().map(JobResponse::from).collect(),
        next,
    }))
}

pub(super) async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<JobResponse>, ApiError> {
    Ok(Json(JobResponse::from(&load(&state, &id).await?)))
}

/// Replaces the fields present in the body; the rest keep their values. Read-only fields
/// (`id`, `next_fire_at`, `created_at`, `updated_at`) are ignored, so a job read with GET
/// can be edited and sent back. The job version read before may be named as `"version"`
/// in the body or an `If-Match` header; the change then fails with `version_conflict` if
/// the job changed since. Without a version the change applies to whatever is current.
pub(super) async fn patch(
    State(state): State<AppState>,
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
    for read_only in ["id", "next_fire_at", "created_at", "updated_at"] {
        changes.remove(read_only);
    }
    // Without a version, a concurrent change is not the client's conflict: apply the
    // patch again over the newer job.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let current = load(&state, &id).await?;
        let mut merged = match serde_json::to_value(JobRequest::from_spec(&current.spec)) {
            Ok(Value::Object(map)) => map,
            _ => unreachable!("a job request serialises to an object"),
        };
        merged.extend(changes.clone());
        let request: JobRequest = from_value(Value::Object(merged))?;
        let spec = request.into_spec(state.inner.payload_limit)?;
        if spec.settings.schedule != current.spec.settings.schedule {
            spec.settings.schedule.check_fires(Utc::now())?;
        }
        let target_changed = spec.settings.target != current.spec.settings.target;
        match change(&state, &current, expected.unwrap_or(current.version), spec).await {
            Ok(stored) => {
                if target_changed {
                    state.declare_target(&stored).await;
                }
                return Ok(Json(JobResponse::from(&stored)));
            }
            Err(error)
                if error.code == ErrorCode::VersionConflict
                    && expected.is_none()
                    && attempts < 3 => {}
            Err(error) => return Err(error),
        }
    }
}

pub(super) async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let uuid = parse_id(&id)?;
    let deleted = whole_change(&state, uuid, move |state, _since| async move {
        state.store().delete_job(uuid).await
    })
    .await?;
    if !deleted {
        return Err(ApiError::job_not_found(&id));
    }
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn pause(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Body,
) -> Result<Json<JobResponse>, ApiError> {
    read_no_arguments(body, state.body_limit()).await?;
    set_paused(&state, &id, true).await
}

pub(super) async fn resume(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Body,
) -> Result<Json<JobResponse>, ApiError> {
    read_no_arguments(body, state.body_limit()).await?;
    set_paused(&state, &id, false).await
}

/// Fires the job now (even when paused), as runs with trigger `manual` (one per item, see
/// [`crate::domain::Target::items`]); answers the first item with the whole fire's
/// `items`. A zone job with no zone to run answers `unavailable`.
pub(super) async fn trigger(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    read_no_arguments(body, state.body_limit()).await?;
    let job = load(&state, &id).await?;
    let now = Utc::now();
    let live = if needs_live_zones(&job) {
        state.store().live_zones(live_since(now)).await?
    } else {
        LiveZones::default()
    };
    let mut runs = job.new_runs(now, RunTrigger::Manual, now, &live);
    if runs.is_empty() {
        return Err(ApiError::new(
            ErrorCode::Unavailable,
            format!(
                "no zone of group {:?} has live consumers to run the fire",
                job.spec.settings.target.group
            ),
        ));
    }
    let mut recorded = Vec::new();
    for run in &mut runs {
        run.fired_by = Some(state.inner.ownership.node().to_string());
        if state.store().insert_run(run).await? {
            recorded.push(job.task_message(run));
        }
    }
    if !recorded.is_empty() {
        metrics::counter!(telemetry::FIRES, "trigger" => "manual").increment(1);
        state.inner.dispatch.submit(recorded);
    }
    // As stored: a second trigger in the same millisecond answers the first one's runs.
    let items = super::runs::fire_items(state.store(), &runs[0]).await?;
    let first = items
        .iter()
        .find(|item| item.id == runs[0].id)
        .unwrap_or(&runs[0]);
    Ok((
        StatusCode::ACCEPTED,
        Json(RunResponse::from(first).with_fire(&items)),
    ))
}

async fn set_paused(
    state: &AppState,
    id: &str,
    paused: bool,
) -> Result<Json<JobResponse>, ApiError> {
    let current = load(state, id).await?;
    if current.spec.paused == paused {
        return Ok(Json(JobResponse::from(&current)));
    }
    let mut spec = current.spec.clone();
    spec.paused = paused;
    let stored = change(state, &current, current.version, spec).await?;
    Ok(Json(JobResponse::from(&stored)))
}

/// Stores a new definition of `current` and tells the timer and dispatcher.
async fn change(
    state: &AppState,
    current: &Job,
    expected: i64,
    spec: JobSpec,
) -> Result<Job, ApiError> {
    let set_next_fire = reschedules(&current.spec, &spec);
    let current = current.clone();
    whole_change(state, current.id, move |state, since| async move {
        let updated = current.updated(spec, since);
        state
            .store()
            .update_job(&updated, expected, set_next_fire)
            .await
    })
    .await
}

/// Runs a change of `job` (`write`, given the change's instant) as a whole, on a task
/// of its own so that a dropped request cannot stop it halfway. Begun before the
/// transaction, so this node's dispatcher holds the job's due tasks until the change is
/// through and fires after its instant are the change's to withdraw; then handed to
/// the timer, which passes it on to the dispatcher after any fire it recorded before.
async fn whole_change<T, F, Fut>(state: &AppState, job: Uuid, write: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(AppState, DateTime<Utc>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
{
    let state = state.clone();
    let task = tokio::spawn(async move {
        let change = state.inner.dispatch.begin_change(job);
        let written = write(state.clone(), change.since()).await;
        state.inner.timer.change_done(change);
        written
    });
    match task.await {
        Ok(written) => Ok(written?),
        Err(failed) => {
            error!(error = %failed, %job, "a job change failed");
            Err(ApiError::internal())
        }
    }
}

async fn load(state: &AppState, id: &str) -> Result<Job, ApiError> {
    state
        .store()
        .get_job(parse_id(id)?)
        .await?
        .ok_or_else(|| ApiError::job_not_found(id))
}

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
