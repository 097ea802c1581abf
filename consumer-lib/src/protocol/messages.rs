//! Message bodies that cross RabbitMQ, as JSON: the task the scheduler publishes, and the
//! ack and result replies a consumer sends back.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::PROTOCOL_VERSION;

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
/// [`super::topology::task_route`]) and what consumers do with them.
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
    /// Run id and idempotency key, see [`super::run_id()`].
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
    #[serde(serialize_with = "super::instant::serialize")]
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
    #[serde(serialize_with = "super::instant::serialize")]
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

/// A message a consumer sends back to the scheduler on the reply exchange.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// The consumer received the task and is about to run its handler.
    Ack(AckMessage),
    /// The handler finished, successfully or not.
    Result(ResultMessage),
    /// The handler is still running, optionally with progress to show on the run.
    Heartbeat(HeartbeatMessage),
    /// "This instance is alive": sent periodically by every consumer instance, so the
    /// scheduler knows which zones have live consumers.
    Presence(PresenceMessage),
    /// "Observer `observer` wants copies of the tasks matching these patterns": sent by
    /// an observer when it connects and every [`OBSERVE_INTERVAL_MS`], so the scheduler
    /// publishes observer copies only for jobs someone observes.
    Observe(ObserveMessage),
}

impl Reply {
    /// Parses a reply body and checks its version.
    pub fn from_slice(body: &[u8]) -> Result<Self, ProtocolError> {
        let reply: Reply = serde_json::from_slice(body)?;
        check_version(reply.version())?;
        Ok(reply)
    }

    /// Parses a reply message body that holds one reply or a [`ReplyBatch`], and checks
    /// every version. The replies come back in the order they were sent.
    pub fn many_from_slice(body: &[u8]) -> Result<Vec<Self>, ProtocolError> {
        #[derive(Deserialize)]
        struct Kind<'a> {
            #[serde(rename = "type", borrow)]
            kind: Option<std::borrow::Cow<'a, str>>,
        }
        let Kind { kind } = serde_json::from_slice(body)?;
        if kind.as_deref() != Some("batch") {
            return Ok(vec![Self::from_slice(body)?]);
        }
        let batch: ReplyBatch = serde_json::from_slice(body)?;
        check_version(batch.v)?;
        for reply in &batch.replies {
            check_version(reply.version())?;
        }
        Ok(batch.replies)
    }

    /// Parses a reply message body item by item: one reply, or a [`ReplyBatch`] whose
    /// items are checked one at a time, so a bad item (a missing field, an output nested
    /// past the JSON depth limit, another version) is refused alone with its reason and
    /// the others still parse. Errs as a whole only when the message is not one reply and
    /// not a batch envelope (`{"v": 1, "type": "batch", "replies": [...]}`). Each item
    /// comes back with its own JSON text, in the order sent.
    pub fn items_from_slice(body: &[u8]) -> Result<Vec<ReplyItem>, ProtocolError> {
        #[derive(Deserialize)]
        struct Envelope<'a> {
            v: u32,
            #[serde(rename = "type")]
            _kind: BatchKind,
            #[serde(borrow)]
            replies: Vec<&'a serde_json::value::RawValue>,
        }
        #[derive(Deserialize)]
        struct Kind<'a> {
            #[serde(rename = "type", borrow)]
            kind: Option<std::borrow::Cow<'a, str>>,
        }
        // Skipping a value (what `RawValue` does) has no depth limit; parsing the tag
        // alone does not descend into the rest.
        let is_batch = serde_json::from_slice::<Kind<'_>>(body)
            .map(|k| k.kind.as_deref() == Some("batch"))
            .unwrap_or(false);
        if !is_batch {
            let reply = Self::from_slice(body);
            return Ok(vec![ReplyItem {
                body: body.to_vec(),
                reply,
            }]);
        }
        let envelope: Envelope<'_> = serde_json::from_slice(body)?;
        check_version(envelope.v)?;
        Ok(envelope
            .replies
            .into_iter()
            .map(|raw| ReplyItem {
                body: raw.get().as_bytes().to_vec(),
                reply: Self::from_slice(raw.get().as_bytes()),
            })
            .collect())
    }

    /// Serialises the reply to its JSON body.
    pub fn to_vec(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a reply message always serialises")
    }

    /// The protocol version the reply carries.
    pub fn version(&self) -> u32 {
        match self {
            Reply::Ack(ack) => ack.v,
            Reply::Result(result) => result.v,
            Reply::Heartbeat(heartbeat) => heartbeat.v,
            Reply::Presence(presence) => presence.v,
            Reply::Observe(observe) => observe.v,
        }
    }

    /// The task the reply is about (none for a presence message).
    pub fn task_id(&self) -> Option<Uuid> {
        match self {
            Reply::Ack(ack) => Some(ack.task_id),
            Reply::Result(result) => Some(result.task_id),
            Reply::Heartbeat(heartbeat) => Some(heartbeat.task_id),
            Reply::Presence(_) | Reply::Observe(_) => None,
        }
    }
}

