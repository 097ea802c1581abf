//! Human-readable tables for `chimectl`.

use std::collections::BTreeMap;

use chime_consumer::protocol::AttemptRecord;
use comfy_table::{Table, presets::NOTHING};

use super::schedule_text;
use crate::{
    api::{
        cluster::ClusterResponse,
        dto::{InstanceResponse, ItemResponse, JobResponse, RunResponse, timestamp},
    },
    cluster::shard_ranges as ranges,
    dlq::{DlqMessage, DlqSummary, ReplayReport},
    domain::{DeliveryMode, Target},
};

fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(NOTHING)
        .set_header(header.iter().copied());
    table
}

/// The next fire as a list shows it: `paused` for a paused job (its stored next fire is
/// the one it had when paused, not one that will happen).
fn next_fire(job: &JobResponse) -> String {
    if job.spec.paused {
        "paused".into()
    } else {
        or_dash(job.next_fire_at.as_deref())
    }
}

/// `group`, `broadcast`, `sharded(8)`, `zone(dc1,dc2)`, or `zone(live)` for every zone
/// with live consumers.
pub fn mode(target: &Target) -> String {
    match (target.mode, &target.zones, target.shards) {
        (DeliveryMode::Sharded, _, Some(n)) => format!("sharded({n})"),
        (DeliveryMode::Zone, Some(zones), _) => format!("zone({})", zones.join(",")),
        (DeliveryMode::Zone, None, _) => "zone(live)".into(),
        (mode, _, _) => mode.as_str().into(),
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
        "MODE",
        "PAUSED",
        "NEXT FIRE",
    ]);
    for job in jobs {
        t.add_row(vec![
            job.id.to_string(),
            job.spec.app.clone(),
            job.spec.name.clone(),
            schedule_text::summary(&job.spec.schedule),
            job.spec.target.group.clone(),
            shorten(&mode(&job.spec.target), 40),
            job.spec.paused.to_string(),
            next_fire(job),
        ]);
    }
    format!("{t}\n")
}

/// One job, field by field; a cron schedule with its fields by name and next fires.
pub fn job_detail(job: &JobResponse) -> String {
    let mut t = Table::new();
    t.load_preset(NOTHING);
    let s = &job.spec;
    let mut rows = vec![
        ("id", job.id.to_string()),
        ("app", s.app.clone()),
        ("name", s.name.clone()),
        ("schedule", schedule_text::summary(&s.schedule)),
    ];
    rows.extend(schedule_text::detail_rows(
        &s.schedule,
        s.paused,
        chrono::Utc::now(),
    ));
    rows.extend([
        ("group", s.target.group.clone()),
        ("mode", mode(&s.target)),
        ("payload", s.payload.to_string()),
        ("ack_timeout", s.ack_timeout.clone()),
        ("run_timeout", s.run_timeout.clone()),
        ("max_attempts", s.max_attempts.to_string()),
        (
            "backoff",
            format!("{} doubling to {}", s.backoff.initial, s.backoff.max),
        ),
        ("misfire", name_of(&s.misfire)),
        ("catch_up_limit", s.catch_up_limit.to_string()),
        ("overlap", name_of(&s.overlap)),
        ("paused", s.paused.to_string()),
        ("version", job.version.to_string()),
        ("next_fire_at", next_fire(job)),
        ("created_at", job.created_at.clone()),
        ("updated_at", job.updated_at.clone()),
    ]);
    for (key, value) in rows {
        t.add_row(vec![key.to_string(), value]);
    }
    format!("{t}\n")
}

/// A value's name in the API (`fire_once`, `forbid`, ...).
fn name_of(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
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
            name_of(&run.trigger),
            run.attempt.to_string(),
            run.state.to_string(),
            or_dash(run.consumer.as_deref()),
            or_dash(run.finished_at.as_deref()),
            shorten(&result_text(run), 60),
        ]);
    }
    format!("{t}\n")
}

