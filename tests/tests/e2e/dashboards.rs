//! The Grafana dashboard (`deploy/grafana/dashboards/chime.json`) and the alert rules
//! (`deploy/prometheus/chime-alerts.yml`) name only metrics a running `chimed` exports:
//! a real node on PostgreSQL does some work (a fire answered, a retry, a permanent
//! failure dead-lettered, runs waiting in a queue nobody consumes), its `/metrics` is
//! scraped with the kind of token the Compose stack gives Prometheus (a reader on an app
//! no job uses), and every `chime_*` name the two files use must be there as a sample
//! (histograms as `_bucket`, `_sum` and `_count`). A renamed metric fails here, not on a
//! blank panel or a silent alert.
//!
//! `metrics-exporter-prometheus` writes `# HELP`/`# TYPE` only for series that have a
//! value, so metrics that appear only on events too costly to cause here are listed in
//! [`EVENT_ONLY`] with the reason; for them the test checks that `telemetry.rs` still
//! declares the name.

use std::{collections::BTreeSet, path::Path, time::Duration};

use chime_tests::{TestConsumer, api::metric, wait};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Setup, StoreKind};

/// Metrics the dashboard or the rules use that appear only on events this test does not
/// cause, and why.
const EVENT_ONLY: &[(&str, &str)] = &[
    (
        "chime_failover_gap_seconds",
        "observed per takeover of an expired lease: needs a second node and a killed one",
    ),
    (
        "chime_store_errors_total",
        "counted when a store operation fails: needs a broken database",
    ),
    (
        "chime_timer_misfires_total",
        "counted when a job misfires: needs a node down or too slow past misfire_grace",
    ),
    (
        "chime_fires_collapsed_total",
        "counted when a misfire policy drops fires: as chime_timer_misfires_total",
    ),
    (
        "chime_republishes_total",
        "counted when a run is published again: a lost confirm, a takeover, or a consumer \
         that takes a task and never acks (a queue with no consumer withholds instead)",
    ),
    (
        "chime_rejected_replies_total",
        "counted when the collector refuses a reply: needs a forged or malformed reply",
    ),
];

fn repo_file(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `chime_*` names in `text` (whole words).
fn chime_names(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("chime_") && word.len() > "chime_".len())
        .map(String::from)
        .collect()
}

/// Every metric name the dashboard's queries and the alert rules' expressions use.
fn used_names() -> BTreeSet<String> {
    let dashboard: Value = serde_json::from_str(&repo_file("deploy/grafana/dashboards/chime.json"))
        .expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    collect_exprs(&dashboard, &mut exprs);
    assert!(
        exprs.len() >= 20,
        "dashboard queries found: {}",
        exprs.len()
    );
    let rules = repo_file("deploy/prometheus/chime-alerts.yml");
    for line in rules.lines() {
        if let Some(expr) = line.trim().strip_prefix("expr:") {
            exprs.push(expr.to_string());
        }
    }
    let names: BTreeSet<String> = exprs.iter().flat_map(|e| chime_names(e)).collect();
    assert!(names.len() >= 25, "names found: {names:?}");
    names
}

/// Every `expr` (panel targets) and `query` string (variables) in the dashboard.
fn collect_exprs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr" | "query" | "definition", Value::String(s)) => out.push(s.clone()),
                    _ => collect_exprs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

/// The metric names of the sample lines of a Prometheus text exposition.
fn exported(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(String::from)
        .collect()
}

