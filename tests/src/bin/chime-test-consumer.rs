//! A consumer for end-to-end tests, built on `chime-consumer`. It handles every job of its
//! group with one handler whose behaviour the task payload chooses, and prints one JSON
//! line per handler start and finish on standard output:
//!
//! - `{"sleep_ms": N}`: take N ms;
//! - `{"fail": "retryable" | "permanent"}`: fail that way;
//! - `{"panic": true}`: panic;
//! - `{"crash": true}`: abort the whole process after 300 ms (a poison message);
//! - `{"fail_until_attempt": N}`: fail retryably while the attempt is below N;
//! - `{"progress": true}`: report 50 % progress, then wait for the heartbeat to carry it;
//! - `{"fail_shard": N}`: shard item N fails retryably on attempt 1 only;
//! - `{"wait_for_cancel_ms": N}`: wait up to N ms for the run to be cancelled; if it is,
//!   print a `cancelled` line and fail permanently.
//!
//! Each line carries the task's `shard`, `shard_total`, `zone` and `mode`.
//!
//! With `--heal`, `fail` and `crash` are ignored: the handler "was fixed".
//!
//! `--zone Z` places the instance in zone Z and `--broadcast` subscribes it to the group's
//! broadcasts. With one or more `--observe PATTERN` the process is not a consumer but an
//! observer named after `--instance`, printing one line per copy received:
//! `{"event":"observed","task_id":..,"job":..,"app":..,"attempt":..,"shard":..,"instance":..}`.
//!
//! With `--postgres URL` it uses the PostgreSQL idempotency store and runs every task in
//! the transactional form, recording each task id in table `test_effects` in the same
//! transaction.

use std::time::Duration;

use chime_consumer::{
    Consumer, HandlerError, HandlerResult, Observer, TaskContext, TaskMessage,
    idempotency::{PgIdempotencyStore, tx_handler},
};
use clap::Parser;
use serde_json::{Value, json};

#[derive(Debug, Parser)]
struct Args {
    #[arg(long)]
    amqp_url: String,
    #[arg(long)]
    group: String,
    #[arg(long)]
    instance: String,
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Use the PostgreSQL idempotency store at this URL, transactional form.
    #[arg(long)]
    postgres: Option<String>,
    /// Ignore `fail` and `crash` in payloads (the handler has been fixed).
    #[arg(long)]
    heal: bool,
    /// Consume this zone's work queue too.
    #[arg(long)]
    zone: Option<String>,
    /// Receive the group's broadcasts.
    #[arg(long)]
    broadcast: bool,
    /// Run as an observer named after `--instance` with this topic pattern (repeatable)
    /// instead of as a consumer.
    #[arg(long = "observe")]
    observe: Vec<String>,
}

static HEALED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

fn report(event: &str, ctx: &TaskContext) {
    let line = json!({
        "event": event,
        "task_id": ctx.task_id(),
        "job": ctx.job(),
        "app": ctx.app(),
        "attempt": ctx.attempt(),
        "fire_time": ctx.fire_time(),
        "instance": ctx.consumer(),
        "shard": ctx.shard(),
        "shard_total": ctx.shard_total(),
        "zone": ctx.zone(),
        "mode": ctx.mode(),
        "payload": ctx.payload(),
        "publisher": ctx.publisher(),
        "at_ms": chrono::Utc::now().timestamp_millis(),
        "published_at_ms": ctx.task().published_at.timestamp_millis(),
    });
    println!("{line}");
}

