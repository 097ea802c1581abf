//! Idempotency stores: remember each task's outcome by its idempotency key, so a duplicate
//! delivery re-sends the recorded result instead of running the handler again.
//!
//! - [`MemoryStore`] (the default): bounded, per process. Duplicates that reach the same
//!   instance run once; duplicates spread over instances may each run.
//! - `PgIdempotencyStore` (feature `postgres`): shared by every instance. Its
//!   transactional handler form records the key in the same transaction as the handler's
//!   own writes, so those writes happen exactly once.
//!   It keeps outcomes for 7 days (`PgIdempotencyStore::retention`) and prunes older ones
//!   in the background, in batches, at most every 10 minutes.

mod memory;
#[cfg(feature = "postgres")]
mod postgres;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::protocol::TaskOutcome;

pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub(crate) use postgres::TxExecution;
#[cfg(feature = "postgres")]
pub use postgres::{PgIdempotencyStore, TransactionalHandler, tx_handler};

/// A finished task's outcome, as kept by an idempotency store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedOutcome {
    /// What the handler returned.
    pub outcome: TaskOutcome,
    /// When it finished.
    pub finished_at: DateTime<Utc>,
}

/// Why an idempotency store could not answer.
#[derive(Debug, thiserror::Error)]
pub enum IdempotencyError {
    /// The backing database failed.
    #[cfg(feature = "postgres")]
    #[error("idempotency store database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A stored outcome could not be read back.
    #[error("corrupt idempotency record for {key}: {reason}")]
    Corrupt {
        /// The key whose record is unreadable.
        key: Uuid,
        /// What was wrong with it.
        reason: String,
    },
}

/// Remembers outcomes by idempotency key. Only successes are recorded: after a failure —
/// retryable or permanent — a later attempt (a retry, or a replay from the dead-letter
/// queue once the handler was fixed) runs the handler again.
#[async_trait]
pub trait IdempotencyStore: Send + Sync + 'static {
    /// The recorded outcome of `key`, if it finished before.
    async fn lookup(&self, key: Uuid) -> Result<Option<RecordedOutcome>, IdempotencyError>;
    /// Records the outcome of `key`. Recording a key twice keeps the first outcome.
    async fn record(&self, key: Uuid, outcome: &RecordedOutcome) -> Result<(), IdempotencyError>;
}

/// Whether an outcome belongs in an idempotency store: only a success is final for the
/// handler's effects; a failed run may be replayed after a fix and must run again.
pub(crate) fn is_final(outcome: &TaskOutcome) -> bool {
    matches!(outcome, TaskOutcome::Succeeded { .. })
}
