//! # chime-consumer
//!
//! The library business applications embed to run tasks fired by the Chime scheduler, and
//! the home of Chime's wire protocol ([`protocol`]) that the scheduler shares.
//!
//! A consumer joins a *group*: the group's tasks arrive on one RabbitMQ work queue and each
//! is run by exactly one member. For every task the consumer publishes an ack, runs the
//! handler registered for the task's job name, publishes the result and then acknowledges
//! the delivery. Delivery is at least once; every task carries an idempotency key
//! ([`TaskContext::idempotency_key`]) and a duplicate delivery of a task that succeeded
//! replays the recorded outcome from the [`idempotency`] store instead of running the
//! handler again (the shared PostgreSQL store keeps outcomes for 7 days by default). Only
//! successes are recorded: after a failure, retryable or permanent, a retry or a DLQ
//! replay runs the handler again. While connected, every instance
//! announces itself every few seconds with a presence message (its group, zone and whether
//! it takes broadcasts).
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
//!
//! ## Cancellation
//!
//! An operator may cancel a run (`POST /v1/runs/{id}/cancel`, `chimectl run cancel`).
//! The consumer follows chimed's cancel notices (the `chime.cancels` stream, read from its
//! start on every connect, before any task is taken): a cancelled run's task still in the
//! queue is acknowledged without running the handler, and a handler already running sees
//! [`TaskContext::cancelled`] complete (and [`TaskContext::is_cancelled`] turn true),
//! usually within a second. The run is `cancelled` on the scheduler either way; what the
//! handler returns afterwards is only noted in the run's history.
//!
//! ## Delivery modes
//!
//! A job's delivery mode ([`DeliveryMode`], chosen on the job) decides who runs its fires.
//! Subscribing is one builder call per mode; the handler is the same.
//!
//! **Group** and **sharded** jobs: every consumer of the group takes them from the group's
//! work queue, with no extra call. A sharded fire is split into
//! [`TaskContext::shard_total`] items spread over the group; each handler run processes its
//! slice [`TaskContext::shard`]:
//!
//! ```no_run
//! use chime_consumer::{Consumer, HandlerResult, TaskContext};
//!
//! async fn reindex(ctx: TaskContext) -> HandlerResult {
//!     // Process only the rows of this sharding item: id % shard_total == shard.
//!     let (shard, total) = (ctx.shard(), ctx.shard_total());
//!     Ok(Some(serde_json::json!({"reindexed_slice": format!("{shard}/{total}")})))
//! }
//!
//! # async fn run() -> Result<(), chime_consumer::ConsumerError> {
//! Consumer::builder("amqp://guest:guest@127.0.0.1:5672/%2f", "search")
//!     .handler("reindex", reindex)
//!     .build()?
//!     .run()
//!     .await
//! # }
//! ```
//!
//! **Zone** jobs: one instance of each zone runs every fire. Place the instance in its zone
//! with [`ConsumerBuilder::zone`] (default: the `CHIME_ZONE` environment variable):
//!
//! ```no_run
//! use chime_consumer::{Consumer, HandlerResult, TaskContext};
//!
//! async fn flush_local_cache(ctx: TaskContext) -> HandlerResult {
//!     tracing::info!(zone = ctx.zone(), "flushing this zone's cache");
//!     Ok(None)
//! }
//!
//! # async fn run() -> Result<(), chime_consumer::ConsumerError> {
//! Consumer::builder("amqp://guest:guest@127.0.0.1:5672/%2f", "web")
//!     .zone("eu-west-1a")
//!     .handler("flush-cache", flush_local_cache)
//!     .build()?
//!     .run()
//!     .await
//! # }
//! ```
//!
//! **Broadcast** jobs: every live subscribed instance runs every fire, each with its own
//! idempotency key. Subscribe with [`ConsumerBuilder::broadcast`]:
//!
//! ```no_run
//! use chime_consumer::{Consumer, HandlerResult, TaskContext};
//!
//! async fn reload_config(ctx: TaskContext) -> HandlerResult {
//!     tracing::info!(instance = ctx.consumer(), "reloading configuration");
//!     Ok(None)
//! }
//!
//! # async fn run() -> Result<(), chime_consumer::ConsumerError> {
//! Consumer::builder("amqp://guest:guest@127.0.0.1:5672/%2f", "web")
//!     .broadcast()
//!     .handler("reload-config", reload_config)
//!     .build()?
//!     .run()
//!     .await
//! # }
//! ```
//!
//! **Observers** (publish/subscribe): a read-only [`Observer`] gets a copy of every task
//! whose `<app>.<job>` matches its topic patterns, whatever the mode, and never reports
//! anything back, so it cannot affect a run:
//!
//! ```no_run
//! use chime_consumer::{Observer, TaskMessage};
//!
//! # async fn run() -> Result<(), chime_consumer::ConsumerError> {
//! Observer::builder("amqp://guest:guest@127.0.0.1:5672/%2f", "audit")
//!     .subscribe("shop.*")
//!     .handler(|task: TaskMessage| async move {
//!         tracing::info!(app = %task.app, job = %task.job, run = %task.task_id, "fired");
//!         Ok(())
//!     })
//!     .build()?
//!     .run()
//!     .await
//! # }
//! ```

pub mod backoff;
pub mod connect;
mod consumer;
pub mod env_file;
mod error;
mod handler;
pub mod idempotency;
pub mod observer;
mod options;
pub mod protocol;
mod reconnect;
pub mod testing;
pub mod tls;
pub mod url;

pub use consumer::{Consumer, ConsumerBuilder, default_instance_id, shutdown_signal};
pub use error::ConsumerError;
pub use handler::{BoxFuture, Handler, HandlerError, HandlerResult, TaskContext, outcome_of};
pub use observer::{ObserveResult, Observer, ObserverBuilder};
pub use protocol::{DeliveryMode, TaskMessage};
