//! What a consumer's sessions and deliveries share: its settings, its handlers by job and
//! the state every delivery task holds ([`Shared`]). Kept apart from `mod.rs` so the
//! session, delivery and presence code depend on it without depending on the runtime
//! that owns them.

use std::{collections::HashMap, sync::Arc, time::Duration};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::key_lock::KeyLocks;
use crate::{handler::Handler, idempotency::IdempotencyStore};

/// Handlers by job name, and the one for every other job.
pub(crate) struct Handlers {
    pub(crate) by_job: HashMap<String, Registered>,
    pub(crate) fallback: Option<Registered>,
}

impl Handlers {
    /// The handler for tasks of `job`.
    pub(crate) fn for_job(&self, job: &str) -> Option<&Registered> {
        self.by_job.get(job).or(self.fallback.as_ref())
    }
}

#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) amqp_url: String,
    pub(crate) group: String,
    pub(crate) instance: String,
    /// The zone whose work queue this instance also consumes.
    pub(crate) zone: Option<String>,
    /// Whether this instance consumes the group's broadcasts.
    pub(crate) broadcast: bool,
    pub(crate) concurrency: usize,
    pub(crate) prefetch: u16,
    pub(crate) drain_timeout: Duration,
    pub(crate) heartbeat_interval: Duration,
    /// Whether replies may travel as batch messages.
    pub(crate) batch_replies: bool,
    /// Only tasks whose validated `user_id` is this user run (see
    /// [`crate::ConsumerBuilder::scheduler_user`]).
    pub(crate) scheduler_user: Option<String>,
}

/// A handler as registered for a job name.
pub(crate) enum Registered {
    Plain(Arc<dyn Handler>),
    #[cfg(feature = "postgres")]
    Transactional(
        Arc<dyn crate::idempotency::TransactionalHandler>,
        crate::idempotency::PgIdempotencyStore,
    ),
}

/// What every delivery task shares.
pub(crate) struct Shared {
    pub(crate) settings: Arc<Settings>,
    pub(crate) idempotency: Arc<dyn IdempotencyStore>,
    pub(crate) handlers: Arc<Handlers>,
    pub(crate) key_locks: KeyLocks,
    /// One permit per handler allowed to run at once (the concurrency). Only the handler
    /// holds one: waiting for reply confirms does not keep the next task from starting.
    pub(crate) handler_slots: Arc<Semaphore>,
    /// Cancelled on shutdown: deliveries still waiting for a slot are left to the close.
    pub(crate) stopping: CancellationToken,
    /// The runs cancelled so far, and the handlers to tell.
    pub(crate) cancels: super::cancels::CancelBook,
}

impl Shared {
    /// Waits for a handler slot; `None` once shutdown began.
    pub(crate) async fn handler_slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        tokio::select! {
            biased;
            () = self.stopping.cancelled() => None,
            slot = self.handler_slots.clone().acquire_owned() => slot.ok(),
        }
    }
}
