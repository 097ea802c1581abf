//! `chimectl`: the command-line client of the HTTP API. Commands write to an injected
//! writer (tables by default, the API's JSON with `--json`), and progress, questions and
//! answers go through an injected [`Terminal`], so tests can run them.

mod audit;
mod backfill;
mod client;
mod consumers;
mod dlq;
mod dlq_table;
mod import;
mod job_args;
mod preview;
mod run_list;
mod run_stats;
mod schedule_text;
mod table;
mod terminal;
mod tokens;

use std::io::Write;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};

use crate::api::{
    cancel::CancelResponse,
    dto::{ClusterResponse, JobListQuery, JobResponse, ListResponse, RunResponse},
};
pub use client::{Client, ClientError};
pub use consumers::ConsumerCommand;
pub use dlq::DlqCommand;
use import::ImportArgs;
use job_args::{AddArgs, EditArgs};
pub use terminal::Terminal;
use terminal::write_json;

/// The command line of `chimectl`.
#[derive(Debug, Parser)]
#[command(
    name = "chimectl",
    version = crate::VERSION,
    about = "chimectl, the command-line client of the Chime scheduler: creates and edits jobs, \
             shows their runs, the cluster, the consumers and the dead-letter queues, through chimed's HTTP API.",
    long_about = None,
)]
pub struct Cli {
    /// chimed's HTTP address.
    #[arg(
        long,
        global = true,
        env = "CHIME_SERVER",
        default_value = "http://127.0.0.1:8080"
    )]
    pub server: String,
    /// A file holding the API token to send (default: CHIME_TOKEN, else
    /// ./chime-admin.token when it exists).
    #[arg(long, global = true, env = "CHIME_TOKEN_FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// PEM file of the CA(s) that issued chimed's HTTPS certificate: only these are
    /// trusted then (the system's roots otherwise).
    #[arg(long, global = true, env = "CHIME_CA_FILE", value_name = "FILE")]
    pub ca_file: Option<std::path::PathBuf>,
    /// Print the API's JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, list, inspect, edit and control jobs.
    #[command(subcommand, alias = "jobs")]
    Job(JobCommand),
    /// Inspect runs (fires) of jobs.
    #[command(subcommand, alias = "runs")]
    Run(RunCommand),
    /// Show the cluster's nodes and which shards each holds.
    #[command(alias = "nodes")]
    Cluster,
    /// List consumer instances and the groups they serve, flagging groups with queued
    /// work and no live instance.
    #[command(subcommand, alias = "consumers")]
    Consumer(ConsumerCommand),
    /// List, inspect, replay and purge dead-letter queues.
    #[command(subcommand)]
    Dlq(DlqCommand),
    /// The audit trail: every change made through the API, newest first.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Create, list and revoke API tokens (admin).
    #[command(subcommand, alias = "tokens")]
    Token(tokens::TokenCommand),
    /// Print a shell completion script: `chimectl completions bash > /etc/bash_completion.d/chimectl`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `chimectl job ...`. JOB is a job id, `app/name`, or a name in app `default`.
#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Create a job from flags or a JSON file.
    #[command(visible_alias = "create", alias = "new")]
    Add(Box<AddArgs>),
    /// Create many jobs from a JSON array or NDJSON file (`-`: standard input), in
    /// requests of up to 10 000 jobs. Each request is all or none: if any job of it is
    /// refused, none of its jobs is stored (earlier requests stay stored, later ones are
    /// not sent) and every refused job is named by its line or item.
    #[command(alias = "load")]
    Import(ImportArgs),
    /// List jobs.
    #[command(visible_alias = "list")]
    Ls {
        /// Only jobs of this app.
        #[arg(long)]
        app: Option<String>,
        /// Only jobs whose target group is this.
        #[arg(long)]
        group: Option<String>,
        /// Only jobs of this target mode: group, broadcast, zone or sharded.
        #[arg(long)]
        mode: Option<String>,
        /// Only paused jobs (`--paused`, `--paused true`) or running ones (`--paused false`).
        #[arg(long, num_args = 0..=1, default_missing_value = "true")]
        paused: Option<String>,
        /// Only jobs whose name or app/name contains this, ignoring case.
        #[arg(long)]
        search: Option<String>,
        /// The order: name, -name, updated_at, -updated_at (default: creation order).
        #[arg(long, allow_hyphen_values = true)]
        sort: Option<String>,
        /// At most this many (all by default).
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Show one job.
    #[command(visible_alias = "show", aliases = ["describe", "inspect", "info"])]
    Get {
        /// The job.
        job: String,
    },
    /// Change a job's fields: only those given change (from flags or a JSON file).
    #[command(visible_alias = "update", aliases = ["set", "modify", "patch"])]
    Edit(Box<EditArgs>),
    /// Delete a job and its run history.
    #[command(visible_alias = "delete", aliases = ["remove", "del"])]
    Rm {
        /// The job.
        job: String,
    },
    /// Stop a job firing.
    #[command(aliases = ["disable", "suspend"])]
    Pause {
        /// The job.
        job: String,
    },
    /// Let a paused job fire again, from its next scheduled time.
    #[command(aliases = ["unpause", "enable"])]
    Resume {
        /// The job.
        job: String,
    },
    /// Show a job's versions: its definition after each change, newest first.
    #[command(alias = "history")]
    Versions {
        /// The job.
        job: String,
    },
    /// Show a job's next fires, in UTC and in its time zone.
    #[command(alias = "preview")]
    Next {
        /// The job.
        job: String,
        /// How many fires (1 to 100).
        #[arg(long, short = 'n', default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
        count: u32,
    },
    /// Fire a job now.
    #[command(visible_alias = "fire", alias = "run")]
    Trigger {
        /// The job.
        job: String,
    },
    /// Record a job's past fires in a range and dispatch them at a bounded rate.
    Backfill(backfill::BackfillArgs),
}

