//! A task on its way through the dispatcher, with what the dispatcher needs to know
//! about it besides the message.

use chime_consumer::protocol::TaskMessage;
use chrono::{DateTime, Utc};

/// A task to publish, and whether this is its first publish (only first publishes count
/// towards fire lateness).
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The task.
    pub task: TaskMessage,
    /// A first attempt is not published before this instant: its fire time, plus the
    /// fire's jitter for a scheduled fire (see [`crate::domain::window`]).
    pub due: DateTime<Utc>,
    /// False when the reconciler re-publishes it.
    pub first: bool,
    /// When it was handed over, or released at its fire time.
    pub since: std::time::Instant,
    /// Whether it may only be published while this node trusts its shard's lease.
    pub fenced: bool,
    /// Whether its run must be checked against the store before publishing (its job
    /// changed while the task waited, or changes may have been missed).
    pub recheck: bool,
}