/// One item of a reply message (see [`Reply::items_from_slice`]): its JSON text and the
/// reply it holds, or why it cannot be used.
#[derive(Debug)]
pub struct ReplyItem {
    /// The item's JSON text as sent.
    pub body: Vec<u8>,
    /// The reply, or why the item is refused.
    pub reply: Result<Reply, ProtocolError>,
}

/// Several replies in one message, `{"v": 1, "type": "batch", "replies": [...]}`: a
/// consumer under load sends its acks, heartbeats and results this way, and the
/// scheduler applies them in order, in one transaction. A batch never holds a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplyBatch {
    /// Protocol version.
    pub v: u32,
    /// Always `"batch"`.
    #[serde(rename = "type")]
    pub kind: BatchKind,
    /// The replies, in the order they were sent.
    pub replies: Vec<Reply>,
}

/// The `type` of a [`ReplyBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchKind {
    /// `"batch"`.
    Batch,
}

impl ReplyBatch {
    /// The body of a batch of replies already serialised with [`Reply::to_vec`], without
    /// serialising them again.
    pub fn body_of(replies: &[Vec<u8>]) -> Vec<u8> {
        let head = format!(r#"{{"v":{PROTOCOL_VERSION},"type":"batch","replies":["#);
        let size = head.len() + replies.iter().map(|r| r.len() + 1).sum::<usize>() + 2;
        let mut body = Vec::with_capacity(size);
        body.extend_from_slice(head.as_bytes());
        for (i, reply) in replies.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(reply);
        }
        body.extend_from_slice(b"]}");
        body
    }
}

/// "I have the task and am running it."
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AckMessage {
    /// Protocol version.
    pub v: u32,
    /// The task's id (run id).
    pub task_id: Uuid,
    /// The attempt being acknowledged.
    pub attempt: u32,
    /// Consumer instance id.
    pub consumer: String,
    /// When the consumer received the task.
    #[serde(serialize_with = "super::instant::serialize")]
    pub acked_at: DateTime<Utc>,
}

/// "The handler finished with this outcome."
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultMessage {
    /// Protocol version.
    pub v: u32,
    /// The task's id (run id).
    pub task_id: Uuid,
    /// The attempt this result answers.
    pub attempt: u32,
    /// Consumer instance id.
    pub consumer: String,
    /// When the handler finished (for a replayed result: when it first finished).
    #[serde(serialize_with = "super::instant::serialize")]
    pub finished_at: DateTime<Utc>,
    /// True when this result was re-sent from the idempotency store for a duplicate
    /// delivery instead of running the handler again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// What happened.
    #[serde(flatten)]
    pub outcome: TaskOutcome,
}

/// "I am still running this task." Sent periodically while a handler runs, and at once
/// when the handler reports progress; each one extends the run's deadline by the job's
/// run timeout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeartbeatMessage {
    /// Protocol version.
    pub v: u32,
    /// The task's id (run id).
    pub task_id: Uuid,
    /// The attempt being run.
    pub attempt: u32,
    /// Consumer instance id.
    pub consumer: String,
    /// When the consumer sent it.
    #[serde(serialize_with = "super::instant::serialize")]
    pub at: DateTime<Utc>,
    /// The handler's latest progress report, if it made one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
}

