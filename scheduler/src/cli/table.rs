//! Human-readable tables for `chimectl`.

use std::collections::BTreeMap;

use comfy_table::{Table, presets::NOTHING};

use crate::{
    api::{
        cluster::ClusterResponse,
        dto::{JobResponse, RunResponse},
    },
    dlq::{DlqMessage, DlqSummary, ReplayReport},
};

fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(NOTHING)
        .set_header(header.iter().copied());
    table
}

fn schedule(job: &JobResponse) -> String {
    let s = &job.spec.schedule;
    match (&s.cron, &s.every, &s.at) {
        (Some(cron), _, _) => format!("cron {cron} ({})", s.timezone.as_deref().unwrap_or("UTC")),
        (_, Some(every), _) => format!("every {every}"),
        (_, _, Some(at)) => format!("at {at}"),
        _ => "-".into(),
    }
}

fn or_dash(value: Option<&str>) -> String {
    value.unwrap_or("-").to_string()
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        format!("{}…", text.chars().take(max - 1).collect::<String>())
    }
}

/// Jobs, one per line.
pub fn jobs(jobs: &[JobResponse]) -> String {
    let mut t = table(&[
        "ID",
        "APP",
        "NAME",
        "SCHEDULE",
        "GROUP",
        "PAUSED",
        "NEXT FIRE",
    ]);
    for job in jobs {
        t.add_row(vec![
            job.id.to_string(),
            job.spec.app.clone(),
            job.spec.name.clone(),
            schedule(job),
            job.spec.target.group.clone(),
            job.spec.paused.to_string(),
            or_dash(job.next_fire_at.as_deref()),
        ]);
    }
    format!("{t}\n")
}

/// One job, field by field.
pub fn job_detail(job: &JobResponse) -> String {
    let mut t = Table::new();
    t.load_preset(NOTHING);
    let s = &job.spec;
    let rows = [
        ("id", job.id.to_string()),
        ("app", s.app.clone()),
        ("name", s.name.clone()),
        ("schedule", schedule(job)),
        ("group", s.target.group.clone()),
        ("payload", s.payload.to_string()),
        ("ack_timeout", s.ack_timeout.clone()),
        ("max_attempts", s.max_attempts.to_string()),
        (
            "misfire",
            serde_json::to_value(s.misfire)
                .map(|v| v.as_str().unwrap_or_default().to_string())
                .unwrap_or_default(),
        ),
        ("paused", s.paused.to_string()),
        ("version", job.version.to_string()),
        ("next_fire_at", or_dash(job.next_fire_at.as_deref())),
        ("created_at", job.created_at.clone()),
        ("updated_at", job.updated_at.clone()),
    ];
    for (key, value) in rows {
        t.add_row(vec![key.to_string(), value]);
    }
    format!("{t}\n")
}

fn result_text(run: &RunResponse) -> String {
    match (&run.output, &run.error) {
        (_, Some(error)) => format!("error: {error}"),
        (Some(output), None) => output.to_string(),
        (None, None) => "-".into(),
    }
}

/// Runs, one per line.
pub fn runs(runs: &[RunResponse]) -> String {
    let mut t = table(&[
        "RUN",
        "FIRE TIME",
        "TRIGGER",
        "ATTEMPT",
        "STATE",
        "CONSUMER",
        "FINISHED",
        "RESULT",
    ]);
    for run in runs {
        t.add_row(vec![
            run.id.to_string(),
            run.fire_time.clone(),
            serde_json::to_value(run.trigger)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            run.attempt.to_string(),
            run.state.to_string(),
            or_dash(run.consumer.as_deref()),
            or_dash(run.finished_at.as_deref()),
            shorten(&result_text(run), 60),
        ]);
    }
    format!("{t}\n")
}

/// One run, field by field.
pub fn run_detail(run: &RunResponse) -> String {
    let mut t = Table::new();
    t.load_preset(NOTHING);
    let rows = [
        ("id", run.id.to_string()),
        ("job_id", run.job_id.to_string()),
        ("fire_time", run.fire_time.clone()),
        ("state", run.state.to_string()),
        ("attempt", run.attempt.to_string()),
        ("shard", format!("{}/{}", run.shard, run.shard_total)),
        ("created_at", run.created_at.clone()),
        ("dispatched_at", or_dash(run.dispatched_at.as_deref())),
        ("acked_at", or_dash(run.acked_at.as_deref())),
        ("finished_at", or_dash(run.finished_at.as_deref())),
        ("consumer", or_dash(run.consumer.as_deref())),
        ("fired_by", or_dash(run.fired_by.as_deref())),
        ("payload", run.payload.to_string()),
        (
            "output",
            run.output.as_ref().map_or("-".into(), |o| o.to_string()),
        ),
        ("error", or_dash(run.error.as_deref())),
    ];
    for (key, value) in rows {
        t.add_row(vec![key.to_string(), value]);
    }
    format!("{t}\n")
}

/// The cluster: one line per node, with its shards as ranges.
pub fn cluster(status: &ClusterResponse) -> String {
    let mut t = table(&["NODE", "LIVE", "SHARDS", "RANGES", "HEARTBEAT", "ADDRESS"]);
    for node in &status.nodes {
        let this = if node.id == status.this_node {
            " *"
        } else {
            ""
        };
        t.add_row(vec![
            format!("{}{this}", node.id),
            if node.live { "yes" } else { "no" }.to_string(),
            node.shards.len().to_string(),
            shorten(&ranges(&node.shards), 60),
            node.heartbeat_at.clone(),
            if node.http_addr.is_empty() {
                "-".into()
            } else {
                node.http_addr.clone()
            },
        ]);
    }
    let unowned = if status.unowned_shards.is_empty() {
        String::new()
    } else {
        format!("unowned shards: {}\n", ranges(&status.unowned_shards))
    };
    format!(
        "{} store, {} shards, lease TTL {}s (* = the node that answered)\n{t}\n{unowned}",
        status.backend, status.shard_count, status.lease_ttl_s
    )
}

