//! `chimectl run stats`: the totals of [`GET /v1/stats/runs`](crate::api::dto::run_stats)
//! (runs fired in the last N minutes, cluster-wide) as a table of name and value, or the
//! API's whole answer with `--json`.

use std::io::Write;

use anyhow::Context;
use clap::Args;

use super::{audit::encode, client::Client, table::table, terminal::write_json};
use crate::api::dto::{RunStatsResponse, run_stats::LatenessResponse};

/// Options of `chimectl run stats`.
#[derive(Debug, Args)]
pub struct RunStatsArgs {
    /// The window: the last N minutes, 5 to 1440.
    #[arg(long, default_value_t = 60)]
    pub minutes: u32,
    /// Count only this app's runs.
    #[arg(long)]
    pub app: Option<String>,
}

/// Prints the run statistics of the window.
pub async fn stats(
    client: &Client,
    args: &RunStatsArgs,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut path = format!("/v1/stats/runs?minutes={}", args.minutes);
    if let Some(app) = &args.app {
        path.push_str(&format!("&app={}", encode(app)));
    }
    let stats: RunStatsResponse = client.get(&path).await?;
    if json {
        return write_json(out, &stats);
    }
    write!(out, "{}", totals_table(&stats)).context("writing output")
}

/// The totals as rows of name and value.
fn totals_table(stats: &RunStatsResponse) -> String {
    let t = &stats.totals;
    let s = &t.by_state;
    let mut table = table(&["TOTAL", "VALUE"]);
    for (name, value) in [
        ("window", format!("{} to {}", stats.from, stats.to)),
        ("fired", t.fired.to_string()),
        ("fires/s", t.fires_per_s.to_string()),
        ("retried", t.retried.to_string()),
        ("dead", t.dead.to_string()),
        ("lateness p50 (ms)", edge(t.lateness_ms, |l| l.p50)),
        ("lateness p95 (ms)", edge(t.lateness_ms, |l| l.p95)),
        ("lateness p99 (ms)", edge(t.lateness_ms, |l| l.p99)),
        ("scheduled", s.scheduled.to_string()),
        ("dispatched", s.dispatched.to_string()),
        ("acked", s.acked.to_string()),
        ("succeeded", s.succeeded.to_string()),
        ("failed", s.failed.to_string()),
        ("cancelled", s.cancelled.to_string()),
    ] {
        table.add_row(vec![name.to_string(), value]);
    }
    format!("{table}\n")
}

/// A percentile as the table shows it: `<= N` (an upper edge), `-` when none.
fn edge(lateness: LatenessResponse, pick: fn(LatenessResponse) -> Option<u32>) -> String {
    pick(lateness).map_or_else(|| "-".into(), |ms| format!("<= {ms}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_every_total_and_bounds_percentiles() {
        let stats: RunStatsResponse = serde_json::from_value(serde_json::json!({
            "from": "2026-11-28T09:00:00.000Z", "to": "2026-11-28T10:00:00.000Z",
            "bucket_s": 60, "buckets": [],
            "totals": {"fired": 7200, "fires_per_s": 2.0, "retried": 240, "dead": 12,
                "by_state": {"scheduled": 3, "dispatched": 1, "acked": 2, "succeeded": 7000,
                             "failed": 0, "dead": 12, "cancelled": 0},
                "lateness_ms": {"p50": 4, "p95": null, "p99": 80}}
        }))
        .unwrap();
        let text = totals_table(&stats);
        for line in [
            "fired",
            "7200",
            "fires/s",
            "lateness p50 (ms)",
            "<= 4",
            "<= 80",
            "succeeded",
            "2026-11-28T09:00:00.000Z to 2026-11-28T10:00:00.000Z",
        ] {
            assert!(text.contains(line), "{line:?} in\n{text}");
        }
        let p95 = text.lines().find(|l| l.contains("p95")).expect("a p95 row");
        assert!(p95.trim_end().ends_with('-'), "{p95}");
    }
}
