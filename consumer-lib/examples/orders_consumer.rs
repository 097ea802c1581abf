//! The README's consumer: one handler for the `orders` group, and a log line for every
//! task it runs.
//!
//! ```text
//! cargo run -p chime-consumer --example orders_consumer
//! ```

use chime_consumer::{Consumer, HandlerError, HandlerResult, TaskContext};

async fn close_orders(ctx: TaskContext) -> HandlerResult {
    let older_than = ctx.payload()["older_than_min"]
        .as_u64()
        .ok_or_else(|| HandlerError::permanent("older_than_min missing"))?;
    tracing::info!(task = %ctx.task_id(), attempt = ctx.attempt(), older_than, "closing expired orders");
    // ... close orders, using ctx.idempotency_key() to make it happen once ...
    Ok(Some(
        serde_json::json!({"closed_older_than_min": older_than}),
    ))
}

#[tokio::main]
async fn main() -> Result<(), chime_consumer::ConsumerError> {
    // Prints the handler's log lines, and the library's when it connects.
    tracing_subscriber::fmt().with_env_filter("info").init();
    // amqp://USER:PASSWORD@HOST:PORT/VHOST, where %2f is the default vhost "/".
    Consumer::builder("amqp://guest:guest@127.0.0.1:5672/%2f", "orders")
        .handler("close-expired-orders", close_orders)
        .build()?
        .run() // until Ctrl-C / SIGTERM, then finishes running handlers
        .await
}
