//! `chimectl`: the Chime command-line client.

use clap::Parser;

use chime_scheduler::cli::{Cli, run};

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = run(cli, &mut stdout).await {
        eprintln!("error: {error:#}");
        std::process::exit(1);
    }
}