/// One run, field by field; then, for a fire of several items, one line per item, and
/// for a broadcast run, one line per consumer instance.
pub fn run_detail(run: &RunResponse) -> String {
    let mut t = Table::new();
    t.load_preset(NOTHING);
    let mut rows = vec![
        ("id", run.id.to_string()),
        ("job_id", run.job_id.to_string()),
        ("fire_time", run.fire_time.clone()),
        ("state", run.state.to_string()),
        ("attempt", run.attempt.to_string()),
        ("mode", run.mode.as_str().to_string()),
        ("shard", format!("{}/{}", run.shard, run.shard_total)),
    ];
    if let Some(zone) = &run.zone {
        rows.push(("zone", zone.clone()));
    }
    let items = run.items.as_deref().filter(|items| items.len() > 1);
    if let (Some(items), Some(fire)) = (items, run.fire_state) {
        rows.push(("fire", format!("{} ({} items)", fire.as_str(), items.len())));
    }
    rows.extend([
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
    ]);
    for (key, value) in rows {
        t.add_row(vec![key.to_string(), value]);
    }
    let mut text = format!("{t}\n");
    if !run.history.is_empty() {
        text.push_str(&format!(
            "\nearlier attempts (each that did not succeed):\n{}",
            attempts(&run.history)
        ));
    }
    if let Some(items) = items {
        text.push_str(&format!(
            "\nitems of this fire (* = this run):\n{}",
            fire_items(run, items)
        ));
    }
    if run.mode == DeliveryMode::Broadcast {
        text.push_str(&if run.instances.is_empty() {
            "\ninstances: none has acked\n".to_string()
        } else {
            format!("\ninstances:\n{}", instances(&run.instances))
        });
    }
    text
}

/// A run's attempt history, one attempt per line: what happened, when, on which consumer,
/// the error, and when the retry was due.
fn attempts(history: &[AttemptRecord]) -> String {
    let mut t = table(&["ATTEMPT", "EVENT", "AT", "CONSUMER", "ERROR", "RETRY AT"]);
    for record in history {
        t.add_row(vec![
            record.attempt.to_string(),
            record.event.clone(),
            timestamp(record.at),
            or_dash(record.consumer.as_deref()),
            shorten(record.error.as_deref().unwrap_or("-"), 60),
            record.retry_at.map_or("-".into(), timestamp),
        ]);
    }
    format!("{t}\n")
}

/// The items of `run`'s fire, one per line: the shard (or zone) marked `*` for `run`.
fn fire_items(run: &RunResponse, items: &[ItemResponse]) -> String {
    let by_zone = run.mode == DeliveryMode::Zone;
    let mut t = table(&[
        if by_zone { "ZONE" } else { "SHARD" },
        "STATE",
        "ATTEMPT",
        "CONSUMER",
        "RUN",
    ]);
    for item in items {
        let name = match (&item.zone, by_zone) {
            (Some(zone), true) => zone.clone(),
            _ => item.shard.to_string(),
        };
        let this = if item.id == run.id { " *" } else { "" };
        t.add_row(vec![
            format!("{name}{this}"),
            item.state.to_string(),
            item.attempt.to_string(),
            or_dash(item.consumer.as_deref()),
            item.id.to_string(),
        ]);
    }
    format!("{t}\n")
}

/// A broadcast run's consumer instances, one per line.
fn instances(instances: &[InstanceResponse]) -> String {
    let mut t = table(&["INSTANCE", "STATE", "ATTEMPT", "FINISHED", "RESULT"]);
    for instance in instances {
        let result = match (&instance.error, &instance.output) {
            (Some(error), _) => format!("error: {error}"),
            (None, Some(output)) => output.to_string(),
            (None, None) => "-".into(),
        };
        t.add_row(vec![
            instance.instance.clone(),
            name_of(&instance.state),
            instance.attempt.to_string(),
            or_dash(instance.finished_at.as_deref()),
            shorten(&result, 60),
        ]);
    }
    format!("{t}\n")
}

