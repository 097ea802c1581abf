//! OpenAPI schemas of the protocol types (from `chime-consumer`) that the API embeds in
//! its answers: [`chime_consumer::protocol::DeliveryMode`], `Progress` and
//! `AttemptRecord`. The protocol crate stays free of documentation dependencies, so these
//! mirrors stand in for them (`#[schema(value_type = ...)]` on the fields that carry
//! them); they are never built, only described. Keep each in step with its original's
//! serde shape: the API's schema test (`scheduler/tests/api/openapi.rs`) checks real
//! answers against the document.

use serde::Serialize;
use utoipa::ToSchema;

/// How a job's fires are delivered.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = DeliveryMode)]
pub enum DeliveryModeSchema {
    /// One instance of the target group runs each fire.
    Group,
    /// Every live instance subscribed to the group's broadcasts runs each fire.
    Broadcast,
    /// One instance per zone runs each fire.
    Zone,
    /// Each fire is split into `shard_total` items.
    Sharded,
}

/// Progress a handler reports.
#[derive(Serialize, ToSchema)]
#[schema(as = Progress)]
pub struct ProgressSchema {
    /// Percentage done, 0 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    /// A short note ("page 3 of 12").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What ended one attempt of a run, as kept in its history.
#[derive(Serialize, ToSchema)]
#[schema(as = AttemptRecord)]
pub struct AttemptRecordSchema {
    /// The attempt, from 1.
    pub attempt: u32,
    /// What happened: `failed`, `ack_timeout`, `run_timeout`, `delivery_limit`,
    /// `rejected`, `replayed`, `late_success`, `late_failure`, `reply_rejected`,
    /// `unpublishable` or `misfire_skipped`.
    pub event: String,
    /// When the scheduler learnt of it (RFC 3339, UTC).
    pub at: String,
    /// The consumer instance involved, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// The error reported or the reason for the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the next attempt was scheduled (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
}
