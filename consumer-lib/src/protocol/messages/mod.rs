//! Message bodies that cross RabbitMQ, as JSON: the task the scheduler publishes
//! (here), the replies a consumer sends back (`reply.rs`: [`Reply`] — ack, heartbeat,
//! result, presence, observer registration — and batches) and the run types they carry
//! (`outcome.rs`: [`TaskOutcome`], [`Progress`], [`TaskError`] and the attempt history's
//! [`AttemptRecord`]).

mod outcome;
mod reply;
#[cfg(test)]
mod tests;

pub use outcome::{
    AttemptRecord, MAX_OUTPUT_BYTES, MAX_OUTPUT_DEPTH, Progress, TaskError, TaskOutcome,
};
pub use reply::{
    AckMessage, BatchKind, HeartbeatMessage, MAX_OBSERVER_PATTERNS, MAX_VERSION_LEN,
    OBSERVE_INTERVAL_MS, OBSERVER_TTL_MS, ObserveMessage, PRESENCE_INTERVAL_MS, PRESENCE_TTL_MS,
    PresenceMessage, Reply, ReplyBatch, ReplyItem, ResultMessage,
};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::protocol::PROTOCOL_VERSION;

/// Why a message body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The body is not JSON of the expected shape.
    #[error("malformed message: {0}")]
    Malformed(#[from] serde_json::Error),
    /// The body is well-formed but speaks another protocol version.
    #[error("unsupported protocol version {found} (this side speaks {PROTOCOL_VERSION})")]
    UnsupportedVersion {
        /// The version the message carried.
        found: u32,
    },
}

/// How a job's fires are delivered; decides where its tasks are routed (see
/// [`crate::protocol::topology::task_route`]) and what consumers do with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryMode {
    /// One instance of the target group runs each fire (competing consumers on the
    /// group's work queue).
    #[default]
    Group,
    /// Every live instance subscribed to the group's broadcasts runs each fire, from its
    /// own per-instance queue.
    Broadcast,
    /// One instance per zone runs each fire, from the work queue of its (group, zone).
    Zone,
    /// Each fire is split into `shard_total` items spread over the group's instances.
    Sharded,
}

impl DeliveryMode {
    /// The mode's name in the API and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryMode::Group => "group",
            DeliveryMode::Broadcast => "broadcast",
            DeliveryMode::Zone => "zone",
            DeliveryMode::Sharded => "sharded",
        }
    }

    /// Parses a mode name.
    pub fn parse(name: &str) -> Option<Self> {
        [
            DeliveryMode::Group,
            DeliveryMode::Broadcast,
            DeliveryMode::Zone,
            DeliveryMode::Sharded,
        ]
        .into_iter()
        .find(|m| m.as_str() == name)
    }
}

/// One task: a single fire of a job (one shard item of it), published by the scheduler to
/// the job's target group. `task_id` is the run id and the idempotency key: every
/// re-publish of the same fire carries the same `task_id` and a higher `attempt`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskMessage {
    /// Protocol version, always [`PROTOCOL_VERSION`] when written by this crate.
    pub v: u32,
    /// Run id and idempotency key, see [`crate::protocol::run_id()`].
    pub task_id: Uuid,
    /// The job that fired.
    pub job_id: Uuid,
    /// The job's namespace.
    pub app: String,
    /// The job's name, unique within `app`; consumers route to handlers by it.
    pub job: String,
    /// Target consumer group.
    pub group: String,
    /// The scheduled fire time (not the publish time), millisecond precision.
    #[serde(serialize_with = "crate::protocol::instant::serialize")]
    pub fire_time: DateTime<Utc>,
    /// Shard index, `0..shard_total`.
    pub shard: u32,
    /// Number of shard items this fire was split into (1 for unsharded jobs).
    pub shard_total: u32,
    /// Delivery attempt, starting at 1.
    pub attempt: u32,
    /// How the job's fires are delivered (absent: `group`).
    #[serde(default, skip_serializing_if = "is_group")]
    pub mode: DeliveryMode,
    /// The zone this item is for (`zone` mode only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The job's payload as configured when the run was recorded.
    pub payload: Value,
    /// When the scheduler published this attempt.
    #[serde(serialize_with = "crate::protocol::instant::serialize")]
    pub published_at: DateTime<Utc>,
    /// How long the scheduler waits between signs of life from a running handler (the
    /// ack, then heartbeats) before it publishes the task again; consumers send
    /// heartbeats well within it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_timeout_ms: Option<u64>,
}

fn is_group(mode: &DeliveryMode) -> bool {
    *mode == DeliveryMode::Group
}

impl TaskMessage {
    /// Parses a task body and checks its version.
    pub fn from_slice(body: &[u8]) -> Result<Self, ProtocolError> {
        let task: TaskMessage = serde_json::from_slice(body)?;
        check_version(task.v)?;
        Ok(task)
    }

    /// Serialises the task to its JSON body.
    pub fn to_vec(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a task message always serialises")
    }
}

pub(crate) fn check_version(found: u32) -> Result<(), ProtocolError> {
    if found == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(ProtocolError::UnsupportedVersion { found })
    }
}
