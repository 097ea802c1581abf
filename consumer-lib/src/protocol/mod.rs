//! The Chime wire protocol, defined once and shared by the scheduler and every consumer:
//! the message types ([`messages`]), the idempotency-key derivation ([`run_id`](mod@run_id)) and the
//! RabbitMQ topology — exchange and queue names and their arguments ([`topology`]) — and
//! topic-pattern matching ([`topic`]).
//!
//! `docs/protocol.md` describes the same protocol for consumers written in other languages.

pub mod cancel;
pub mod dead_letter;
pub mod instant;
pub mod messages;
pub mod run_id;
pub mod topic;
pub mod topology;
pub mod user_id;

pub use cancel::CancelMessage;
pub use dead_letter::DeadLetterMessage;
pub use messages::{
    AckMessage, AttemptRecord, BatchKind, DeliveryMode, HeartbeatMessage, MAX_OBSERVER_PATTERNS,
    MAX_OUTPUT_BYTES, MAX_OUTPUT_DEPTH, MAX_VERSION_LEN, OBSERVE_INTERVAL_MS, OBSERVER_TTL_MS,
    ObserveMessage, PRESENCE_INTERVAL_MS, PRESENCE_TTL_MS, PresenceMessage, Progress,
    ProtocolError, Reply, ReplyBatch, ReplyItem, ResultMessage, TaskError, TaskMessage,
    TaskOutcome,
};
pub use run_id::{broadcast_idempotency_key, item_run_id, manual_run_id, run_id};

/// Version carried in every message's `v` field. A reader rejects a message with a
/// different version instead of guessing at its meaning.
pub const PROTOCOL_VERSION: u32 = 1;
