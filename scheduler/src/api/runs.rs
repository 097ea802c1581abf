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
use crate::{
    domain::Run,
    store::{RunPage, Store},
};

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

/// One run, with the view of its whole fire (`items`, `fire_state`).
pub(super) async fn get(
    State(state): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Json<RunResponse>, ApiError> {
    let not_found = || ApiError::new(ErrorCode::NotFound, format!("no run with id {run_id:?}"));
    let id = Uuid::parse_str(&run_id).map_err(|_| not_found())?;
    let run = state.store().get_run(id).await?.ok_or_else(not_found)?;
    // A one-item fire is the run alone: no need to ask.
    let items = if run.shard_total <= 1 {
        vec![run.clone()]
    } else {
        fire_items(state.store(), &run).await?
    };
    Ok(Json(RunResponse::from(&run).with_fire(&items)))
}

/// Every item of `run`'s fire as stored, `run` included: the runs of its job with the
/// same fire time and trigger (a manual trigger in the millisecond of a scheduled fire is
/// a fire of its own), by shard.
pub(super) async fn fire_items(store: &dyn Store, run: &Run) -> Result<Vec<Run>, ApiError> {
    let mut items: Vec<Run> = store
        .fire_items(run.job_id, run.fire_time)
        .await?
        .into_iter()
        .filter(|item| item.trigger == run.trigger)
        .collect();
    if !items.iter().any(|item| item.id == run.id) {
        // The job (and its runs) was deleted since the run was read.
        items.push(run.clone());
        items.sort_by_key(|item| item.shard);
    }
    Ok(items)
}
