//! Schedule previews: `GET /v1/jobs/{id}/preview` and `POST /v1/schedules/preview`.

use serde::{Deserialize, Serialize};

use crate::domain::{
    preview::{Preview, UpcomingFire},
    schedule::ScheduleSpec,
    timestamp::timestamp,
};

/// `?count=N` of a job's preview.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PreviewQuery {
    /// How many fires, 1 to 100 (default 10).
    pub count: Option<u32>,
}

/// The body of `POST /v1/schedules/preview`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SchedulePreviewRequest {
    /// The schedule, as in a job.
    pub schedule: ScheduleSpec,
    /// How many fires, 1 to 100 (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
}

/// One upcoming fire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UpcomingFireResponse {
    /// When, UTC.
    pub at: String,
    /// The same instant in `timezone`, with its offset.
    pub local: String,
}

/// A preview's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PreviewResponse {
    /// The IANA time zone of each fire's `local`.
    pub timezone: String,
    /// Whether the job is paused (a job's preview only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// The fires, ascending.
    pub fires: Vec<UpcomingFireResponse>,
}

impl PreviewResponse {
    /// The answer for `preview`; `paused` for a stored job.
    pub fn new(preview: &Preview, paused: Option<bool>) -> Self {
        Self {
            timezone: preview.timezone.clone(),
            paused,
            fires: preview.fires.iter().map(fire).collect(),
        }
    }
}

fn fire(fire: &UpcomingFire) -> UpcomingFireResponse {
    UpcomingFireResponse {
        at: timestamp(fire.at),
        local: fire.local.clone(),
    }
}
