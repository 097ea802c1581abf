//! Backfill: the body of `POST /v1/jobs/{id}/backfill` and its answer.

use serde::{Deserialize, Serialize};

use crate::domain::backfill::BackfillOverlap;

/// The body of `POST /v1/jobs/{id}/backfill`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BackfillRequestBody {
    /// Start of the range, RFC 3339, included.
    pub from: String,
    /// End of the range, RFC 3339, excluded; not in the future.
    pub to: String,
    /// Fires dispatched a second, 0.01 to 1000 (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// `allow` (default) or `forbid`: see `docs/api.md`.
    #[serde(default)]
    pub overlap: BackfillOverlap,
    /// Count the range's fires and record nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// What a backfill did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BackfillResponse {
    /// The job.
    pub job_id: String,
    /// The range's start as understood (UTC, ms).
    pub from: String,
    /// The range's end as understood (UTC, ms).
    pub to: String,
    /// Fires dispatched a second.
    pub rate: f64,
    /// The overlap choice.
    pub overlap: BackfillOverlap,
    /// Whether this was a dry run (nothing recorded; `recorded`, `present` and `runs`
    /// are 0).
    pub dry_run: bool,
    /// Fire times of the schedule in the range the backfill covers.
    pub fires: usize,
    /// The first of them.
    pub first_fire: Option<String>,
    /// The last of them.
    pub last_fire: Option<String>,
    /// Fires this request recorded.
    pub recorded: usize,
    /// Fires already recorded before (by the schedule, or an earlier backfill).
    pub present: usize,
    /// Runs this request recorded (one per item of each recorded fire).
    pub runs: usize,
    /// When the last recorded fire is due to be dispatched.
    pub last_due_at: Option<String>,
}
