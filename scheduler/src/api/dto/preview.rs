//! Schedule previews: `GET /v1/jobs/{id}/preview` and `POST /v1/schedules/preview`.

use serde::{Deserialize, Serialize};

use crate::domain::{
    preview::{Preview, UpcomingFire},
    schedule::ScheduleSpec,
    timestamp::timestamp,
    validation::FieldError,
    window::Window,
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
    /// The job's `start_at`, as in a job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    /// The job's `end_at`, as in a job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<String>,
    /// The job's `jitter`, as in a job (accepted and checked; an unsaved schedule's
    /// fires show no jittered time: it derives from the job's id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
}

impl SchedulePreviewRequest {
    /// The window fields, validated.
    pub fn window(&self) -> Result<Window, FieldError> {
        Window::parse(
            self.start_at.as_deref(),
            self.end_at.as_deref(),
            self.jitter.as_deref(),
        )
    }
}

/// One upcoming fire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UpcomingFireResponse {
    /// When, UTC: the nominal fire time (the run's `fire_time`).
    pub at: String,
    /// The same instant in `timezone`, with its offset.
    pub local: String,
    /// When the task is published, UTC: `at` plus the fire's jitter (a job with a
    /// jitter only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due: Option<String>,
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
    /// The schedule in words with its time zone, e.g. "every 2 minutes at second 0,
    /// Asia/Shanghai", "every 30s", "once at 2026-06-01T08:00:00.000Z"; a cron expression
    /// with ranges or other syntax shows as `cron "<expression>", <zone>`.
    #[serde(default)]
    pub description: String,
}

impl PreviewResponse {
    /// The answer for `preview`; `paused` for a stored job.
    pub fn new(preview: &Preview, paused: Option<bool>) -> Self {
        Self {
            timezone: preview.timezone.clone(),
            paused,
            fires: preview.fires.iter().map(fire).collect(),
            description: preview.description.clone(),
        }
    }
}

fn fire(fire: &UpcomingFire) -> UpcomingFireResponse {
    UpcomingFireResponse {
        at: timestamp(fire.at),
        local: fire.local.clone(),
        due: fire.due.map(timestamp),
    }
}
