//! What an observer's sessions share: its settings and the type of its handler. Kept
//! apart from `mod.rs` so the session and registration code depend on it without
//! depending on the runtime that owns them.

use std::time::Duration;

use crate::{
    handler::{BoxFuture, HandlerError},
    protocol::TaskMessage,
};

/// What an observer's handler returns: `Ok(())` to acknowledge the copy, or a
/// [`HandlerError`] (retryable: back to the queue; permanent: dead-lettered).
pub type ObserveResult = Result<(), HandlerError>;

/// An observer's handler, boxed.
pub(super) type ObserveFn = dyn Fn(TaskMessage) -> BoxFuture<'static, ObserveResult> + Send + Sync;

#[derive(Debug)]
pub(super) struct Settings {
    pub(super) amqp_url: String,
    pub(super) name: String,
    pub(super) patterns: Vec<String>,
    pub(super) concurrency: usize,
    pub(super) prefetch: u16,
    pub(super) drain_timeout: Duration,
}
