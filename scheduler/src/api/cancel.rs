//! `POST /v1/runs/{id}/cancel`: cancels a run that has not finished, through
//! [`crate::app::Cancellations`].

use axum::{
    Json,
    extract::{Extension, Path, State},
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{dto::RunResponse, error::ApiError, state::AppState};
use crate::domain::{RunState, access::Caller};

/// The answer to a cancel: the run as it now is (with its fire), the state it was
/// cancelled in, and whether consumers were told.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct CancelResponse {
    /// The run, now `cancelled`.
    #[serde(flatten)]
    pub run: RunResponse,
    /// The state it was in when cancelled.
    pub cancelled_from: RunState,
    /// Whether the cancel notice reached the broker (false: the run is cancelled and never
    /// published again, but a queued task or a running handler was not told).
    pub notified: bool,
}

#[utoipa::path(
    post, path = "/v1/runs/{id}/cancel", operation_id = "cancelRun", tag = "runs",
    params(("id" = uuid::Uuid, Path, description = "The run id.")),
    responses(
        (status = 200, description = "The run, now `cancelled`, the state it was cancelled in, and whether consumers were told.", body = CancelResponse),
        (status = 404, description = "No run with this id (`not_found`).", body = super::error::ErrorBody),
        (status = 409, description = "The run already finished (`run_finished`).", body = super::error::ErrorBody),
    ),
)]
pub(super) async fn cancel(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(run_id): Path<String>,
) -> Result<Json<CancelResponse>, ApiError> {
    let id = Uuid::parse_str(&run_id).map_err(|_| ApiError::run_not_found(&run_id))?;
    let cancelled = state.cancellations().cancel(&caller, id).await?;
    Ok(Json(CancelResponse {
        run: RunResponse::from(&cancelled.fire.run).with_fire(&cancelled.fire.items),
        cancelled_from: cancelled.was,
        notified: cancelled.notified,
    }))
}
