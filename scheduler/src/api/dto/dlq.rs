//! The dead-letter shapes of the HTTP API (`/v1/dlq`): the queues, the messages of one
//! as `dlq peek` shows them, and what a replay or purge did. The operations live in
//! [`crate::dlq`]; these are only what travels between `chimed` and its clients.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use chime_consumer::protocol::AttemptRecord;

/// `{"items": [...]}`: the dead-letter queues, or the messages of one.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DlqItems<T> {
    /// The queues or messages.
    pub items: Vec<T>,
}

/// A dead-lettered message as `dlq peek` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DlqMessage {
    /// `dead_letter` (given up by the scheduler), `task` (dead-lettered by the broker) or
    /// `unreadable`.
    pub kind: String,
    /// Why it is here.
    pub reason: String,
    /// The run (task id), when known.
    pub run_id: Option<Uuid>,
    /// `app/name` of the job, when known.
    pub job: Option<String>,
    /// The attempt the message carries.
    pub attempt: Option<u32>,
    /// When it was dead-lettered, when known.
    pub dead_at: Option<String>,
    /// The task's payload.
    pub payload: Option<Value>,
    /// The attempt history (scheduler dead letters).
    #[schema(value_type = Vec<crate::domain::wire_schema::AttemptRecordSchema>)]
    pub history: Vec<AttemptRecord>,
    /// An excerpt of an unreadable body.
    pub body: Option<String>,
    /// Whether the run has since finished successfully (a late result recorded after it
    /// was given up, or a replay that succeeded): the dead letter needs no replay, and a
    /// replay leaves it in place. False when unknown.
    #[serde(default)]
    pub resolved: bool,
}

/// One dead-letter queue in `dlq ls`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DlqSummary {
    /// Queue name.
    pub queue: String,
    /// Messages in it.
    pub depth: u32,
    /// Age of the oldest message in seconds, if any and known.
    pub oldest_age_s: Option<f64>,
    /// Reasons of the oldest (up to 100) messages, with counts.
    pub reasons: BTreeMap<String, u32>,
    /// How many of those oldest (up to 100) messages are resolved: their run has since
    /// finished successfully (see [`DlqMessage::resolved`]). 0 when reasons are not read.
    #[serde(default)]
    pub resolved: u32,
}

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReplayReport {
    /// Messages published to their target (confirmed) and removed from the DLQ.
    pub replayed: u32,
    /// Copies removed because their run is under way again (replayed already).
    pub discarded: u32,
    /// Messages left in place, by reason (`resolved` for those whose run has since
    /// succeeded).
    pub skipped: BTreeMap<String, u32>,
    /// Messages left in the queue afterwards: what the broker counts once the replay is
    /// over, and never fewer than the queue held before less those removed.
    pub remaining: u32,
}

/// The optional body of `POST /v1/dlq/{queue}/replay`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// Only messages of this job (`app/name`, or a name in app `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// Replay at most this many, default 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// The answer of `POST /v1/dlq/{queue}/purge`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PurgeResponse {
    /// The queue emptied.
    pub queue: String,
    /// Messages removed.
    pub purged: u32,
}
