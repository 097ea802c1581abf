//! The example consumer app used by the demo (`deploy/local/demo.sh`): joins a group and
//! runs three jobs, logging every task it handles.
//!
//! ```text
//! CHIME_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/%2f CHIME_GROUP=demo \
//!     cargo run -p chime-consumer --example demo_consumer
//! ```
//!
//! `CHIME_AMQP_URL_FILE=/run/secrets/amqp-url` reads the URL from a file instead (one
//! trailing newline stripped; setting both is an error), as a mounted secret.
//! `CHIME_ZONE=dc1` places the instance in zone `dc1` (it also runs that zone's `zone`-mode
//! jobs) and `CHIME_BROADCAST=1` subscribes it to the group's broadcasts.

use std::time::Duration;

use chime_consumer::{Consumer, HandlerError, HandlerResult, TaskContext};
use chrono::Utc;
use serde::Deserialize;
use serde_json::json;

/// `heartbeat`: reports which instance ran it and how late it started.
async fn heartbeat(ctx: TaskContext) -> HandlerResult {
    let late_ms = (Utc::now() - ctx.fire_time()).num_milliseconds();
    tracing::info!(job = ctx.job(), task_id = %ctx.task_id(), late_ms, "heartbeat");
    Ok(Some(
        json!({"instance": ctx.consumer(), "started_late_ms": late_ms}),
    ))
}

#[derive(Deserialize)]
struct Report {
    rows: u32,
    #[serde(default)]
    work_ms: u64,
}

/// `nightly-report`: pretends to aggregate `rows` rows, taking `work_ms`.
async fn report(ctx: TaskContext) -> HandlerResult {
    let report: Report = ctx.payload_as()?;
    tokio::time::sleep(Duration::from_millis(report.work_ms)).await;
    tracing::info!(job = ctx.job(), task_id = %ctx.task_id(), rows = report.rows, "report built");
    Ok(Some(
        json!({"rows": report.rows, "idempotency_key": ctx.idempotency_key()}),
    ))
}

/// `greet`: greets `name`, and refuses an empty one (a permanent failure).
async fn greet(ctx: TaskContext) -> HandlerResult {
    let name = ctx.payload()["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        return Err(HandlerError::permanent("payload.name is empty"));
    }
    tracing::info!(job = ctx.job(), task_id = %ctx.task_id(), name, "greeted");
    Ok(Some(json!({"greeting": format!("hello, {name}")})))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CHIME_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_target(false)
        .init();
    // The URL, or a file holding it (a mounted secret); both set is an error.
    let url = chime_consumer::env_file::var_or_file("CHIME_AMQP_URL", "CHIME_AMQP_URL_FILE")?
        .unwrap_or_else(|| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    let group = std::env::var("CHIME_GROUP").unwrap_or_else(|_| "demo".into());
    let mut builder = Consumer::builder(url, group);
    if std::env::var("CHIME_BROADCAST").is_ok_and(|v| v == "1" || v == "true") {
        builder = builder.broadcast();
    }
    let consumer = builder
        .handler("heartbeat", heartbeat)
        .handler("nightly-report", report)
        .handler("greet", greet)
        .concurrency(4)
        .build()?;
    tracing::info!(
        instance = consumer.instance(),
        group = consumer.group(),
        zone = consumer.zone(),
        broadcast = consumer.receives_broadcasts(),
        "demo consumer starting"
    );
    consumer.run().await?;
    Ok(())
}
