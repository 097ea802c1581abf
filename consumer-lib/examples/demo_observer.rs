//! An example observer: logs a copy of every task of the jobs matching its patterns,
//! without taking part in running them.
//!
//! ```text
//! CHIME_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/%2f CHIME_OBSERVE='demo.*' \
//!     cargo run -p chime-consumer --example demo_observer
//! ```
//!
//! `CHIME_AMQP_URL_FILE` reads the URL from a file instead, as for `demo_consumer`.
//! `CHIME_OBSERVE` is a comma-separated list of topic patterns over `<app>.<job>` (default
//! `#`, everything); `CHIME_OBSERVER` names the observer and its queue (default `demo-audit`).

use chime_consumer::{Observer, TaskMessage};

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
    let name = std::env::var("CHIME_OBSERVER").unwrap_or_else(|_| "demo-audit".into());
    let patterns = std::env::var("CHIME_OBSERVE").unwrap_or_else(|_| "#".into());
    let mut builder = Observer::builder(url, name);
    for pattern in patterns.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        builder = builder.subscribe(pattern);
    }
    let observer = builder
        .handler(|task: TaskMessage| async move {
            tracing::info!(app = %task.app, job = %task.job, run = %task.task_id,
                attempt = task.attempt, mode = task.mode.as_str(), "observed a fire");
            Ok(())
        })
        .build()?;
    tracing::info!(queue = observer.queue(), patterns = ?observer.patterns(), "demo observer starting");
    observer.run().await?;
    Ok(())
}
