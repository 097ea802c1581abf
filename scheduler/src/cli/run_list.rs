//! `chimectl run ls`: runs searched across jobs (`GET /v1/runs`) with the API's filters,
//! newest fire first, following the pages up to `--limit`.

use std::io::Write;

use anyhow::Context;
use clap::Args;

use super::{
    audit::encode,
    client::Client,
    table::{self, or_dash, result_text, shorten},
    terminal::write_json,
};
use crate::api::dto::{ListResponse, RunResponse};

/// The largest page `GET /v1/runs` answers.
const MAX_PAGE: u32 = 1000;

/// Filters of `chimectl run ls`; those given must all hold.
#[derive(Debug, Args)]
pub struct RunLsArgs {
    /// Only this job's runs (its id, `app/name`, or a name in app `default`).
    pub job: Option<String>,
    /// Only runs in these states, comma-separated (scheduled, dispatched, acked,
    /// succeeded, failed, dead).
    #[arg(long)]
    pub state: Option<String>,
    /// Only runs of this app's jobs.
    #[arg(long)]
    pub app: Option<String>,
    /// Only runs fired to this consumer group.
    #[arg(long)]
    pub group: Option<String>,
    /// Only runs fired in this delivery mode (group, broadcast, zone, sharded).
    #[arg(long)]
    pub mode: Option<String>,
    /// Only runs fired at or after this instant (RFC 3339).
    #[arg(long)]
    pub fired_after: Option<String>,
    /// Only runs fired before this instant (RFC 3339).
    #[arg(long)]
    pub fired_before: Option<String>,
    /// Only runs finished at or after this instant (RFC 3339).
    #[arg(long)]
    pub finished_after: Option<String>,
    /// Only runs finished before this instant (RFC 3339).
    #[arg(long)]
    pub finished_before: Option<String>,
    /// At most this many, newest first (read in pages of up to 1000).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
    /// Start after this cursor (the `next` of an earlier `--json` listing).
    #[arg(long)]
    pub cursor: Option<String>,
}

impl RunLsArgs {
    /// The query string of `GET /v1/runs` for these filters, `job` resolved to its id,
    /// without paging.
    fn filters(&self, job: Option<uuid::Uuid>) -> String {
        let job = job.map(|id| id.to_string());
        let mut query = String::new();
        for (key, value) in [
            ("state", self.state.as_ref()),
            ("app", self.app.as_ref()),
            ("job", job.as_ref()),
            ("group", self.group.as_ref()),
            ("mode", self.mode.as_ref()),
            ("fired_after", self.fired_after.as_ref()),
            ("fired_before", self.fired_before.as_ref()),
            ("finished_after", self.finished_after.as_ref()),
            ("finished_before", self.finished_before.as_ref()),
        ] {
            if let Some(value) = value {
                query.push_str(&format!("&{key}={}", encode(value)));
            }
        }
        query
    }
}

/// Lists runs: a table, or with `--json` the API's page shape holding every run read and
/// the cursor after the last (null when there are no more).
pub async fn list(
    client: &Client,
    args: &RunLsArgs,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let job = match &args.job {
        Some(job) => Some(client.resolve_job(job).await?),
        None => None,
    };
    let filters = args.filters(job);
    let mut items: Vec<RunResponse> = Vec::new();
    let mut cursor = args.cursor.clone();
    loop {
        let want = (args.limit as usize - items.len()).min(MAX_PAGE as usize);
        let mut path = format!("/v1/runs?limit={want}{filters}");
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={}", encode(cursor)));
        }
        let page: ListResponse<RunResponse> = client.get(&path).await?;
        items.extend(page.items);
        cursor = page.next;
        if cursor.is_none() || items.len() >= args.limit as usize {
            break;
        }
    }
    let page = ListResponse {
        items,
        next: cursor,
    };
    if json {
        return write_json(out, &page);
    }
    let text = if job.is_some() {
        table::runs(&page.items)
    } else {
        across_jobs(&page.items)
    };
    write!(out, "{text}").context("writing output")?;
    if let Some(next) = &page.next {
        writeln!(out, "more: --cursor {next}").context("writing output")?;
    }
    Ok(())
}

/// Runs of several jobs, one per line, with their job.
fn across_jobs(runs: &[RunResponse]) -> String {
    let mut t = table::table(&[
        "RUN",
        "JOB",
        "FIRE TIME",
        "MODE",
        "ATTEMPT",
        "STATE",
        "FINISHED",
        "RESULT",
    ]);
    for run in runs {
        t.add_row(vec![
            run.id.to_string(),
            run.job_id.to_string(),
            run.fire_time.clone(),
            run.mode.as_str().to_string(),
            run.attempt.to_string(),
            run.state.to_string(),
            or_dash(run.finished_at.as_deref()),
            shorten(&result_text(run), 60),
        ]);
    }
    format!("{t}\n")
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[test]
    fn filters_become_the_api_query() {
        let cli = crate::cli::Cli::parse_from([
            "chimectl",
            "run",
            "ls",
            "--state",
            "failed,dead",
            "--app",
            "shop",
            "--fired-after",
            "2026-11-27T10:00:00+01:00",
            "--limit",
            "5",
        ]);
        let crate::cli::Command::Run(crate::cli::RunCommand::Ls(args)) = cli.command else {
            panic!("run ls parses as a listing")
        };
        assert_eq!(args.limit, 5);
        assert_eq!(
            args.filters(None),
            "&state=failed%2Cdead&app=shop&fired_after=2026-11-27T10%3A00%3A00%2B01%3A00"
        );
        assert!(
            crate::cli::Cli::try_parse_from(["chimectl", "run", "ls", "--limit", "0"]).is_err()
        );
    }
}
