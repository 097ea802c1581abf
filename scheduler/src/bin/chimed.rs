//! `chimed`: the Chime scheduler daemon.

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use chime_scheduler::{
    daemon::{self, args::Args},
    telemetry,
};

/// mimalloc instead of glibc's allocator: a profile at 10 000 fires/s put half of the
/// runtime thread's CPU in glibc's `malloc`/`free` (`_int_malloc`, `unlink_chunk`,
/// `malloc_consolidate`); see `docs/benchmarks.md`, "CPU per fire".
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // The message and its causes, never a backtrace: a start-up error (a port in
            // use, a bad setting) is for the operator, whatever RUST_BACKTRACE says.
            eprintln!("chimed: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    let config = args.layers(|var| std::env::var(var).ok())?;
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.worker_threads(cpus))
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        telemetry::init_tracing(config.log_format, &config.log);
        for warning in &config.warnings {
            tracing::warn!("{warning}");
        }
        daemon::run(config, chime_consumer::shutdown_signal()).await
    })
}
