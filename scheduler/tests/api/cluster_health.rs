//! `/v1/cluster`, `/healthz`, `/readyz` and `/metrics`.

use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode, header};
use serde_json::json;

use crate::support::{TestApp, hourly, id};

#[tokio::test]
async fn get_cluster_on_sqlite_is_this_node_with_every_shard() {
    let app = TestApp::new().await;
    let answer = app.get("/v1/cluster").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let body = &answer.body;
    assert_eq!(body["backend"], "sqlite");
    assert_eq!(body["this_node"], "api-test-node");
    assert_eq!(body["shard_count"], 256);
    assert_eq!(body["unowned_shards"], json!([]));
    let nodes = body["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0]["id"], "api-test-node");
    assert_eq!(nodes[0]["live"], true);
    assert_eq!(nodes[0]["http_addr"], "");
    assert_eq!(nodes[0]["shards"].as_array().unwrap().len(), 256);
    assert_eq!(nodes[0]["started_at"], nodes[0]["heartbeat_at"]);
}

#[tokio::test]
async fn get_healthz_is_200_ok() {
    let app = TestApp::new().await;
    let answer = app.get("/healthz").await;
    assert_eq!(
        (answer.status, answer.body),
        (StatusCode::OK, json!({"status": "ok"}))
    );
}

#[tokio::test]
async fn get_readyz_without_a_broker_channel_is_503_naming_the_check() {
    let app = TestApp::new().await;
    let answer = app.get("/readyz").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        answer.body,
        json!({"status": "not_ready", "checks": {"database": "ok", "broker": "unavailable"}})
    );
}

#[tokio::test]
async fn get_readyz_with_database_and_broker_is_200() {
    let mut app = TestApp::with_broker().await;
    let drain = app.run_dispatcher();
    let deadline = Instant::now() + Duration::from_secs(15);
    let answer = loop {
        let answer = app.get("/readyz").await;
        if answer.status == StatusCode::OK || Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drain.cancel();
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(
        answer.body,
        json!({"status": "ready", "checks": {"database": "ok", "broker": "ok"}})
    );
}

#[tokio::test]
async fn get_metrics_is_prometheus_text_counting_manual_fires() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("metrics")).await;
    app.call(Method::POST, &format!("/v1/jobs/{}/trigger", id(&job)))
        .await;
    let answer = app.get("/metrics").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.headers[header::CONTENT_TYPE],
        "text/plain; version=0.0.4"
    );
    let text = answer.body.as_str().expect("text");
    assert!(
        text.lines()
            .any(|line| line.starts_with("chime_fires_total{") && line.contains("manual")),
        "{text}"
    );
}
