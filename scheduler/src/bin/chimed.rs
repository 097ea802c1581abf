//! `chimed`: the Chime scheduler daemon.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

use chime_scheduler::{config::Layers, daemon, telemetry};

/// Chime scheduler daemon. Settings come from defaults, then --config FILE, then CHIME_*
/// environment variables, then these flags; see docs/configuration.md.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// TOML configuration file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Store URL (sqlite://FILE or postgres://...). Env CHIME_DATABASE_URL.
    #[arg(long, value_name = "URL")]
    database_url: Option<String>,
    /// RabbitMQ URL. Env CHIME_AMQP_URL.
    #[arg(long, value_name = "URL")]
    amqp_url: Option<String>,
    /// HTTP listen address. Env CHIME_HTTP_ADDR.
    #[arg(long, value_name = "ADDR")]
    http_addr: Option<String>,
    /// This node's name in the cluster. Env CHIME_NODE_NAME.
    #[arg(long, value_name = "NAME")]
    node_name: Option<String>,
    /// Log format, text or json. Env CHIME_LOG_FORMAT.
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut layers = Layers::new();
    if let Some(path) = &args.config {
        layers = layers.file(path)?;
    }
    let config = layers
        .env(|var| std::env::var(var).ok())
        .flag("database_url", args.database_url.as_deref())
        .flag("amqp_url", args.amqp_url.as_deref())
        .flag("http_addr", args.http_addr.as_deref())
        .flag("node_name", args.node_name.as_deref())
        .flag("log_format", args.log_format.as_deref())
        .build()?;
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.worker_threads(cpus))
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        telemetry::init_tracing(config.log_format, &config.log);
        daemon::run(config, chime_consumer::shutdown_signal()).await
    })
}
