//! Dead letters: the message the scheduler publishes to a group's dead-letter queue when
//! it gives a run up (its attempt history is a list of run records,
//! [`AttemptRecord`], defined with the other run types in
//! [`messages`](super::messages)), and the headers that let tools read
//! the reason of any dead-lettered message without parsing its body.
//!
//! A dead-letter queue holds three kinds of message:
//! - a [`DeadLetterMessage`] the scheduler published (retries exhausted, a permanent
//!   failure, acks or results that never came);
//! - a task RabbitMQ dead-lettered itself (`x-death` reason `delivery_limit`: it crashed
//!   consumers [`super::topology::DELIVERY_LIMIT`] times; `rejected`: a consumer refused it);
//! - a body nobody could parse, rejected by a consumer or the result collector.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{
    PROTOCOL_VERSION, ProtocolError, TaskMessage,
    messages::{AttemptRecord, check_version},
};

/// Header with the reason the scheduler dead-lettered a run (a short text).
pub const REASON_HEADER: &str = "x-chime-reason";
/// Header with the reason the scheduler's result collector refused a reply it
/// dead-lettered to `chime.replies.dlq` (e.g. `missing field acked_at`).
pub const REJECT_REASON_HEADER: &str = "x-chime-reject-reason";
/// Header with the run id of a dead-lettered task.
pub const RUN_HEADER: &str = "x-chime-run";

/// A run the scheduler gave up on, as published to the dead-letter exchange for its group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetterMessage {
    /// Protocol version.
    pub v: u32,
    /// Always `dead_letter`, so the body is recognisable among raw tasks.
    #[serde(rename = "type")]
    pub kind: DeadLetterKind,
    /// Why the run was given up.
    pub reason: String,
    /// When it was given up.
    #[serde(serialize_with = "super::instant::serialize")]
    pub dead_at: DateTime<Utc>,
    /// The scheduler node that published this dead letter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The task of the last attempt: run id, job, group, payload, attempt number.
    pub task: TaskMessage,
    /// Every attempt that did not succeed, oldest first.
    pub history: Vec<AttemptRecord>,
}

/// The marker in a dead letter's `type` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterKind {
    /// A scheduler dead letter.
    DeadLetter,
}

impl DeadLetterMessage {
    /// A dead letter for `task`, given up at `dead_at` for `reason`.
    pub fn new(
        task: TaskMessage,
        reason: impl Into<String>,
        dead_at: DateTime<Utc>,
        history: Vec<AttemptRecord>,
    ) -> Self {
        Self {
            v: PROTOCOL_VERSION,
            kind: DeadLetterKind::DeadLetter,
            reason: reason.into(),
            dead_at,
            node: None,
            task,
            history,
        }
    }

    /// Parses a dead-letter body and checks its version.
    pub fn from_slice(body: &[u8]) -> Result<Self, ProtocolError> {
        let message: DeadLetterMessage = serde_json::from_slice(body)?;
        check_version(message.v)?;
        Ok(message)
    }

    /// Serialises the dead letter to its JSON body.
    pub fn to_vec(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a dead letter always serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use uuid::Uuid;

    #[test]
    fn dead_letter_round_trips_and_is_not_a_task() {
        let task = TaskMessage {
            v: 1,
            task_id: Uuid::from_u128(1),
            job_id: Uuid::from_u128(2),
            app: "shop".into(),
            job: "close".into(),
            group: "orders".into(),
            fire_time: "2026-11-21T10:00:00Z".parse().unwrap(),
            shard: 0,
            shard_total: 1,
            attempt: 3,
            mode: Default::default(),
            zone: None,
            payload: json!({"x": 1}),
            published_at: "2026-11-21T10:00:09Z".parse().unwrap(),
            run_timeout_ms: None,
        };
        let history = vec![AttemptRecord {
            attempt: 1,
            event: "failed".into(),
            at: "2026-11-21T10:00:01Z".parse().unwrap(),
            consumer: Some("w1".into()),
            error: Some("db down".into()),
            retry_at: None,
        }];
        let dead = DeadLetterMessage::new(
            task,
            "failed 3 times",
            "2026-11-21T10:00:10Z".parse().unwrap(),
            history,
        );
        let body = dead.to_vec();
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["type"], "dead_letter");
        assert_eq!(value["task"]["attempt"], 3);
        assert_eq!(DeadLetterMessage::from_slice(&body).unwrap(), dead);
        assert!(TaskMessage::from_slice(&body).is_err());
    }
}