/// `0-3,7,9-10` for [0, 1, 2, 3, 7, 9, 10].
pub fn ranges(shards: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut iter = shards.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end = iter.next().expect("peeked");
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(",")
    }
}

/// Dead-letter queues, one per line, with their three commonest reasons.
pub fn dlq_queues(queues: &[DlqSummary]) -> String {
    let mut t = table(&["QUEUE", "DEPTH", "OLDEST", "TOP REASONS"]);
    for queue in queues {
        t.add_row(vec![
            queue.queue.clone(),
            queue.depth.to_string(),
            queue.oldest_age_s.map_or("-".into(), age),
            shorten(&top_reasons(&queue.reasons, 3), 160),
        ]);
    }
    format!("{t}\n")
}

/// Dead-lettered messages, one per line, with their payloads as compact JSON.
pub fn dlq_messages(messages: &[DlqMessage]) -> String {
    let mut t = table(&[
        "KIND", "RUN", "JOB", "ATTEMPT", "REASON", "DEAD AT", "PAYLOAD",
    ]);
    for message in messages {
        let payload = match (&message.payload, &message.body) {
            (Some(payload), _) => payload.to_string(),
            (None, Some(body)) => format!("body: {body}"),
            (None, None) => "-".into(),
        };
        t.add_row(vec![
            message.kind.clone(),
            message.run_id.map_or("-".into(), |id| id.to_string()),
            or_dash(message.job.as_deref()),
            message.attempt.map_or("-".into(), |a| a.to_string()),
            shorten(&message.reason, 60),
            or_dash(message.dead_at.as_deref()),
            shorten(&payload, 60),
        ]);
    }
    format!("{t}\n")
}

/// What a replay did, field by field.
pub fn replay_summary(queue: &str, report: &ReplayReport) -> String {
    let mut t = Table::new();
    t.load_preset(NOTHING);
    let skipped = if report.skipped.is_empty() {
        "0".to_string()
    } else {
        top_reasons(&report.skipped, usize::MAX)
    };
    let rows = [
        ("queue", queue.to_string()),
        ("replayed", report.replayed.to_string()),
        (
            "discarded",
            format!("{} (runs no longer dead)", report.discarded),
        ),
        ("skipped", skipped),
        ("remaining", report.remaining.to_string()),
    ];
    for (key, value) in rows {
        t.add_row(vec![key.to_string(), value]);
    }
    format!("{t}\n")
}

/// `reason (n), ...`, commonest first, at most `n` of them; `-` when none.
fn top_reasons(reasons: &BTreeMap<String, u32>, n: usize) -> String {
    let mut sorted: Vec<(&String, &u32)> = reasons.iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let parts: Vec<String> = sorted
        .into_iter()
        .take(n)
        .map(|(reason, count)| format!("{} ({count})", shorten(reason, 60)))
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// `42s`, `3m12s`, `5h07m`, `2d03h`.
fn age(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod dlq_tests {
    use super::*;

    #[test]
    fn ages_are_short() {
        assert_eq!(age(0.4), "0s");
        assert_eq!(age(192.0), "3m12s");
        assert_eq!(age(5.0 * 3600.0 + 7.0 * 60.0), "5h07m");
        assert_eq!(age(2.0 * 86400.0 + 3.0 * 3600.0), "2d03h");
    }

    #[test]
    fn top_reasons_are_commonest_first() {
        let reasons: BTreeMap<String, u32> = [("a", 1), ("b", 5), ("c", 2), ("d", 2)]
            .into_iter()
            .map(|(r, n)| (r.to_string(), n))
            .collect();
        assert_eq!(top_reasons(&reasons, 3), "b (5), c (2), d (2)");
        assert_eq!(top_reasons(&BTreeMap::new(), 3), "-");
    }

    #[test]
    fn messages_show_compact_truncated_payloads() {
        let message = DlqMessage {
            kind: "dead_letter".into(),
            reason: "asked to fail (permanent)".into(),
            run_id: Some(uuid::Uuid::nil()),
            job: Some("e2e/doomed".into()),
            attempt: Some(1),
            dead_at: Some("2026-01-01T00:00:00.000Z".into()),
            payload: Some(serde_json::json!({"fail": "permanent", "pad": "x".repeat(100)})),
            history: Vec::new(),
            body: None,
        };
        let text = dlq_messages(&[message]);
        assert!(text.contains(&uuid::Uuid::nil().to_string()), "{text}");
        assert!(text.contains(r#"{"fail":"permanent""#), "{text}");
        assert!(!text.contains(&"x".repeat(100)), "{text}");
    }
}

#[cfg(test)]
mod cluster_tests {
    use super::ranges;

    #[test]
    fn shard_ranges_are_compact() {
        assert_eq!(ranges(&[0, 1, 2, 3, 7, 9, 10]), "0-3,7,9-10");
        assert_eq!(ranges(&[]), "-");
        assert_eq!(ranges(&[5]), "5");
    }
}
