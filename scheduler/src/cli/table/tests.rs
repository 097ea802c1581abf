//! The job, run and cluster tables.

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
fn a_finished_job_lists_its_next_fire_as_finished() {
    let mut done = job(json!({"group": "g"}));
    done.next_fire_at = None;
    done.finished = true;
    let listed = jobs(std::slice::from_ref(&done));
    let row = listed.lines().nth(1).unwrap();
    assert!(row.trim_end().ends_with("finished"), "{listed}");
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
        "start_at",
        "end_at",
        "jitter",
        "pause_after_failures",
        "paused",
        "paused_reason",
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
        lines
            .iter()
            .any(|l| l.contains("web-1") && l.contains("succeeded") && l.contains(r#"{"ok":1}"#)),
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
