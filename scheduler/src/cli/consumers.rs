//! `chimectl consumer ls`: the consumer instances chimed has heard from, then per group
//! its live instances and the work waiting for them (`GET /v1/consumers`).

use std::io::Write;

use anyhow::Context;
use clap::Subcommand;

use super::{audit::encode, client::Client, table::table, terminal::write_json};
use crate::api::dto::ConsumersResponse;

/// `chimectl consumer ...`.
#[derive(Debug, Subcommand)]
pub enum ConsumerCommand {
    /// List consumer instances (live ones, or with --stale every one on record) and the
    /// groups they serve; a group with queued work and no live instance is UNATTENDED.
    #[command(visible_alias = "list")]
    Ls {
        /// Only this group.
        #[arg(long)]
        group: Option<String>,
        /// Also instances no longer live (kept for consumer_retention, 24 h by default).
        #[arg(long)]
        stale: bool,
    },
}

/// Runs a `consumer` command.
pub async fn consumer(
    client: &Client,
    command: ConsumerCommand,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    match command {
        ConsumerCommand::Ls { group, stale } => {
            let mut query = Vec::new();
            if let Some(group) = group {
                query.push(format!("group={}", encode(&group)));
            }
            if stale {
                query.push("stale=include".to_string());
            }
            let mut path = "/v1/consumers".to_string();
            if !query.is_empty() {
                path = format!("{path}?{}", query.join("&"));
            }
            let answer: ConsumersResponse = client.get(&path).await?;
            if json {
                write_json(out, &answer)
            } else {
                write!(out, "{}", render(&answer)).context("writing output")
            }
        }
    }
}

/// The two tables: instances, then groups.
pub fn render(answer: &ConsumersResponse) -> String {
    let mut instances = table(&[
        "INSTANCE",
        "GROUP",
        "ZONE",
        "BROADCAST",
        "VERSION",
        "FIRST SEEN",
        "LAST SEEN",
        "LIVE",
        "RUNNING",
    ]);
    for i in &answer.instances {
        instances.add_row(vec![
            i.instance.clone(),
            i.group.clone(),
            i.zone.clone().unwrap_or_else(|| "-".into()),
            yes_no(i.broadcast).into(),
            i.version.clone().unwrap_or_else(|| "-".into()),
            i.first_seen.clone(),
            i.last_seen.clone(),
            yes_no(i.live).into(),
            i.running.to_string(),
        ]);
    }
    let mut groups = table(&["GROUP", "LIVE", "QUEUED", "RUNNING", "STATUS"]);
    for g in &answer.groups {
        groups.add_row(vec![
            g.group.clone(),
            g.live_consumers.to_string(),
            g.queued.to_string(),
            g.running.to_string(),
            if g.unattended {
                "UNATTENDED".into()
            } else {
                "ok".into()
            },
        ]);
    }
    let instances = if answer.instances.is_empty() {
        "no consumer instance\n".to_string()
    } else {
        format!("{instances}\n")
    };
    let groups = if answer.groups.is_empty() {
        "no group\n".to_string()
    } else {
        format!("{groups}\n")
    };
    format!("{instances}\n{groups}")
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::dto::{ConsumerGroupResponse, ConsumerResponse};

    #[test]
    fn the_tables_show_every_field_and_flag_unattended_groups() {
        let answer = ConsumersResponse {
            instances: vec![ConsumerResponse {
                instance: "web-1".into(),
                group: "orders".into(),
                zone: None,
                broadcast: true,
                version: Some("chime-consumer/0.1.0".into()),
                first_seen: "2026-11-21T10:00:00.000Z".into(),
                last_seen: "2026-11-21T10:05:00.000Z".into(),
                live: true,
                running: 3,
            }],
            groups: vec![
                ConsumerGroupResponse {
                    group: "billing".into(),
                    live_consumers: 0,
                    queued: 7,
                    running: 0,
                    unattended: true,
                },
                ConsumerGroupResponse {
                    group: "orders".into(),
                    live_consumers: 1,
                    queued: 0,
                    running: 3,
                    unattended: false,
                },
            ],
        };
        let text = render(&answer);
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            lines[1],
            [
                "web-1",
                "orders",
                "-",
                "yes",
                "chime-consumer/0.1.0",
                "2026-11-21T10:00:00.000Z",
                "2026-11-21T10:05:00.000Z",
                "yes",
                "3"
            ],
            "{text}"
        );
        assert!(
            lines.contains(&vec!["billing", "0", "7", "0", "UNATTENDED"]),
            "{text}"
        );
        assert!(
            lines.contains(&vec!["orders", "1", "0", "3", "ok"]),
            "{text}"
        );

        let empty = render(&ConsumersResponse {
            instances: vec![],
            groups: vec![],
        });
        assert_eq!(empty, "no consumer instance\n\nno group\n");
    }
}