/// `chimectl audit ...`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// List changes, newest first.
    #[command(visible_alias = "list")]
    Ls(audit::AuditArgs),
}

/// `chimectl run ...`.
#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// List runs, newest fire first: one job's (JOB), or across jobs filtered by state,
    /// app, group, mode and fire or finish time.
    #[command(visible_alias = "list")]
    Ls(Box<run_list::RunLsArgs>),
    /// Show one run, with its attempts and, for a fire of several items, the items.
    #[command(visible_alias = "show", aliases = ["describe", "inspect"])]
    Get {
        /// The run id.
        run: String,
    },
    /// Cancel a run that has not finished: a task still queued is skipped by consumers, a
    /// running handler is told (it sees the cancellation on its task context), and the run
    /// ends `cancelled`. A finished run cannot be cancelled.
    Cancel {
        /// The run id.
        run: String,
    },
    /// Totals of the runs fired in the last N minutes, cluster-wide: fired, rate,
    /// retried, dead, lateness percentiles and runs per state (`--json`: the API's
    /// answer, bucket by bucket).
    Stats(run_stats::RunStatsArgs),
}

/// Runs `cli`, writing output to `out`, progress and questions to stderr, and reading
/// answers from stdin.
pub async fn run(cli: Cli, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut err = std::io::stderr();
    let mut input = std::io::stdin().lock();
    let mut terminal = Terminal {
        err: &mut err,
        input: &mut input,
    };
    run_with(cli, out, &mut terminal).await
}

/// Runs `cli`, writing output to `out` and talking to the user through `terminal`.
pub async fn run_with(
    cli: Cli,
    out: &mut dyn Write,
    terminal: &mut Terminal<'_>,
) -> anyhow::Result<()> {
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(shell, &mut Cli::command(), "chimectl", out);
        return Ok(());
    }
    let token =
        tokens::resolve_token(cli.token_file.as_deref(), std::env::var("CHIME_TOKEN").ok())?;
    let client = Client::with_ca_file(&cli.server, cli.ca_file.as_deref())?.with_token(token);
    let json = cli.json;
    match cli.command {
        Command::Completions { .. } => unreachable!("answered above"),
        Command::Job(command) => job(&client, command, json, out, terminal.input).await,
        Command::Run(command) => runs(&client, command, json, out).await,
        Command::Cluster => {
            let status: ClusterResponse = client.get("/v1/cluster").await?;
            if json {
                write_json(out, &status)
            } else {
                write!(out, "{}", table::cluster(&status)).context("writing output")
            }
        }
        Command::Consumer(command) => consumers::consumer(&client, command, json, out).await,
        Command::Dlq(command) => dlq::dlq(&client, command, json, out, terminal).await,
        Command::Token(command) => tokens::token(&client, command, json, out).await,
        Command::Audit(AuditCommand::Ls(args)) => audit::list(&client, &args, json, out).await,
    }
}

