//! The replies a consumer sends to the scheduler on the reply exchange — ack, heartbeat,
//! result, presence, observer registration — one per message or several in a batch, and
//! the intervals presence and registration are repeated at.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::outcome::{Progress, TaskOutcome};
use super::{ProtocolError, check_version};
use crate::protocol::PROTOCOL_VERSION;
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
    #[serde(serialize_with = "crate::protocol::instant::serialize")]
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
    #[serde(serialize_with = "crate::protocol::instant::serialize")]
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
    #[serde(serialize_with = "crate::protocol::instant::serialize")]
    pub at: DateTime<Utc>,
    /// The handler's latest progress report, if it made one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
}

/// The longest `version` a presence message may carry; `chimed` ignores a longer one.
pub const MAX_VERSION_LEN: usize = 64;

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
    /// The consumer's software as `name/version` (informational, shown by
    /// `GET /v1/consumers`), at most [`MAX_VERSION_LEN`] printable ASCII characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// When it was sent.
    #[serde(serialize_with = "crate::protocol::instant::serialize")]
    pub at: DateTime<Utc>,
}

/// "Observer `observer` has its queue bound to these patterns." A copy is published to
/// [`TOPIC_EXCHANGE`](crate::protocol::topology::TOPIC_EXCHANGE) only for a task whose
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
    #[serde(serialize_with = "crate::protocol::instant::serialize")]
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
