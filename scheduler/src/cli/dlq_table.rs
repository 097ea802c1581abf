//! Human-readable tables of `chimectl dlq`: queues, messages, and what a replay did.

use std::collections::BTreeMap;

use comfy_table::{Table, presets::NOTHING};

use super::table::{or_dash, shorten, table};
use crate::api::dto::{DlqMessage, DlqSummary, ReplayReport};

/// Dead-letter queues, one per line, with how many of their oldest messages are resolved
/// and their three commonest reasons.
pub fn dlq_queues(queues: &[DlqSummary]) -> String {
    let mut t = table(&["QUEUE", "DEPTH", "RESOLVED", "OLDEST", "TOP REASONS"]);
    for queue in queues {
        t.add_row(vec![
            queue.queue.clone(),
            queue.depth.to_string(),
            queue.resolved.to_string(),
            queue.oldest_age_s.map_or("-".into(), age),
            shorten(&top_reasons(&queue.reasons, 3), 160),
        ]);
    }
    format!("{t}\n")
}

/// Dead-lettered messages, one per line, with their payloads as compact JSON.
pub fn dlq_messages(messages: &[DlqMessage]) -> String {
    let mut t = table(&[
        "KIND", "RUN", "JOB", "ATTEMPT", "REASON", "DEAD AT", "RESOLVED", "PAYLOAD",
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
            if message.resolved { "yes" } else { "-" }.to_string(),
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
mod tests {
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
            resolved: true,
        };
        let text = dlq_messages(&[message]);
        assert!(text.contains("RESOLVED") && text.contains("yes"), "{text}");
        assert!(text.contains(&uuid::Uuid::nil().to_string()), "{text}");
        assert!(text.contains(r#"{"fail":"permanent""#), "{text}");
        assert!(!text.contains(&"x".repeat(100)), "{text}");
    }
}
