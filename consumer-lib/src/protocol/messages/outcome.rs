//! The run types the messages carry: a handler's progress and outcome (with the limits on
//! its output), the error of a failed one, and the record of each attempt kept in a run's
//! history and in dead letters.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Progress a handler reports; shown on the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Percentage done, 0 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    /// A short note ("page 3 of 12").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A handler's outcome, as reported and as recorded in idempotency stores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum TaskOutcome {
    /// The handler succeeded, optionally with output JSON.
    Succeeded {
        /// Output shown on the run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<Value>,
    },
    /// The handler failed.
    Failed {
        /// Why.
        error: TaskError,
    },
}

/// A handler failure as it travels on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskError {
    /// Human-readable reason.
    pub message: String,
    /// Whether running the task again may succeed.
    pub retryable: bool,
    /// The handler's hint for when to retry, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

/// What ended one attempt of a run, as kept in its history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// The attempt, from 1.
    pub attempt: u32,
    /// What happened: `failed`, `ack_timeout`, `run_timeout`, `delivery_limit`,
    /// `rejected`, `replayed`, `late_success` / `late_failure` (a result for a run
    /// already given up), `reply_rejected` (a refused reply, noted), `unpublishable` or
    /// `misfire_skipped`.
    pub event: String,
    /// When the scheduler learnt of it.
    #[serde(serialize_with = "crate::protocol::instant::serialize")]
    pub at: DateTime<Utc>,
    /// The consumer instance involved, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// The error reported or the reason for the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the next attempt was scheduled, if the failure was retried after a backoff.
    #[serde(
        serialize_with = "crate::protocol::instant::serialize_option",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub retry_at: Option<DateTime<Utc>>,
}

/// Largest handler output a result may carry, in bytes of compact JSON.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// Deepest nesting of a handler output (an array or object counts one level; a scalar
/// output is at depth 0). The scheduler parses a reply with a limit of 128 levels, and a
/// result wraps its output in two more.
pub const MAX_OUTPUT_DEPTH: usize = 100;

impl TaskOutcome {
    /// The outcome as a result may carry it: a success whose output is over
    /// [`MAX_OUTPUT_BYTES`] or nested deeper than [`MAX_OUTPUT_DEPTH`] becomes a permanent
    /// failure saying so (the scheduler could not store it).
    pub fn within_limits(&self) -> Self {
        let TaskOutcome::Succeeded {
            output: Some(output),
        } = self
        else {
            return self.clone();
        };
        let problem = match (
            json_depth(output),
            serde_json::to_vec(output).map(|b| b.len()),
        ) {
            (depth, _) if depth > MAX_OUTPUT_DEPTH => Some(format!(
                "handler output is nested {depth} levels deep; the limit is {MAX_OUTPUT_DEPTH}"
            )),
            (_, Ok(len)) if len > MAX_OUTPUT_BYTES => Some(format!(
                "handler output is {len} bytes of JSON; the limit is {MAX_OUTPUT_BYTES}"
            )),
            (_, Err(error)) => Some(format!("handler output does not serialise: {error}")),
            _ => None,
        };
        match problem {
            Some(message) => TaskOutcome::Failed {
                error: TaskError {
                    message,
                    retryable: false,
                    retry_after_ms: None,
                },
            },
            None => self.clone(),
        }
    }
}

/// How deeply `value` nests arrays and objects (0 for a scalar), without recursion.
pub(super) fn json_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((value, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(depth + 1);
        stack.extend(children.map(|child| (child, depth + 1)));
    }
    deepest
}