/// What `job trigger` says: the run, and how many items the fire has when more than one.
pub fn triggered(job: &str, run: &RunResponse) -> String {
    let items = run.items.as_ref().map_or(1, Vec::len);
    let more = if items > 1 {
        format!(", the first of {items} items")
    } else {
        String::new()
    };
    format!("triggered job {job}: run {} ({}{more})", run.id, run.state)
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
mod job_and_run_tests {
    use chrono::{DateTime, Utc};
    use serde_json::{Value, json};

    use super::*;
    use crate::{
        api::dto::JobRequest,
        domain::{
            Job, Run, RunState, RunTrigger,
            broadcast::{InstanceReceipt, ReceiptState},
        },
    };

    fn job(target: Value) -> JobResponse {
        let request: JobRequest = serde_json::from_value(
            json!({"app": "shop", "name": "n", "schedule": {"every": "1m"}, "target": target}),
        )
        .unwrap();
        JobResponse::from(&Job::new(request.into_spec(1024).unwrap(), Utc::now()))
    }

    fn at() -> DateTime<Utc> {
        "2026-11-21T10:00:00Z".parse().unwrap()
    }

    fn item(mode: DeliveryMode, shard: u32, total: u32, zone: Option<&str>) -> Run {
        Run::new(
            uuid::Uuid::nil(),
            at(),
            RunTrigger::Schedule,
            Value::Null,
            at(),
        )
        .item(mode, shard, total, zone.map(str::to_string))
    }

    #[test]
    fn modes_are_short() {
        let cases = [
            (json!({"group": "g"}), "group"),
            (json!({"group": "g", "mode": "broadcast"}), "broadcast"),
            (
                json!({"group": "g", "mode": "sharded", "shards": 8}),
                "sharded(8)",
            ),
            (
                json!({"group": "g", "mode": "zone", "zones": ["dc1", "dc2"]}),
                "zone(dc1,dc2)",
            ),
            (json!({"group": "g", "mode": "zone"}), "zone(live)"),
        ];
        for (target, want) in cases {
            let job = job(target);
            assert_eq!(mode(&job.spec.target), want);
            let listed = jobs(std::slice::from_ref(&job));
            assert!(listed.contains("MODE") && listed.contains(want), "{listed}");
            let detail = job_detail(&job);
            assert!(
                detail
                    .lines()
                    .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["mode", want]),
                "{detail}"
            );
        }
    }

    #[test]
    fn a_paused_job_lists_its_next_fire_as_paused() {
        let mut paused = job(json!({"group": "g"}));
        paused.spec.paused = true;
        paused.next_fire_at = Some("2020-01-01T00:00:00.000Z".into());
        let listed = jobs(std::slice::from_ref(&paused));
        let row = listed.lines().nth(1).unwrap();
        assert!(
            row.trim_end().ends_with("paused") && !row.contains("2020"),
            "{listed}"
        );
        let detail = job_detail(&paused);
        assert!(
            detail
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["next_fire_at", "paused"]),
            "{detail}"
        );
    }

    #[test]
    fn job_detail_shows_every_field() {
        let detail = job_detail(&job(json!({"group": "g"})));
        for key in [
            "schedule",
            "payload",
            "ack_timeout",
            "run_timeout",
            "max_attempts",
            "backoff",
            "misfire",
            "catch_up_limit",
            "overlap",
            "paused",
            "version",
        ] {
            assert!(
                detail
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(key)),
                "{key}: {detail}"
            );
        }
        assert!(detail.contains("1s doubling to 5m"), "{detail}");
    }

    #[test]
    fn run_detail_shows_the_attempt_history() {
        use chime_consumer::protocol::AttemptRecord;
        let mut run = RunResponse::from(&item(DeliveryMode::Group, 0, 1, None));
        let text = run_detail(&run);
        assert!(!text.contains("earlier attempts"), "{text}");
        run.history = vec![
            AttemptRecord {
                attempt: 1,
                event: "failed".into(),
                at: at(),
                consumer: Some("web-1".into()),
                error: Some("database down".into()),
                retry_at: Some(at() + chrono::Duration::seconds(2)),
            },
            AttemptRecord {
                attempt: 2,
                event: "ack_timeout".into(),
                at: at() + chrono::Duration::seconds(40),
                consumer: None,
                error: None,
                retry_at: None,
            },
        ];
        let text = run_detail(&run);
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip_while(|l| !l.starts_with("earlier attempts"))
            .skip(1)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows[0],
            ["ATTEMPT", "EVENT", "AT", "CONSUMER", "ERROR", "RETRY", "AT"],
            "{text}"
        );
        assert_eq!(
            rows[1],
            [
                "1",
                "failed",
                "2026-11-21T10:00:00.000Z",
                "web-1",
                "database",
                "down",
                "2026-11-21T10:00:02.000Z"
            ],
            "{text}"
        );
        assert_eq!(
            rows[2],
            [
                "2",
                "ack_timeout",
                "2026-11-21T10:00:40.000Z",
                "-",
                "-",
                "-"
            ],
            "{text}"
        );
    }

    #[test]
    fn a_sharded_run_lists_the_items_of_its_fire() {
        let mut items: Vec<Run> = (0..3)
            .map(|i| item(DeliveryMode::Sharded, i, 3, None))
            .collect();
        items[0].state = RunState::Succeeded;
        items[0].consumer = Some("web-1".into());
        items[1].state = RunState::Dead;
        items[1].attempt = 5;
        let run = RunResponse::from(&items[1]).with_fire(&items);
        let text = run_detail(&run);
        assert!(text.contains("sharded") && text.contains("1/3"), "{text}");
        assert!(text.contains("dead (3 items)"), "{text}");
        assert!(text.contains("SHARD") && !text.contains("ZONE"), "{text}");
        let row = |needle: &str| {
            // The last: the run's own id is also in the field rows above.
            text.lines()
                .rfind(|l| l.contains(needle))
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        assert_eq!(
            row(&items[0].id.to_string()),
            ["0", "succeeded", "1", "web-1", &items[0].id.to_string()]
        );
        assert_eq!(
            row(&items[1].id.to_string())[..4],
            ["1", "*", "dead", "5"],
            "{text}"
        );
        assert!(!text.contains("instances"), "{text}");
        assert_eq!(
            triggered("j", &RunResponse::from(&items[0]).with_fire(&items)),
            format!(
                "triggered job j: run {} (succeeded, the first of 3 items)",
                items[0].id
            )
        );
    }

    #[test]
    fn a_zone_run_names_its_zone_and_a_single_item_shows_no_item_table() {
        let items = [
            item(DeliveryMode::Zone, 0, 2, Some("dc1")),
            item(DeliveryMode::Zone, 1, 2, Some("dc2")),
        ];
        let text = run_detail(&RunResponse::from(&items[1]).with_fire(&items));
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["zone", "dc2"]),
            "{text}"
        );
        assert!(text.contains("ZONE") && text.contains("dc2 *"), "{text}");
        assert!(text.contains("running (2 items)"), "{text}");

        let single = item(DeliveryMode::Group, 0, 1, None);
        let text = run_detail(&RunResponse::from(&single).with_fire(std::slice::from_ref(&single)));
        assert!(
            !text.contains("items of this fire") && !text.contains("fire "),
            "{text}"
        );
        assert!(!text.contains("zone"), "{text}");
    }

    #[test]
    fn a_broadcast_run_lists_its_instances() {
        let mut run = item(DeliveryMode::Broadcast, 0, 1, None);
        let text = run_detail(&RunResponse::from(&run));
        assert!(text.contains("instances: none has acked"), "{text}");
        let receipt = |name: &str, state, output, error: Option<&str>| InstanceReceipt {
            instance: name.into(),
            attempt: 2,
            state,
            acked_at: at(),
            heartbeat_at: None,
            finished_at: Some(at()),
            output,
            error: error.map(|message| chime_consumer::protocol::TaskError {
                message: message.into(),
                retryable: true,
                retry_after_ms: None,
            }),
        };
        run.instances = vec![
            receipt(
                "web-1",
                ReceiptState::Succeeded,
                Some(json!({"ok": 1})),
                None,
            ),
            receipt("web-2", ReceiptState::Lost, None, Some("no heartbeat")),
        ];
        let text = run_detail(&RunResponse::from(&run));
        assert!(
            text.contains("INSTANCE") && text.contains("FINISHED"),
            "{text}"
        );
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines.iter().any(|l| l.contains("web-1")
                && l.contains("succeeded")
                && l.contains(r#"{"ok":1}"#)),
            "{text}"
        );
        assert!(
            lines.iter().any(|l| l.contains("web-2")
                && l.contains("lost")
                && l.contains("2026-11-21T10:00:00.000Z")
                && l.contains("error: no heartbeat")),
            "{text}"
        );
    }
}
