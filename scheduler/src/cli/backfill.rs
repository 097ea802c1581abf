//! `chimectl job backfill JOB --from .. --to .. [--rate N] [--overlap allow|forbid]
//! [--dry-run]`: records a job's past fires in a range (`POST /v1/jobs/{id}/backfill`).

use std::io::Write;

use anyhow::Context;
use clap::{Args, ValueEnum};

use super::{client::Client, terminal::write_json};
use crate::api::dto::BackfillResponse;

/// The arguments of `chimectl job backfill`.
#[derive(Debug, Args)]
pub struct BackfillArgs {
    /// The job.
    pub job: String,
    /// Start of the range, RFC 3339 (included).
    #[arg(long)]
    pub from: String,
    /// End of the range, RFC 3339 (excluded; not in the future).
    #[arg(long)]
    pub to: String,
    /// Fires dispatched a second, 0.01 to 1000 (server default 10).
    #[arg(long)]
    pub rate: Option<f64>,
    /// `allow` (default): backfill whatever else of the job runs; `forbid`: refuse while
    /// the job has an unfinished run.
    #[arg(long, value_enum, default_value_t = Overlap::Allow)]
    pub overlap: Overlap,
    /// Count the range's fires and record nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `--overlap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Overlap {
    /// Backfill whatever else of the job runs.
    Allow,
    /// Refuse while the job has an unfinished run.
    Forbid,
}

/// The request body of `args`.
pub fn body(args: &BackfillArgs) -> serde_json::Value {
    let mut body = serde_json::json!({
        "from": args.from,
        "to": args.to,
        "overlap": match args.overlap {
            Overlap::Allow => "allow",
            Overlap::Forbid => "forbid",
        },
        "dry_run": args.dry_run,
    });
    if let Some(rate) = args.rate {
        body["rate"] = serde_json::json!(rate);
    }
    body
}

/// Backfills the job of `args` and prints what was recorded.
pub async fn backfill(
    client: &Client,
    args: &BackfillArgs,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let id = client.resolve_job(&args.job).await?;
    let done: BackfillResponse = client
        .post(&format!("/v1/jobs/{id}/backfill"), Some(&body(args)))
        .await?;
    if json {
        return write_json(out, &done);
    }
    write!(out, "{}", render(&done)).context("writing output")
}

/// A few lines saying what the backfill did.
fn render(done: &BackfillResponse) -> String {
    let range = match (&done.first_fire, &done.last_fire) {
        (Some(first), Some(last)) => format!(" ({first} to {last})"),
        _ => String::new(),
    };
    let mut text = format!(
        "job {}: {} fires from {} to {}{range}\n",
        done.job_id, done.fires, done.from, done.to
    );
    if done.dry_run {
        text.push_str("dry run: nothing recorded\n");
        return text;
    }
    text.push_str(&format!(
        "recorded {} fires ({} runs), {} already present\n",
        done.recorded, done.runs, done.present
    ));
    if let Some(last) = &done.last_due_at {
        text.push_str(&format!(
            "dispatching at {} a second, the last due at {last}\n",
            done.rate
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::backfill::BackfillOverlap;

    fn answer(dry_run: bool) -> BackfillResponse {
        BackfillResponse {
            job_id: "j".into(),
            from: "2026-11-01T00:00:00.000Z".into(),
            to: "2026-11-02T00:00:00.000Z".into(),
            rate: 10.0,
            overlap: BackfillOverlap::Allow,
            dry_run,
            fires: 24,
            first_fire: Some("2026-11-01T00:00:00.000Z".into()),
            last_fire: Some("2026-11-01T23:00:00.000Z".into()),
            recorded: if dry_run { 0 } else { 20 },
            present: if dry_run { 0 } else { 4 },
            runs: if dry_run { 0 } else { 20 },
            last_due_at: (!dry_run).then(|| "2026-12-01T00:00:02.000Z".into()),
        }
    }

    #[test]
    fn the_summary_says_what_was_recorded_and_what_was_there() {
        let text = render(&answer(false));
        assert!(text.contains("24 fires"), "{text}");
        assert!(
            text.contains("recorded 20 fires (20 runs), 4 already present"),
            "{text}"
        );
        assert!(text.contains("10 a second"), "{text}");
        let dry = render(&answer(true));
        assert!(dry.contains("dry run: nothing recorded"), "{dry}");
        assert!(!dry.contains("recorded 0"), "{dry}");
    }

    #[test]
    fn the_body_carries_the_rate_only_when_given() {
        let mut args = BackfillArgs {
            job: "shop/close".into(),
            from: "2026-11-01T00:00:00Z".into(),
            to: "2026-11-02T00:00:00Z".into(),
            rate: None,
            overlap: Overlap::Forbid,
            dry_run: true,
        };
        let without = body(&args);
        assert!(without.get("rate").is_none());
        assert_eq!(without["overlap"], "forbid");
        assert_eq!(without["dry_run"], true);
        args.rate = Some(2.5);
        assert_eq!(body(&args)["rate"], 2.5);
    }
}