/// Runs a `job` command; a file `-` is read from `input` (standard input).
async fn job(
    client: &Client,
    command: JobCommand,
    json: bool,
    out: &mut dyn Write,
    input: &mut dyn std::io::BufRead,
) -> anyhow::Result<()> {
    match command {
        JobCommand::Add(args) => {
            let body = args.to_request(input)?;
            let job: JobResponse = client.post("/v1/jobs", Some(&body)).await?;
            print_jobs(out, json, &[job], true)
        }
        JobCommand::Import(args) => import::import(client, &args, json, out, input).await,
        JobCommand::Ls {
            app,
            group,
            mode,
            paused,
            search,
            sort,
            limit,
        } => {
            let query = JobListQuery {
                app,
                group,
                mode,
                paused,
                q: search,
                sort,
                ..JobListQuery::default()
            };
            let jobs = client.all_jobs(&query, limit).await?;
            if json {
                return write_json(
                    out,
                    &ListResponse {
                        items: jobs,
                        next: None,
                    },
                );
            }
            print_jobs(out, false, &jobs, false)
        }
        JobCommand::Get { job } => {
            let id = client.resolve_job(&job).await?;
            let job: JobResponse = client.get(&format!("/v1/jobs/{id}")).await?;
            print_jobs(out, json, &[job], true)
        }
        JobCommand::Edit(args) => {
            let current = client.find_job(&args.job).await?;
            let body = args.to_patch(&current, input)?;
            // A version named in the file wins over If-Match on the server.
            let version = args.if_version.or(Some(current.version));
            let job: JobResponse = client
                .patch(&format!("/v1/jobs/{}", current.id), &body, version)
                .await?;
            print_jobs(out, json, &[job], true)
        }
        JobCommand::Rm { job } => {
            let id = client.resolve_job(&job).await?;
            client.delete(&format!("/v1/jobs/{id}")).await?;
            if json {
                write_json(out, &serde_json::json!({"deleted": id}))
            } else {
                writeln!(out, "deleted job {id}").context("writing output")
            }
        }
        JobCommand::Pause { job } => control(client, &job, "pause", json, out).await,
        JobCommand::Resume { job } => control(client, &job, "resume", json, out).await,
        JobCommand::Versions { job } => {
            let id = client.resolve_job(&job).await?;
            audit::versions(client, id, json, out).await
        }
        JobCommand::Next { job, count } => {
            let id = client.resolve_job(&job).await?;
            preview::next(client, id, count, json, out).await
        }
        JobCommand::Backfill(args) => backfill::backfill(client, &args, json, out).await,
        JobCommand::Trigger { job } => {
            let id = client.resolve_job(&job).await?;
            let run: RunResponse = client.post(&format!("/v1/jobs/{id}/trigger"), None).await?;
            if json {
                write_json(out, &run)
            } else {
                writeln!(out, "{}", table::triggered(&id.to_string(), &run))
                    .context("writing output")
            }
        }
    }
}

async fn control(
    client: &Client,
    job: &str,
    action: &str,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let id = client.resolve_job(job).await?;
    let job: JobResponse = client
        .post(&format!("/v1/jobs/{id}/{action}"), None)
        .await?;
    print_jobs(out, json, &[job], false)
}

async fn runs(
    client: &Client,
    command: RunCommand,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    match command {
        RunCommand::Ls(args) => run_list::list(client, &args, json, out).await,
        RunCommand::Stats(args) => run_stats::stats(client, &args, json, out).await,
        RunCommand::Get { run } => {
            let run: RunResponse = client.get(&format!("/v1/runs/{run}")).await?;
            if json {
                write_json(out, &run)
            } else {
                write!(out, "{}", table::run_detail(&run)).context("writing output")
            }
        }
        RunCommand::Cancel { run } => {
            let answer: CancelResponse =
                client.post(&format!("/v1/runs/{run}/cancel"), None).await?;
            if json {
                return write_json(out, &answer);
            }
            writeln!(
                out,
                "cancelled run {} (was {}){}",
                answer.run.id,
                answer.cancelled_from,
                if answer.notified {
                    ""
                } else {
                    "; consumers could not be told: a queued task or running handler may still run"
                }
            )
            .context("writing output")
        }
    }
}

fn print_jobs(
    out: &mut dyn Write,
    json: bool,
    jobs: &[JobResponse],
    detail: bool,
) -> anyhow::Result<()> {
    match (json, jobs) {
        (true, [job]) => write_json(out, job),
        (true, jobs) => write_json(out, &jobs),
        (false, [job]) if detail => {
            write!(out, "{}", table::job_detail(job)).context("writing output")
        }
        (false, jobs) => write!(out, "{}", table::jobs(jobs)).context("writing output"),
    }
}

#[cfg(test)]
mod tests;
