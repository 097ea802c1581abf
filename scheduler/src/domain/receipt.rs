//! What one consumer instance did with a broadcast run: the receipt kept on the run for
//! each instance that acked. The decisions over receipts live in [`super::broadcast`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use chime_consumer::protocol::TaskError;

/// Where one instance is with a broadcast run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptState {
    /// Acked and running.
    Running,
    /// The handler succeeded.
    Succeeded,
    /// The handler failed.
    Failed,
    /// Acked, then silent past the run timeout (the instance died or hangs).
    Lost,
}

/// What one consumer instance did with a broadcast run (its latest attempt).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceReceipt {
    /// Consumer instance id.
    pub instance: String,
    /// The attempt it ran.
    pub attempt: u32,
    /// Where it is.
    pub state: ReceiptState,
    /// When it acked.
    pub acked_at: DateTime<Utc>,
    /// Its last heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// When it finished (or was declared lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// The handler's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<TaskError>,
}
