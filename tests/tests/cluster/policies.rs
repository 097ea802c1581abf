//! Rules that hold across nodes: overlap policy `forbid`, and SQLite staying single-node.

use std::time::Duration;

use chime_tests::{
    Chimed, TestDatabase, TestVhost,
    chimed::ChimedConfig,
    cluster::{Cluster, GROUP},
};
use serde_json::json;

use crate::exclusive;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_forbid_never_runs_a_job_twice_at_once() {
    let _one = exclusive().await;
    let mut cluster = Cluster::start(2, &[]).await;
    cluster.wait_balanced(2, Duration::from_secs(20)).await;
    let job = cluster
        .api()
        .create_job(json!({
            "app": "cluster", "name": "exclusive",
            "schedule": {"every": "1s"}, "target": {"group": GROUP},
            "overlap": "forbid", "payload": {"sleep_ms": 2500},
        }))
        .await;
    assert_eq!(job["overlap"], "forbid");
    let id = job["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_secs(6)).await;
    // Ownership moves to the other node mid-way; the rule still holds.
    cluster.stop(0).await;
    cluster.wait_balanced(1, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_secs(6)).await;

    let runs = cluster.api().runs(&id).await;
    assert!(runs.len() >= 2, "it fired: {runs:?}");
    assert!(
        runs.len() <= 7,
        "fires were skipped while a run was unfinished: {}",
        runs.len()
    );
    let mut spans: Vec<(i64, i64)> = Vec::new();
    for run in &runs {
        let task = run["id"].as_str().unwrap();
        let at = |kind: &str| {
            cluster
                .consumer
                .events_of(kind)
                .iter()
                .find(|e| e["task_id"] == task)
                .and_then(|e| e["at_ms"].as_i64())
        };
        if let (Some(start), Some(end)) = (at("started"), at("finished")) {
            spans.push((start, end));
        }
    }
    spans.sort_unstable();
    assert!(spans.len() >= 2, "several runs finished: {spans:?}");
    for pair in spans.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "runs overlapped: {pair:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_refuses_a_second_node_on_the_same_file() {
    let vhost = TestVhost::new();
    let db = TestDatabase::sqlite();
    let config = ChimedConfig::new(db.url(), &vhost.amqp_url());
    let first = Chimed::start(config.clone()).await;
    let (status, log) = Chimed::start_expecting_exit(config.clone()).await;
    assert!(!status.success(), "the second chimed must not run");
    assert!(
        log.contains("another chimed is already running") && log.contains("PostgreSQL"),
        "the refusal says why and what to do: {log}"
    );
    // The first one is unaffected, and once it stops the file is free again.
    let (status, _) = first.api.call(reqwest::Method::GET, "/readyz", None).await;
    assert!(status.is_success());
    assert!(first.stop().await.success());
    let again = Chimed::start(config).await;
    assert!(again.stop().await.success());
}
