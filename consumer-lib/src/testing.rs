//! Helpers for testing handlers without a broker: build a task, send it through a JSON
//! round trip (as it would travel), and run a handler on it.
//!
//! ```
//! use chime_consumer::{testing::TaskBuilder, HandlerResult, TaskContext};
//!
//! async fn greet(ctx: TaskContext) -> HandlerResult {
//!     Ok(Some(serde_json::json!({"hello": ctx.payload()["name"]})))
//! }
//!
//! # tokio_test();
//! # fn tokio_test() { tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let task = TaskBuilder::new("greet").payload(serde_json::json!({"name": "ada"})).build();
//! let out = chime_consumer::testing::run_handler(&greet, &task).await.unwrap();
//! assert_eq!(out, Some(serde_json::json!({"hello": "ada"})));
//! # }) }
//! ```

use chrono::{DateTime, DurationRound, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::{
    handler::{Handler, HandlerResult, TaskContext, catch_panic},
    protocol::{PROTOCOL_VERSION, TaskMessage, run_id},
};

/// Builds a [`TaskMessage`] with test defaults: app `default`, group `test`, attempt 1,
/// unsharded, fired now, payload `null`.
#[derive(Debug, Clone)]
pub struct TaskBuilder {
    task: TaskMessage,
}

impl TaskBuilder {
    /// A task of job `job`.
    pub fn new(job: impl Into<String>) -> Self {
        // Millisecond precision, as the protocol writes instants, so a task survives
        // a trip through its JSON unchanged.
        let now = Utc::now()
            .duration_trunc(chrono::TimeDelta::milliseconds(1))
            .unwrap_or_else(|_| Utc::now());
        let job_id = Uuid::now_v7();
        Self {
            task: TaskMessage {
                v: PROTOCOL_VERSION,
                task_id: run_id(job_id, now, 0),
                job_id,
                app: "default".into(),
                job: job.into(),
                group: "test".into(),
                fire_time: now,
                shard: 0,
                shard_total: 1,
                attempt: 1,
                mode: Default::default(),
                zone: None,
                payload: Value::Null,
                published_at: now,
                run_timeout_ms: None,
            },
        }
    }

    /// Sets the payload.
    pub fn payload(mut self, payload: Value) -> Self {
        self.task.payload = payload;
        self
    }

    /// Sets the app.
    pub fn app(mut self, app: impl Into<String>) -> Self {
        self.task.app = app.into();
        self
    }

    /// Sets the group.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.task.group = group.into();
        self
    }

    /// Sets the attempt.
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.task.attempt = attempt;
        self
    }

    /// Sets the scheduled fire time (and the task id derived from it).
    pub fn fire_time(mut self, at: DateTime<Utc>) -> Self {
        self.task.fire_time = at;
        self.task.task_id = run_id(self.task.job_id, at, self.task.shard);
        self
    }

    /// Sets the shard item.
    pub fn shard(mut self, shard: u32, total: u32) -> Self {
        self.task.shard = shard;
        self.task.shard_total = total;
        self.task.task_id = run_id(self.task.job_id, self.task.fire_time, shard);
        self
    }

    /// The task.
    pub fn build(self) -> TaskMessage {
        self.task
    }
}

/// Runs `handler` on `task` after a JSON round trip, as the consumer would, with panics
/// turned into permanent failures.
pub async fn run_handler(handler: &dyn Handler, task: &TaskMessage) -> HandlerResult {
    let received = TaskMessage::from_slice(&task.to_vec()).expect("a built task parses");
    catch_panic(|| handler.handle(TaskContext::new(received, "test-instance"))).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HandlerError;

    async fn panics(_: TaskContext) -> HandlerResult {
        panic!("boom")
    }

    struct PanicsWhenCalled;

    impl Handler for PanicsWhenCalled {
        fn handle(&self, _: TaskContext) -> crate::BoxFuture<'static, HandlerResult> {
            panic!("before any future exists")
        }
    }

    #[tokio::test]
    async fn panic_while_starting_the_handler_is_caught_too() {
        let err = run_handler(&PanicsWhenCalled, &TaskBuilder::new("p").build())
            .await
            .unwrap_err();
        assert_eq!(
            err,
            HandlerError::permanent("handler panicked: before any future exists")
        );
    }

    #[tokio::test]
    async fn panic_becomes_permanent_failure() {
        let err = run_handler(&panics, &TaskBuilder::new("p").build())
            .await
            .unwrap_err();
        assert_eq!(err, HandlerError::permanent("handler panicked: boom"));
    }

    #[test]
    fn shard_changes_task_id() {
        let a = TaskBuilder::new("j").build();
        let b = TaskBuilder { task: a.clone() }.shard(3, 8).build();
        assert_ne!(a.task_id, b.task_id);
        assert_eq!((b.shard, b.shard_total), (3, 8));
    }
}