/// "Instance `instance` of group `group` is alive." Sent every [`PRESENCE_INTERVAL_MS`];
/// an instance not heard from for [`PRESENCE_TTL_MS`] counts as gone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PresenceMessage {
    /// Protocol version.
    pub v: u32,
    /// Consumer instance id.
    pub instance: String,
    /// The instance's consumer group.
    pub group: String,
    /// The instance's zone, if it declared one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Whether the instance receives the group's broadcasts.
    #[serde(default)]
    pub broadcast: bool,
    /// When it was sent.
    #[serde(serialize_with = "super::instant::serialize")]
    pub at: DateTime<Utc>,
}

/// "Observer `observer` has its queue bound to these patterns." A copy is published to
/// [`TOPIC_EXCHANGE`](super::topology::TOPIC_EXCHANGE) only for a task whose
/// `<app>.<job>` matches a pattern announced within [`OBSERVER_TTL_MS`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObserveMessage {
    /// Protocol version.
    pub v: u32,
    /// The observer's name (its queue is `chime.observe.<name>`).
    pub observer: String,
    /// Its topic patterns over `<app>.<job>`, as bound to its queue.
    pub patterns: Vec<String>,
    /// When it was sent.
    #[serde(serialize_with = "super::instant::serialize")]
    pub at: DateTime<Utc>,
}

/// Most patterns one observer may register: the scheduler matches every task against
/// all registered patterns.
pub const MAX_OBSERVER_PATTERNS: usize = 64;
/// How often an observer repeats its [`ObserveMessage`] while connected.
pub const OBSERVE_INTERVAL_MS: u64 = 10 * 60 * 1_000;
/// How long a pattern stays registered after its observer last announced it: copies keep
/// filling the observer's durable queue through restarts and outages shorter than this.
pub const OBSERVER_TTL_MS: u64 = 7 * 24 * 60 * 60 * 1_000;

