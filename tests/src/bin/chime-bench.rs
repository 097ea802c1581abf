//! `chime-bench`: measures chimed against the broker's own ceiling in one run and writes
//! the results as a table (stdout) and JSON (`--out`). See `docs/benchmarks.md`.
//!
//! ```text
//! cargo run --release -p chime-tests --bin chime-bench            # default sizes, minutes
//! cargo run --release -p chime-tests --bin chime-bench -- --full  # the documented sizes
//! ```

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

use chime_tests::bench::{Backend, Scale, SteadyChoice, run_all};

/// Benchmarks chimed (W1 herd, W2 steady, W3 idle scale, W4 failover, W5 reconcile,
/// W7 job import under load)
/// against a plain lapin publisher/consumer measured in the same run.
#[derive(Debug, Parser)]
#[command(name = "chime-bench")]
struct Args {
    /// The documented sizes (100 000-job herds, 1 000 000 idle jobs, 60 s steady runs).
    #[arg(long, conflicts_with = "smoke")]
    full: bool,
    /// Tiny sizes that only prove the harness works (what CI runs).
    #[arg(long)]
    smoke: bool,
    /// Workloads to run, e.g. `W1,W4` (default: all).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Store backends for W1–W3 and W7: `postgres`, `sqlite` (default: both).
    #[arg(long, value_delimiter = ',')]
    backends: Vec<String>,
    /// Make W2 a search for the highest rate the box sustains over these rates
    /// (fires/s, ascending), e.g. `2000,3000,4000`; it stops after the first rate Chime
    /// does not keep up with, and judges the 50 ms target at the highest rate the broker
    /// alone delivers within it. `--full` searches 2 000–10 000 after its 1 000/s run.
    #[arg(long, value_delimiter = ',')]
    w2_rates: Vec<usize>,
    /// Runs of W2 at each rate (the 1 000/s run and each rate of a search); a rate is
    /// judged on the medians of its runs (their p99s, the broker alone's too), so one
    /// stall of the box decides less.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    w2_repeats: u16,
    /// Seconds of every W2 window and of the broker alone's beside it (default: 20, and
    /// with `--full` 60 at 1 000 fires/s and 30 for each rate of the search). A longer
    /// window is decided less by a single stall of the disk.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    w2_seconds: Option<u32>,
    /// Where the JSON report goes (default: target/bench/chime-bench-<scale>.json).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("CHIME_BENCH_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    // The measured consumer runs in this process; its metrics go into the report.
    chime_tests::bench::consumer_metrics::install()?;
    let scale = if args.full {
        Scale::Full
    } else if args.smoke {
        Scale::Smoke
    } else {
        Scale::Default
    };
    let backends = if args.backends.is_empty() {
        vec![Backend::Postgres, Backend::Sqlite]
    } else {
        args.backends
            .iter()
            .map(|b| Backend::parse(b).with_context(|| format!("unknown backend {b:?}")))
            .collect::<anyhow::Result<_>>()?
    };
    let only: Vec<String> = args.only.iter().map(|w| w.to_uppercase()).collect();
    let steady = SteadyChoice {
        rates: args.w2_rates,
        repeats: usize::from(args.w2_repeats),
        seconds: args.w2_seconds,
    };
    let report = run_all(scale, &backends, &only, &steady).await?;
    println!("{}", report.render());
    let out = args.out.unwrap_or_else(|| {
        chime_tests::binaries::workspace_root()
            .join("target/bench")
            .join(format!("chime-bench-{}.json", scale.as_str()))
    });
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    std::fs::write(&out, serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("write {}", out.display()))?;
    eprintln!("[bench] report written to {}", out.display());
    anyhow::ensure!(
        !report.has_errors(),
        "fires were lost or duplicated (see ERROR lines)"
    );
    Ok(())
}
