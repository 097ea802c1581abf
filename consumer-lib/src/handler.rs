//! What an application writes: a handler that receives a [`TaskContext`] and returns a
//! [`HandlerResult`] — success with optional output, a retryable error, or a permanent one.

use std::{future::Future, pin::Pin, time::Duration};

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use crate::protocol::{
    DeliveryMode, Progress, TaskError, TaskMessage, TaskOutcome, broadcast_idempotency_key,
};

/// Where a handler's progress reports go: the delivery's heartbeat loop.
pub(crate) type ProgressSink = std::sync::Arc<tokio::sync::watch::Sender<Option<Progress>>>;

/// What a handler returns: `Ok(output)` on success, where `output` (if any) is shown on the
/// run, or a [`HandlerError`].
pub type HandlerResult = Result<Option<Value>, HandlerError>;

/// A boxed handler future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a handler failed. The variant decides what the scheduler does next.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HandlerError {
    /// Running the task again may succeed (a dependency was down, a lock was busy).
    #[error("retryable: {message}")]
    Retryable {
        /// Why it failed.
        message: String,
        /// When to retry, if the handler knows better than the job's backoff.
        retry_after: Option<Duration>,
    },
    /// Running the task again will not help (bad payload, business rule violated).
    #[error("permanent: {message}")]
    Permanent {
        /// Why it failed.
        message: String,
    },
}

impl HandlerError {
    /// A failure worth retrying.
    pub fn retryable(message: impl std::fmt::Display) -> Self {
        HandlerError::Retryable {
            message: message.to_string(),
            retry_after: None,
        }
    }

    /// A failure worth retrying no sooner than `delay` from now.
    pub fn retry_after(message: impl std::fmt::Display, delay: Duration) -> Self {
        HandlerError::Retryable {
            message: message.to_string(),
            retry_after: Some(delay),
        }
    }

    /// A failure that retrying cannot fix.
    pub fn permanent(message: impl std::fmt::Display) -> Self {
        HandlerError::Permanent {
            message: message.to_string(),
        }
    }

    /// Whether this failure may be retried.
    pub fn is_retryable(&self) -> bool {
        matches!(self, HandlerError::Retryable { .. })
    }

    /// The failure as it travels on the wire.
    pub fn to_task_error(&self) -> TaskError {
        match self {
            HandlerError::Retryable {
                message,
                retry_after,
            } => TaskError {
                message: message.clone(),
                retryable: true,
                retry_after_ms: retry_after.map(|d| d.as_millis() as u64),
            },
            HandlerError::Permanent { message } => TaskError {
                message: message.clone(),
                retryable: false,
                retry_after_ms: None,
            },
        }
    }
}

/// Converts a handler's result into the outcome reported to the scheduler.
pub fn outcome_of(result: &HandlerResult) -> TaskOutcome {
    match result {
        Ok(output) => TaskOutcome::Succeeded {
            output: output.clone(),
        },
        Err(error) => TaskOutcome::Failed {
            error: error.to_task_error(),
        },
    }
}

/// Longest progress note sent; longer notes are cut.
const MAX_NOTE_CHARS: usize = 500;

/// Everything a handler knows about the task it runs.
#[derive(Debug, Clone)]
pub struct TaskContext {
    task: TaskMessage,
    consumer: String,
    publisher: Option<String>,
    progress: Option<ProgressSink>,
    cancel: tokio_util::sync::CancellationToken,
}

