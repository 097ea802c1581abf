//! `chimectl audit ls` (the audit trail, newest first) and `chimectl job versions JOB`.

use std::io::Write;

use anyhow::Context;
use clap::Args;

use super::{client::Client, table::table, terminal::write_json};
use crate::api::dto::{AuditEntryResponse, ListResponse};

/// Filters of `chimectl audit ls`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only changes made by this token.
    #[arg(long)]
    pub actor: Option<String>,
    /// Only this action (job.create, job.update, job.delete, job.pause, job.resume,
    /// job.trigger, dlq.replay, dlq.purge, token.create, token.revoke).
    #[arg(long)]
    pub action: Option<String>,
    /// Only changes of this app's jobs.
    #[arg(long)]
    pub app: Option<String>,
    /// Only changes at or after this instant (RFC 3339).
    #[arg(long)]
    pub since: Option<String>,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
}

/// Prints the audit trail.
pub async fn list(
    client: &Client,
    args: &AuditArgs,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut path = format!("/v1/audit?limit={}", args.limit.clamp(1, 1000));
    for (key, value) in [
        ("actor", &args.actor),
        ("action", &args.action),
        ("app", &args.app),
        ("since", &args.since),
    ] {
        if let Some(value) = value {
            path.push_str(&format!("&{key}={}", encode(value)));
        }
    }
    let page: ListResponse<AuditEntryResponse> = client.get(&path).await?;
    print(out, json, &page)
}

/// Prints job `id`'s versions.
pub async fn versions(
    client: &Client,
    id: uuid::Uuid,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let page: ListResponse<AuditEntryResponse> =
        client.get(&format!("/v1/jobs/{id}/versions")).await?;
    print(out, json, &page)
}

fn print(
    out: &mut dyn Write,
    json: bool,
    page: &ListResponse<AuditEntryResponse>,
) -> anyhow::Result<()> {
    if json {
        return write_json(out, page);
    }
    let mut t = table(&["AT", "ACTOR", "ACTION", "TARGET", "APP", "VERSION"]);
    for entry in &page.items {
        t.add_row(vec![
            entry.at.clone(),
            entry.actor.clone(),
            entry.action.clone(),
            entry.target.clone(),
            entry.app.clone().unwrap_or_else(|| "-".into()),
            entry.change["version"]
                .as_i64()
                .map_or_else(|| "-".into(), |v| v.to_string()),
        ]);
    }
    writeln!(out, "{t}").context("writing output")
}

/// Percent-encodes a query value.
pub(super) fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
