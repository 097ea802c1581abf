//! `/v1/dlq`: list the dead-letter queues, peek at, replay and purge one. The operations
//! themselves live in [`crate::dlq`]; these handlers parse the request and shape the
//! answer.

use axum::{
    Json,
    body::Body,
    extract::{Extension, Path, Query, State, rejection::QueryRejection},
};
use serde::Deserialize;

pub use super::dto::{DlqItems, PurgeResponse, ReplayRequest};
use super::{
    body::{parse_json, read_body},
    error::{ApiError, ErrorCode},
    state::AppState,
};
use crate::{
    dlq::{DlqMessage, DlqSummary, MAX_PEEK, ReplayReport},
    domain::access::Caller,
};

/// Messages `GET /v1/dlq/{queue}/messages` returns without a `limit`.
pub const DEFAULT_PEEK: usize = 10;
/// Messages `POST /v1/dlq/{queue}/replay` replays without a `limit`.
pub const DEFAULT_REPLAY_LIMIT: u32 = 1000;

/// The query of `GET /v1/dlq/{queue}/messages`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PeekQuery {
    /// How many messages, default 10, at most [`MAX_PEEK`].
    pub limit: Option<usize>,
}

/// The dead-letter queues, with depths and reasons.
#[utoipa::path(
    get, path = "/v1/dlq", operation_id = "listDeadLetterQueues", tag = "dlq",
    responses((status = 200, description = "The queues.", body = DlqItems<DlqSummary>)),
)]
pub(super) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<DlqItems<DlqSummary>>, ApiError> {
    let items = state.dead_letters().list(&caller, true).await?;
    Ok(Json(DlqItems { items }))
}

/// The oldest messages of a dead-letter queue (of the token's apps), left in place.
#[utoipa::path(
    get, path = "/v1/dlq/{queue}/messages", operation_id = "peekDeadLetters", tag = "dlq",
    params(("queue" = String, Path, description = "The dead-letter queue's name."), PeekQuery),
    responses((status = 200, description = "The messages, oldest first.", body = DlqItems<DlqMessage>), (status = 404, description = "No such dead-letter queue (`not_found`).", body = super::error::ErrorBody)),
)]
pub(super) async fn peek(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(queue): Path<String>,
    query: Result<Query<PeekQuery>, QueryRejection>,
) -> Result<Json<DlqItems<DlqMessage>>, ApiError> {
    let Query(query) =
        query.map_err(|e| ApiError::field(ErrorCode::InvalidField, "limit", e.body_text()))?;
    let limit = peek_limit(query.limit)?;
    let items = state.dead_letters().peek(&caller, &queue, limit).await?;
    Ok(Json(DlqItems { items }))
}

/// Replays up to `limit` messages in one request; a failure part-way answers with the
/// error, and what was replayed before it stays replayed.
#[utoipa::path(
    post, path = "/v1/dlq/{queue}/replay", operation_id = "replayDeadLetters", tag = "dlq",
    params(("queue" = String, Path, description = "The dead-letter queue's name.")),
    request_body(content = Option<ReplayRequest>, description = "Optional: which messages (default: every one, up to 1000)."),
    responses((status = 200, description = "What the replay did.", body = ReplayReport), (status = 404, description = "No such dead-letter queue (`not_found`).", body = super::error::ErrorBody)),
)]
pub(super) async fn replay(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(queue): Path<String>,
    body: Body,
) -> Result<Json<ReplayReport>, ApiError> {
    let bytes = read_body(body, state.body_limit()).await?;
    let request: ReplayRequest = if super::body::is_blank(&bytes) {
        ReplayRequest::default()
    } else {
        parse_json(&bytes)?
    };
    let limit = replay_limit(request.limit)?;
    let report = state
        .dead_letters()
        .replay(&caller, &queue, request.job.as_deref(), limit, |_| {})
        .await?;
    Ok(Json(report))
}

/// Empties a dead-letter queue.
#[utoipa::path(
    post, path = "/v1/dlq/{queue}/purge", operation_id = "purgeDeadLetters", tag = "dlq",
    params(("queue" = String, Path, description = "The dead-letter queue's name.")),
    responses((status = 200, description = "The queue emptied.", body = PurgeResponse), (status = 404, description = "No such dead-letter queue (`not_found`).", body = super::error::ErrorBody)),
)]
pub(super) async fn purge(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(queue): Path<String>,
) -> Result<Json<PurgeResponse>, ApiError> {
    let purged = state.dead_letters().purge(&caller, &queue).await?;
    Ok(Json(PurgeResponse { queue, purged }))
}

fn peek_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit {
        None => Ok(DEFAULT_PEEK),
        Some(n @ 1..=MAX_PEEK) => Ok(n),
        Some(n) => Err(ApiError::field(
            ErrorCode::InvalidField,
            "limit",
            format!("limit {n} is out of range: use 1 to {MAX_PEEK}"),
        )),
    }
}

fn replay_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    match limit {
        None => Ok(DEFAULT_REPLAY_LIMIT),
        Some(0) => Err(ApiError::field(
            ErrorCode::InvalidField,
            "limit",
            "limit must be at least 1",
        )),
        Some(n) => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_have_defaults_and_bounds() {
        assert_eq!(peek_limit(None).unwrap(), DEFAULT_PEEK);
        assert_eq!(peek_limit(Some(MAX_PEEK)).unwrap(), MAX_PEEK);
        for bad in [0, MAX_PEEK + 1] {
            let error = peek_limit(Some(bad)).unwrap_err();
            assert_eq!(
                (error.code, error.field.as_deref()),
                (ErrorCode::InvalidField, Some("limit"))
            );
        }
        assert_eq!(replay_limit(None).unwrap(), DEFAULT_REPLAY_LIMIT);
        assert_eq!(replay_limit(Some(5)).unwrap(), 5);
        assert!(replay_limit(Some(0)).is_err());
    }

    #[test]
    fn replay_body_refuses_unknown_fields() {
        let request: ReplayRequest = parse_json(br#"{"job": "e2e/x", "limit": 3}"#).unwrap();
        assert_eq!(
            (request.job.as_deref(), request.limit),
            (Some("e2e/x"), Some(3))
        );
        let error = parse_json::<ReplayRequest>(br#"{"jobs": "x"}"#).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("jobs"));
    }
}
