//! # chime-consumer
//!
//! The library business applications embed to run tasks fired by the Chime scheduler, and
//! the home of Chime's wire protocol ([`protocol`]) that the scheduler shares.
//!
//! A consumer joins a *group*: the group's tasks arrive on one RabbitMQ work queue and each
//! is run by exactly one member. For every task the consumer publishes an ack, runs the
//! handler registered for the task's job name, publishes the result and then acknowledges
//! the delivery. Delivery is at least once; every task carries an idempotency key
//! ([`TaskContext::idempotency_key`]) and a duplicate delivery replays the recorded outcome
//! from the [`idempotency`] store instead of running the handler again.
//!
//! ```no_run
//! use chime_consumer::{Consumer, HandlerError, HandlerResult, TaskContext};
//!
//! async fn refresh(ctx: TaskContext) -> HandlerResult {
//!     let key = ctx.idempotency_key();
//!     if ctx.payload().get("fail").is_some() {
//!         return Err(HandlerError::retryable("upstream unavailable"));
//!     }
//!     Ok(Some(serde_json::json!({"refreshed": key})))
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), chime_consumer::ConsumerError> {
//!     Consumer::builder("amqp://guest:guest@127.0.0.1:5672/%2f", "catalog")
//!         .handler("refresh-prices", refresh)
//!         .concurrency(16)
//!         .build()?
//!         .run() // until Ctrl-C / SIGTERM, then drains running handlers
//!         .await
//! }
//! ```

pub mod backoff;
mod consumer;
mod error;
mod handler;
pub mod idempotency;
pub mod protocol;
pub mod testing;

pub use consumer::{Consumer, ConsumerBuilder, default_instance_id, shutdown_signal};
pub use error::ConsumerError;
pub use handler::{BoxFuture, Handler, HandlerError, HandlerResult, TaskContext, outcome_of};