#[test]
fn event_only_metrics_are_used_and_declared() {
    let used = used_names();
    let telemetry = repo_file("scheduler/src/telemetry.rs");
    for (name, _) in EVENT_ONLY {
        let histogram = ["_bucket", "_sum", "_count"]
            .iter()
            .any(|suffix| used.contains(&format!("{name}{suffix}")));
        assert!(
            used.contains(*name) || histogram,
            "{name} is listed as event-only but neither the dashboard nor the rules use it"
        );
        assert!(
            telemetry.contains(&format!("\"{name}\"")),
            "{name} is not declared in scheduler/src/telemetry.rs"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_of_the_dashboard_and_the_rules_is_exported() {
    let used = used_names();
    let s = Setup::with_env(
        StoreKind::Postgres,
        &[("CHIME_RECONCILE_INTERVAL", "200ms")],
    )
    .await;
    let api = &s.chimed.api;
    let url = s.vhost.amqp_url();
    let consumer = TestConsumer::start(&url, "dash", "d1", &[]).await;
    // The token the Compose stack gives Prometheus (deploy/prometheus/scrape-token.sh):
    // a reader on an app no job uses.
    let (status, created) = api
        .call(
            Method::POST,
            "/v1/tokens",
            Some(&json!({"name": "prometheus", "role": "reader", "apps": ["monitoring"]})),
        )
        .await;
    assert!(status.is_success(), "{status} {created}");
    let scraper = api.clone().with_token(created["token"].as_str());

    // A success, a retry then a success, a permanent failure (dead, dead-lettered).
    let mut runs = Vec::new();
    for (name, payload) in [
        ("ok", json!({})),
        ("retried", json!({"fail_until_attempt": 2})),
        ("doomed", json!({"fail": "permanent"})),
    ] {
        let job = api
            .create_job(json!({
                "app": "e2e", "name": name, "schedule": {"every": "1h"},
                "target": {"group": "dash"}, "payload": payload, "max_attempts": 3,
                "backoff": {"initial": "10ms", "max": "20ms"},
            }))
            .await;
        let run = api.trigger(job["id"].as_str().expect("an id")).await;
        runs.push((name, run["id"].as_str().expect("a run id").to_string()));
    }
    for (name, run) in &runs {
        let want = if *name == "doomed" {
            "dead"
        } else {
            "succeeded"
        };
        api.wait_run(run, "the run to finish", |r| r["state"] == want)
            .await;
    }
    // Runs of a group nobody consumes wait past their ack deadline.
    let lonely = api
        .create_job(json!({
            "app": "e2e", "name": "lonely", "schedule": {"every": "1h"},
            "target": {"group": "dash-lonely"}, "ack_timeout": "1s",
        }))
        .await;
    let waiting = api.trigger(lonely["id"].as_str().expect("an id")).await;
    api.wait_run(
        waiting["id"].as_str().expect("a run id"),
        "the run to wait for a consumer",
        |r| r["waiting_for"] == "consumer",
    )
    .await;

    // The DLQ sampler (every 15 s) has seen the groups' queues.
    let text = wait::until(
        "the sampled gauges of the groups",
        Duration::from_secs(40),
        || async {
            let text = scraper.metrics().await;
            // Both groups: a sample taken before the lonely job's group was listed
            // would lack it (CI saw that once).
            let ready = text.contains("chime_group_consumers{group=\"dash\"")
                && text.contains("chime_group_consumers{group=\"dash-lonely\"")
                && metric(&text, "chime_dlq_depth{queue=\"chime.group.dash.dlq\"}") >= 1.0;
            ready.then_some(text)
        },
    )
    .await;
    assert!(
        text.contains(
            "chime_group_consumers{group=\"dash-lonely\",queue=\"chime.group.dash-lonely\"} 0"
        ),
        "a group nobody consumes counts 0:\n{text}"
    );
    assert!(
        text.contains("chime_group_consumers{group=\"dash\",queue=\"chime.group.dash\"} 1"),
        "the consumer of group dash is not counted:\n{}",
        text.lines()
            .filter(|l| l.starts_with("chime_group_consumers"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // The scrape token reads metrics, not the jobs.
    let (status, body) = scraper.call(Method::GET, "/v1/jobs?app=e2e", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");

    let exported = exported(&text);
    let event_only: BTreeSet<&str> = EVENT_ONLY.iter().map(|(name, _)| *name).collect();
    let mut missing = Vec::new();
    for name in &used {
        let histogram = ["_bucket", "_sum", "_count"]
            .iter()
            .all(|suffix| exported.contains(&format!("{name}{suffix}")));
        if exported.contains(name) || histogram || event_only.contains(name.as_str()) {
            continue;
        }
        // A histogram series (`x_bucket`) used directly in a query.
        if let Some(base) = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            && event_only.contains(base)
        {
            continue;
        }
        missing.push(name.clone());
    }
    assert!(
        missing.is_empty(),
        "the dashboard or the alert rules use metrics chimed does not export: {missing:?}"
    );
    consumer.stop().await;
}