async fn behave(ctx: &TaskContext) -> HandlerResult {
    let payload = ctx.payload();
    if let Some(ms) = payload.get("wait_for_cancel_ms").and_then(Value::as_u64) {
        tokio::select! {
            () = ctx.cancelled() => {
                assert!(ctx.is_cancelled());
                report("cancelled", ctx);
                return Err(HandlerError::permanent("cancelled"));
            }
            () = tokio::time::sleep(Duration::from_millis(ms)) => {}
        }
    }
    if let Some(ms) = payload.get("sleep_ms").and_then(Value::as_u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if payload.get("panic").and_then(Value::as_bool) == Some(true) {
        panic!("asked to panic");
    }
    let healed = HEALED.get().copied().unwrap_or(false);
    if payload.get("crash").and_then(Value::as_bool) == Some(true) && !healed {
        tokio::time::sleep(Duration::from_millis(300)).await;
        eprintln!("crashing on purpose");
        std::process::abort();
    }
    if let Some(until) = payload.get("fail_until_attempt").and_then(Value::as_u64)
        && u64::from(ctx.attempt()) < until
    {
        return Err(HandlerError::retryable(format!(
            "failing attempt {} on purpose",
            ctx.attempt()
        )));
    }
    if payload.get("fail_shard").and_then(Value::as_u64) == Some(u64::from(ctx.shard()))
        && ctx.attempt() == 1
    {
        return Err(HandlerError::retryable(format!(
            "failing shard {} on attempt 1 on purpose",
            ctx.shard()
        )));
    }
    if payload.get("progress").and_then(Value::as_bool) == Some(true) {
        ctx.report_progress(Some(50.0), Some("half way"));
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    match payload
        .get("fail")
        .and_then(Value::as_str)
        .filter(|_| !healed)
    {
        Some("retryable") => return Err(HandlerError::retryable("asked to fail (retryable)")),
        Some("permanent") => return Err(HandlerError::permanent("asked to fail (permanent)")),
        _ => {}
    }
    Ok(Some(json!({"echo": payload, "instance": ctx.consumer()})))
}

async fn handle(ctx: TaskContext) -> HandlerResult {
    report("started", &ctx);
    let result = behave(&ctx).await;
    report("finished", &ctx);
    result
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    HEALED.set(args.heal).expect("set once");
    if !args.observe.is_empty() {
        return observe(&args).await;
    }
    let mut builder = Consumer::builder(&args.amqp_url, &args.group)
        .instance(&args.instance)
        .concurrency(args.concurrency);
    if let Some(zone) = &args.zone {
        builder = builder.zone(zone);
    }
    if args.broadcast {
        builder = builder.broadcast();
    }
    let consumer = match &args.postgres {
        None => builder.fallback_handler(handle).build()?,
        Some(url) => {
            let pool = sqlx::PgPool::connect(url).await?;
            let store = PgIdempotencyStore::new(pool.clone()).await?;
            // Instances start together: serialise the CREATE TABLE like the store does.
            let mut tx = pool.begin().await?;
            sqlx::query("SELECT pg_advisory_xact_lock(42)")
                .execute(&mut *tx)
                .await?;
            sqlx::query("CREATE TABLE IF NOT EXISTS test_effects (task_id uuid NOT NULL, instance text NOT NULL)")
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            let handler = tx_handler(|ctx, conn| {
                Box::pin(async move {
                    report("started", &ctx);
                    sqlx::query("INSERT INTO test_effects (task_id, instance) VALUES ($1, $2)")
                        .bind(ctx.task_id())
                        .bind(ctx.consumer())
                        .execute(&mut *conn)
                        .await
                        .map_err(HandlerError::retryable)?;
                    let result = behave(&ctx).await;
                    report("finished", &ctx);
                    result
                })
            });
            builder
                .transactional_handler("effect", store, handler)
                .fallback_handler(handle)
                .build()?
        }
    };
    consumer.run().await?;
    Ok(())
}

/// Runs an observer named after `--instance` on the `--observe` patterns.
async fn observe(args: &Args) -> anyhow::Result<()> {
    let mut builder = Observer::builder(&args.amqp_url, &args.instance);
    for pattern in &args.observe {
        builder = builder.subscribe(pattern);
    }
    let instance = args.instance.clone();
    let observer = builder
        .concurrency(args.concurrency)
        .handler(move |task: TaskMessage| {
            let line = json!({
                "event": "observed",
                "task_id": task.task_id,
                "job": task.job,
                "app": task.app,
                "attempt": task.attempt,
                "shard": task.shard,
                "instance": instance,
            });
            async move {
                println!("{line}");
                Ok(())
            }
        })
        .build()?;
    observer.run().await?;
    Ok(())
}