/// How often a consumer instance announces itself.
pub const PRESENCE_INTERVAL_MS: u64 = 5_000;
/// How long an instance counts as live after its last presence message.
pub const PRESENCE_TTL_MS: u64 = 3 * PRESENCE_INTERVAL_MS;

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
    #[serde(serialize_with = "super::instant::serialize")]
    pub at: DateTime<Utc>,
    /// The consumer instance involved, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// The error reported or the reason for the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the next attempt was scheduled, if the failure was retried after a backoff.
    #[serde(
        serialize_with = "super::instant::serialize_option",
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
fn json_depth(value: &Value) -> usize {
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

pub(crate) fn check_version(found: u32) -> Result<(), ProtocolError> {
    if found == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(ProtocolError::UnsupportedVersion { found })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn task() -> TaskMessage {
        TaskMessage {
            v: PROTOCOL_VERSION,
            task_id: Uuid::from_u128(1),
            job_id: Uuid::from_u128(2),
            app: "shop".into(),
            job: "close-orders".into(),
            group: "orders".into(),
            fire_time: "2026-11-21T10:00:00Z".parse().unwrap(),
            shard: 0,
            shard_total: 1,
            attempt: 1,
            mode: DeliveryMode::Group,
            zone: None,
            payload: json!({"older_than_min": 30}),
            published_at: "2026-11-21T10:00:00.004Z".parse().unwrap(),
            run_timeout_ms: Some(300_000),
        }
    }

    #[test]
    fn task_round_trips() {
        let task = task();
        assert_eq!(TaskMessage::from_slice(&task.to_vec()).unwrap(), task);
    }

    #[test]
    fn task_with_other_version_is_rejected() {
        let mut task = task();
        task.v = 2;
        let err = TaskMessage::from_slice(&task.to_vec()).unwrap_err();
        assert!(matches!(
            err,
            ProtocolError::UnsupportedVersion { found: 2 }
        ));
    }

    #[test]
    fn garbage_is_malformed() {
        assert!(matches!(
            TaskMessage::from_slice(b"not json"),
            Err(ProtocolError::Malformed(_))
        ));
        assert!(matches!(
            Reply::from_slice(br#"{"type":"ack","v":1}"#),
            Err(ProtocolError::Malformed(_))
        ));
    }

    #[test]
    fn result_wire_shape_is_flat() {
        let reply = Reply::Result(ResultMessage {
            v: 1,
            task_id: Uuid::from_u128(1),
            attempt: 2,
            consumer: "host-1".into(),
            finished_at: "2026-11-21T10:00:01Z".parse().unwrap(),
            replayed: false,
            outcome: TaskOutcome::Failed {
                error: TaskError {
                    message: "db down".into(),
                    retryable: true,
                    retry_after_ms: Some(5000),
                },
            },
        });
        let value: Value = serde_json::from_slice(&reply.to_vec()).unwrap();
        assert_eq!(
            value,
            json!({
                "type": "result", "v": 1, "task_id": Uuid::from_u128(1), "attempt": 2,
                "consumer": "host-1", "finished_at": "2026-11-21T10:00:01.000Z",
                "status": "failed",
                "error": {"message": "db down", "retryable": true, "retry_after_ms": 5000}
            })
        );
        assert_eq!(Reply::from_slice(&reply.to_vec()).unwrap(), reply);
    }

    #[test]
    fn heartbeat_wire_shape() {
        let body = json!({
            "type": "heartbeat", "v": 1, "task_id": Uuid::from_u128(7), "attempt": 2,
            "consumer": "py-worker-3", "at": "2026-11-21T10:00:05Z",
            "progress": {"percent": 40.0, "note": "page 4 of 10"}
        });
        let reply = Reply::from_slice(body.to_string().as_bytes()).unwrap();
        let Reply::Heartbeat(heartbeat) = &reply else {
            panic!("expected a heartbeat")
        };
        assert_eq!(heartbeat.progress.as_ref().unwrap().percent, Some(40.0));
        assert_eq!(reply.task_id(), Some(Uuid::from_u128(7)));
        let bare = json!({
            "type": "heartbeat", "v": 1, "task_id": Uuid::from_u128(7), "attempt": 1,
            "consumer": "c", "at": "2026-11-21T10:00:05Z"
        });
        assert!(Reply::from_slice(bare.to_string().as_bytes()).is_ok());
    }

    #[test]
    fn mode_and_zone_travel_only_when_not_default() {
        let plain = serde_json::to_value(task()).unwrap();
        assert!(plain.get("mode").is_none() && plain.get("zone").is_none());
        let mut zoned = task();
        zoned.mode = DeliveryMode::Zone;
        zoned.zone = Some("dc1".into());
        let value = serde_json::to_value(&zoned).unwrap();
        assert_eq!(value["mode"], "zone");
        assert_eq!(value["zone"], "dc1");
        assert_eq!(TaskMessage::from_slice(&zoned.to_vec()).unwrap(), zoned);
        for mode in ["group", "broadcast", "zone", "sharded"] {
            assert_eq!(DeliveryMode::parse(mode).unwrap().as_str(), mode);
        }
    }

    #[test]
    fn presence_wire_shape() {
        let body = json!({
            "type": "presence", "v": 1, "instance": "web-1", "group": "catalog",
            "zone": "dc1", "broadcast": true, "at": "2026-11-21T10:00:05Z"
        });
        let reply = Reply::from_slice(body.to_string().as_bytes()).unwrap();
        let Reply::Presence(presence) = &reply else {
            panic!("expected presence")
        };
        assert_eq!(presence.zone.as_deref(), Some("dc1"));
        assert!(presence.broadcast);
        assert_eq!(reply.task_id(), None);
    }

    #[test]
    fn observe_wire_shape() {
        let body = json!({
            "type": "observe", "v": 1, "observer": "audit",
            "patterns": ["shop.*", "billing.#"], "at": "2026-11-21T10:00:05Z"
        });
        let reply = Reply::from_slice(body.to_string().as_bytes()).unwrap();
        let Reply::Observe(observe) = &reply else {
            panic!("expected observe")
        };
        assert_eq!(observe.observer, "audit");
        assert_eq!(observe.patterns, ["shop.*", "billing.#"]);
        assert_eq!(reply.task_id(), None);
        assert_eq!(Reply::from_slice(&reply.to_vec()).unwrap(), reply);
    }

    #[test]
    fn task_without_run_timeout_still_parses() {
        let mut value = serde_json::to_value(task()).unwrap();
        value.as_object_mut().unwrap().remove("run_timeout_ms");
        let parsed = TaskMessage::from_slice(value.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.run_timeout_ms, None);
    }

    #[test]
    fn succeeded_result_parses_from_documented_json() {
        let body = json!({
            "type": "result", "v": 1, "task_id": Uuid::from_u128(7), "attempt": 1,
            "consumer": "py-worker-3", "finished_at": "2026-11-21T10:00:01.250Z",
            "status": "succeeded", "output": {"closed": 12}
        });
        let reply = Reply::from_slice(body.to_string().as_bytes()).unwrap();
        let Reply::Result(result) = reply else {
            panic!("expected a result")
        };
        assert_eq!(
            result.outcome,
            TaskOutcome::Succeeded {
                output: Some(json!({"closed": 12}))
            }
        );
        assert!(!result.replayed);
    }

    fn ack(n: u128) -> Reply {
        Reply::Ack(AckMessage {
            v: 1,
            task_id: Uuid::from_u128(n),
            attempt: 1,
            consumer: "c".into(),
            acked_at: "2026-11-21T10:00:00Z".parse().unwrap(),
        })
    }

    #[test]
    fn a_batch_carries_replies_in_order_and_one_reply_parses_alone() {
        let replies = vec![ack(1), ack(2), ack(3)];
        let bodies: Vec<Vec<u8>> = replies.iter().map(Reply::to_vec).collect();
        let body = ReplyBatch::body_of(&bodies);
        assert_eq!(Reply::many_from_slice(&body).unwrap(), replies);
        // The hand-built body is what serde would write.
        let typed: ReplyBatch = serde_json::from_slice(&body).unwrap();
        assert_eq!(typed.kind, BatchKind::Batch);
        assert_eq!(serde_json::to_vec(&typed).unwrap(), body);
        assert_eq!(Reply::many_from_slice(&bodies[1]).unwrap(), vec![ack(2)]);
    }

    #[test]
    fn batches_are_checked_whole() {
        let inner = ReplyBatch::body_of(&[ack(1).to_vec()]);
        let nested = ReplyBatch::body_of(&[ack(2).to_vec(), inner]);
        assert!(matches!(
            Reply::many_from_slice(&nested),
            Err(ProtocolError::Malformed(_))
        ));
        let mut old = serde_json::to_value(ack(3)).unwrap();
        old["v"] = json!(2);
        let mixed = ReplyBatch::body_of(&[ack(4).to_vec(), old.to_string().into_bytes()]);
        assert!(matches!(
            Reply::many_from_slice(&mixed),
            Err(ProtocolError::UnsupportedVersion { found: 2 })
        ));
        assert!(Reply::many_from_slice(b"[1, 2]").is_err());
        assert!(Reply::many_from_slice(br#"{"type": "batch", "v": 1}"#).is_err());
    }

    #[test]
    fn batch_items_are_checked_one_by_one() {
        // An output nested 126 levels (too deep inside the batch as a whole, fine on its
        // own); one nested past serde_json's depth limit of 128, a missing field and
        // another version: each refused alone, the acks around them kept.
        let nested = |levels: usize| {
            format!(
                r#"{{"v":1,"type":"result","task_id":"{}","attempt":1,"consumer":"c","finished_at":"2026-11-21T10:00:00Z","status":"succeeded","output":{}1{}}}"#,
                Uuid::from_u128(9),
                "[".repeat(levels),
                "]".repeat(levels)
            )
            .into_bytes()
        };
        let missing = br#"{"v":1,"type":"ack","task_id":"00000000-0000-0000-0000-000000000005","attempt":1,"consumer":"c"}"#;
        let mut old = serde_json::to_value(ack(6)).unwrap();
        old["v"] = json!(2);
        let body = ReplyBatch::body_of(&[
            ack(1).to_vec(),
            nested(126),
            nested(200),
            missing.to_vec(),
            old.to_string().into_bytes(),
            ack(2).to_vec(),
        ]);
        assert!(
            Reply::many_from_slice(&body).is_err(),
            "parsed whole, the batch fails"
        );
        let items = Reply::items_from_slice(&body).unwrap();
        let ok: Vec<bool> = items.iter().map(|i| i.reply.is_ok()).collect();
        assert_eq!(ok, [true, true, false, false, false, true]);
        assert_eq!(items[0].reply.as_ref().unwrap(), &ack(1));
        assert_eq!(items[5].reply.as_ref().unwrap(), &ack(2));
        let error = |i: usize| items[i].reply.as_ref().unwrap_err().to_string();
        assert!(error(2).contains("recursion limit"), "{}", error(2));
        assert!(
            error(3).contains("missing field `acked_at`"),
            "{}",
            error(3)
        );
        assert!(error(4).contains("version 2"), "{}", error(4));
        assert_eq!(items[3].body, missing);
        // One reply alone is one item; a broken envelope fails whole.
        let one = Reply::items_from_slice(&ack(3).to_vec()).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].reply.as_ref().unwrap(), &ack(3));
        assert!(Reply::items_from_slice(br#"{"type": "batch", "v": 1}"#).is_err());
        assert!(
            Reply::items_from_slice(b"not json").unwrap()[0]
                .reply
                .is_err()
        );
    }

    #[test]
    fn outputs_over_the_limits_become_permanent_failures() {
        let nested = |levels: usize| {
            let mut value = json!(1);
            for _ in 0..levels {
                value = json!([value]);
            }
            value
        };
        assert_eq!(json_depth(&json!(1)), 0);
        assert_eq!(json_depth(&json!({"a": [1, {"b": 2}]})), 3);
        assert_eq!(json_depth(&nested(MAX_OUTPUT_DEPTH)), MAX_OUTPUT_DEPTH);
        let ok = TaskOutcome::Succeeded {
            output: Some(nested(MAX_OUTPUT_DEPTH)),
        };
        assert_eq!(ok.within_limits(), ok);
        let refused = |output: Value| match (TaskOutcome::Succeeded {
            output: Some(output),
        })
        .within_limits()
        {
            TaskOutcome::Failed { error } => {
                assert!(!error.retryable);
                error.message
            }
            other => panic!("not refused: {other:?}"),
        };
        assert!(refused(nested(126)).contains("nested 126 levels"));
        let big = json!("x".repeat(MAX_OUTPUT_BYTES));
        assert!(refused(big).contains("bytes of JSON"));
        let failed = TaskOutcome::Failed {
            error: TaskError {
                message: "x".into(),
                retryable: true,
                retry_after_ms: None,
            },
        };
        assert_eq!(failed.within_limits(), failed);
    }

    #[test]
    fn every_instant_is_written_with_milliseconds() {
        let now: DateTime<Utc> = "2026-11-21T10:00:00.123456789Z".parse().unwrap();
        let replies = [
            Reply::Ack(AckMessage {
                v: 1,
                task_id: Uuid::nil(),
                attempt: 1,
                consumer: "c".into(),
                acked_at: now,
            }),
            Reply::Heartbeat(HeartbeatMessage {
                v: 1,
                task_id: Uuid::nil(),
                attempt: 1,
                consumer: "c".into(),
                at: now,
                progress: None,
            }),
        ];
        for reply in replies {
            let text = String::from_utf8(reply.to_vec()).unwrap();
            assert!(text.contains(r#""2026-11-21T10:00:00.123Z""#), "{text}");
            assert!(!text.contains("123456"), "{text}");
        }
    }
}