impl TaskContext {
    /// Wraps a received task for consumer instance `consumer`.
    pub fn new(task: TaskMessage, consumer: impl Into<String>) -> Self {
        Self {
            task,
            consumer: consumer.into(),
            publisher: None,
            progress: None,
            cancel: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// Connects the context to its run's cancellation: `token` fires when the run is
    /// cancelled.
    pub(crate) fn with_cancel(mut self, token: tokio_util::sync::CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// Whether an operator cancelled this run (`POST /v1/runs/{id}/cancel`) while the
    /// handler runs. The consumer learns of it from chimed's cancel notice, usually within
    /// a second. The run is already `cancelled` on the scheduler: whatever the handler
    /// returns now is recorded only as a late outcome in the run's history. A handler that
    /// can stop part way should stop, undoing what it must, and return an error.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Completes once the run is cancelled (see [`TaskContext::is_cancelled`]); never, if
    /// it is not. Use it in `tokio::select!` beside the work:
    ///
    /// ```no_run
    /// use chime_consumer::{HandlerError, HandlerResult, TaskContext};
    ///
    /// async fn export(ctx: TaskContext) -> HandlerResult {
    ///     tokio::select! {
    ///         () = ctx.cancelled() => Err(HandlerError::permanent("cancelled")),
    ///         () = tokio::time::sleep(std::time::Duration::from_secs(60)) => Ok(None),
    ///     }
    /// }
    /// ```
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }

    /// Connects progress reports to a delivery's heartbeat loop.
    pub(crate) fn with_progress(mut self, sink: ProgressSink) -> Self {
        self.progress = Some(sink);
        self
    }

    /// Reports progress: `percent` done (clamped to 0–100) and/or a short note. It is sent
    /// to the scheduler at once with a heartbeat and shows on the run. Outside a consumer
    /// (e.g. in [`crate::testing`]) it does nothing.
    pub fn report_progress(&self, percent: Option<f64>, note: Option<&str>) {
        let progress = Progress {
            percent: percent
                .filter(|p| p.is_finite())
                .map(|p| p.clamp(0.0, 100.0)),
            note: note.map(|n| n.chars().take(MAX_NOTE_CHARS).collect()),
        };
        if let Some(sink) = &self.progress {
            sink.send_replace(Some(progress));
        }
    }

    /// Sets who published the task (the message's `app_id`: the scheduler node's id).
    pub fn with_publisher(mut self, publisher: Option<String>) -> Self {
        self.publisher = publisher;
        self
    }

    /// The scheduler node that published this delivery, if it said (diagnostics only).
    pub fn publisher(&self) -> Option<&str> {
        self.publisher.as_deref()
    }

    /// The task id, which is also the run id.
    pub fn task_id(&self) -> Uuid {
        self.task.task_id
    }

    /// The idempotency key: the same for every delivery and attempt of this fire (shard
    /// item). Use it to make the handler's side effects happen once.
    ///
    /// For a [`DeliveryMode::Broadcast`] task every instance runs the fire once, so the key
    /// is per (task, instance): [`broadcast_idempotency_key`]`(task_id, consumer)`. For
    /// every other mode it is the task id.
    pub fn idempotency_key(&self) -> Uuid {
        match self.task.mode {
            DeliveryMode::Broadcast => broadcast_idempotency_key(self.task.task_id, &self.consumer),
            DeliveryMode::Group | DeliveryMode::Zone | DeliveryMode::Sharded => self.task.task_id,
        }
    }

    /// How the job's fires are delivered: to one instance of the group, to every
    /// broadcast subscriber, to one instance per zone, or split into shard items.
    pub fn mode(&self) -> DeliveryMode {
        self.task.mode
    }

    /// The zone this item is for, for a [`DeliveryMode::Zone`] task; `None` otherwise.
    pub fn zone(&self) -> Option<&str> {
        self.task.zone.as_deref()
    }

    /// The job's id.
    pub fn job_id(&self) -> Uuid {
        self.task.job_id
    }

    /// The job's name.
    pub fn job(&self) -> &str {
        &self.task.job
    }

    /// The job's app namespace.
    pub fn app(&self) -> &str {
        &self.task.app
    }

    /// The consumer group the task was sent to.
    pub fn group(&self) -> &str {
        &self.task.group
    }

    /// When this fire was scheduled (not when it was delivered).
    pub fn fire_time(&self) -> DateTime<Utc> {
        self.task.fire_time
    }

    /// Delivery attempt, starting at 1.
    pub fn attempt(&self) -> u32 {
        self.task.attempt
    }

    /// The sharding item this task covers, `0..shard_total()` (ElasticJob-style sharding):
    /// a [`DeliveryMode::Sharded`] fire is split into `shard_total()` items spread over
    /// the group's instances, each a task of its own with its own run id, retried alone.
    /// The handler processes only its slice of the data, e.g. rows where
    /// `id % shard_total() == shard()`. For a zone item it is the zone's position among the fire's zones; 0 otherwise.
    pub fn shard(&self) -> u32 {
        self.task.shard
    }

    /// How many sharding items this fire was split into (see [`TaskContext::shard`]); 1
    /// for unsharded jobs.
    pub fn shard_total(&self) -> u32 {
        self.task.shard_total
    }

    /// The payload as JSON.
    pub fn payload(&self) -> &Value {
        &self.task.payload
    }

    /// The payload as a typed struct; a payload of the wrong shape is a permanent failure,
    /// since retrying the same payload cannot fix it.
    pub fn payload_as<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        T::deserialize(&self.task.payload)
            .map_err(|e| HandlerError::permanent(format!("payload does not fit: {e}")))
    }

    /// This consumer instance's id.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The task message as received.
    pub fn task(&self) -> &TaskMessage {
        &self.task
    }
}

/// Starts and runs a handler, turning a panic — in the synchronous call or in the future
/// it returns — into a permanent failure, so one bad task never takes the consumer down.
pub(crate) async fn catch_panic<S, F, T>(start: S) -> Result<T, HandlerError>
where
    S: FnOnce() -> F,
    F: Future<Output = Result<T, HandlerError>>,
{
    use futures_util::FutureExt;
    use std::panic::{AssertUnwindSafe, catch_unwind};
    let future = match catch_unwind(AssertUnwindSafe(start)) {
        Ok(future) => future,
        Err(panic) => return Err(panicked(panic)),
    };
    match AssertUnwindSafe(future).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => Err(panicked(panic)),
    }
}

