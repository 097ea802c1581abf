//! Cancel notices: what chimed publishes when an operator cancels a run
//! (`POST /v1/runs/{id}/cancel`), so consumers skip the run's task if it is still queued
//! and tell a handler already running it ([`crate::TaskContext::cancelled`]).
//!
//! Notices go to one stream, [`CANCEL_NOTICES`](super::topology::CANCEL_NOTICES), which
//! chimed declares and publishes to through the default exchange. Every consumer instance
//! reads it from its first retained entry each time it connects, so an instance started
//! after a cancel still learns of it before it takes the task from its queue. Readers
//! ignore a message of a type or version they do not know.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{PROTOCOL_VERSION, ProtocolError, messages::check_version};

/// A run cancelled by an operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelMessage {
    /// Protocol version.
    pub v: u32,
    /// Always `cancel`.
    #[serde(rename = "type")]
    pub kind: CancelKind,
    /// The cancelled run's id: the task id of every attempt of the run.
    pub task_id: Uuid,
    /// The group the run's job targets when it was cancelled (informational: a task
    /// recorded before the job's target changed waits in the old group's queue, so the
    /// Rust consumer remembers every notice whatever its group).
    pub group: String,
    /// When the run was cancelled.
    #[serde(serialize_with = "super::instant::serialize")]
    pub at: DateTime<Utc>,
    /// Who cancelled it (the API token's name), for handlers' logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// The marker in a cancel notice's `type` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelKind {
    /// A cancel notice.
    Cancel,
}

impl CancelMessage {
    /// The notice that run `task_id` of group `group` was cancelled at `at` by `by`.
    pub fn new(task_id: Uuid, group: impl Into<String>, at: DateTime<Utc>, by: &str) -> Self {
        Self {
            v: PROTOCOL_VERSION,
            kind: CancelKind::Cancel,
            task_id,
            group: group.into(),
            at,
            by: Some(by.to_owned()),
        }
    }

    /// Parses a notice and checks its version.
    pub fn from_slice(body: &[u8]) -> Result<Self, ProtocolError> {
        let message: CancelMessage = serde_json::from_slice(body)?;
        check_version(message.v)?;
        Ok(message)
    }

    /// Serialises the notice to its JSON body.
    pub fn to_vec(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a cancel notice always serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_notice_round_trips_and_refuses_other_shapes() {
        let at = "2026-11-21T10:00:00.5Z".parse().unwrap();
        let notice = CancelMessage::new(Uuid::from_u128(7), "orders", at, "ops");
        let body: serde_json::Value = serde_json::from_slice(&notice.to_vec()).unwrap();
        assert_eq!(
            body,
            json!({"v": 1, "type": "cancel", "task_id": Uuid::from_u128(7), "group": "orders",
                   "at": "2026-11-21T10:00:00.500Z", "by": "ops"})
        );
        assert_eq!(CancelMessage::from_slice(&notice.to_vec()).unwrap(), notice);
        let mut other = body.clone();
        other["v"] = json!(2);
        assert!(CancelMessage::from_slice(other.to_string().as_bytes()).is_err());
        other = body.clone();
        other["type"] = json!("ack");
        assert!(CancelMessage::from_slice(other.to_string().as_bytes()).is_err());
    }
}