fn panicked(panic: Box<dyn std::any::Any + Send>) -> HandlerError {
    let reason = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic payload".to_string());
    HandlerError::permanent(format!("handler panicked: {reason}"))
}

/// A task handler. Implemented for every `Fn(TaskContext) -> impl Future<Output =
/// HandlerResult>`, so an `async` closure or function is a handler.
pub trait Handler: Send + Sync + 'static {
    /// Runs the task.
    fn handle(&self, ctx: TaskContext) -> BoxFuture<'static, HandlerResult>;
}

impl<F, Fut> Handler for F
where
    F: Fn(TaskContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    fn handle(&self, ctx: TaskContext) -> BoxFuture<'static, HandlerResult> {
        Box::pin(self(ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    fn ctx(payload: Value) -> TaskContext {
        TaskContext::new(
            TaskMessage {
                v: 1,
                task_id: Uuid::from_u128(1),
                job_id: Uuid::from_u128(2),
                app: "default".into(),
                job: "j".into(),
                group: "g".into(),
                fire_time: Utc::now(),
                shard: 0,
                shard_total: 1,
                attempt: 1,
                mode: Default::default(),
                zone: None,
                payload,
                published_at: Utc::now(),
                run_timeout_ms: None,
            },
            "me",
        )
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Close {
        older_than_min: u32,
    }

    #[test]
    fn typed_payload() {
        let c = ctx(json!({"older_than_min": 30}));
        assert_eq!(
            c.payload_as::<Close>().unwrap(),
            Close { older_than_min: 30 }
        );
        let err = ctx(json!({"older_than_min": "x"}))
            .payload_as::<Close>()
            .unwrap_err();
        assert!(!err.is_retryable());
    }

    #[test]
    fn progress_reaches_the_sink_clamped() {
        let (tx, rx) = tokio::sync::watch::channel(None);
        let c = ctx(Value::Null).with_progress(std::sync::Arc::new(tx));
        c.report_progress(Some(140.0), Some("almost"));
        let sent = rx.borrow().clone().unwrap();
        assert_eq!(sent.percent, Some(100.0));
        assert_eq!(sent.note.as_deref(), Some("almost"));
        // Without a sink it is a no-op rather than an error.
        ctx(Value::Null).report_progress(Some(1.0), None);
    }

    #[test]
    fn broadcast_tasks_have_a_key_per_instance() {
        let group = ctx(Value::Null);
        assert_eq!(group.idempotency_key(), group.task_id());
        assert_eq!(group.mode(), DeliveryMode::Group);
        assert_eq!(group.zone(), None);
        let mut task = group.task().clone();
        task.mode = DeliveryMode::Broadcast;
        let on = |instance: &str| TaskContext::new(task.clone(), instance).idempotency_key();
        assert_eq!(on("a"), broadcast_idempotency_key(task.task_id, "a"));
        assert_ne!(on("a"), on("b"));
        assert_ne!(on("a"), task.task_id);
        task.mode = DeliveryMode::Zone;
        task.zone = Some("dc1".into());
        let zoned = TaskContext::new(task.clone(), "a");
        assert_eq!(zoned.idempotency_key(), task.task_id);
        assert_eq!(zoned.zone(), Some("dc1"));
        task.mode = DeliveryMode::Sharded;
        assert_eq!(
            TaskContext::new(task.clone(), "a").idempotency_key(),
            task.task_id
        );
    }

    #[test]
    fn errors_map_to_the_wire() {
        let e = HandlerError::retry_after("busy", Duration::from_secs(2)).to_task_error();
        assert!(e.retryable);
        assert_eq!(e.retry_after_ms, Some(2000));
        let e = HandlerError::permanent("bad").to_task_error();
        assert!(!e.retryable);
        assert_eq!(e.message, "bad");
    }
}
