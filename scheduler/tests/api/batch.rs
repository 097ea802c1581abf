//! `POST /v1/jobs/batch` (bulk job import, all or none): a whole batch stored in order,
//! a bad item named by its path with nothing stored, duplicate names within the batch and
//! against stored jobs, the size bounds, and the route's own body limit.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Answer, PAYLOAD_LIMIT, TestApp, hourly};

const BATCH: &str = "/v1/jobs/batch";

fn batch(jobs: Vec<Value>) -> Value {
    json!({ "jobs": jobs })
}

fn named(prefix: &str, n: usize) -> Vec<Value> {
    (0..n).map(|i| hourly(&format!("{prefix}-{i}"))).collect()
}

async fn stored(app: &TestApp) -> usize {
    app.get("/v1/jobs?limit=1000").await.body["items"]
        .as_array()
        .expect("a job list")
        .len()
}

/// The `errors` of a refusal as (index, code, field).
fn errors(answer: &Answer) -> Vec<(u64, String, String)> {
    answer.body["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no errors list: {}", answer.body))
        .iter()
        .map(|e| {
            (
                e["index"].as_u64().unwrap(),
                e["code"].as_str().unwrap().to_string(),
                e["field"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn post_batch_creates_every_job_in_order() {
    let app = TestApp::new().await;
    let mut jobs = named("bulk", 300);
    jobs[1]["app"] = json!("other");
    jobs[2]["paused"] = json!(true);
    let answer = app.json(Method::POST, BATCH, &batch(jobs)).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    let items = answer.body["items"].as_array().expect("items");
    assert_eq!(items.len(), 300);
    for (i, item) in items.iter().enumerate() {
        assert_eq!(item["name"], format!("bulk-{i}"));
        assert_eq!(item["version"], 1);
    }
    assert_eq!(items[1]["app"], "other");
    assert_eq!(items[2]["paused"], true);
    assert!(items[0]["next_fire_at"].is_string(), "{}", items[0]);
    let id = items[299]["id"].as_str().unwrap();
    let read = app.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(read.body["name"], "bulk-299");
    assert_eq!(stored(&app).await, 300);
}

#[tokio::test]
async fn post_batch_bad_items_are_each_named_and_nothing_is_stored() {
    let app = TestApp::new().await;
    let mut jobs = named("bad", 20);
    jobs[17]["schedule"] = json!({"cron": "0 61 * * * *"});
    jobs[3]["target"]["zone"] = json!("dc1");
    jobs[5] = json!("not a job");
    // Parses, but never fires: found by the service's check, listed with the others.
    jobs[9]["schedule"] = json!({"cron": "0 0 0 30 2 *"});
    jobs[12]["payload"] = json!({"big": "x".repeat(PAYLOAD_LIMIT)});
    // A name used twice is listed beside the invalid jobs.
    jobs[19]["name"] = json!("bad-0");
    let answer = app.json(Method::POST, BATCH, &batch(jobs)).await;
    answer
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("jobs[3].target.zone");
    assert_eq!(
        errors(&answer),
        vec![
            (3, "invalid_field".into(), "jobs[3].target.zone".into()),
            (5, "invalid_field".into(), "jobs[5]".into()),
            (9, "invalid_field".into(), "jobs[9].schedule.cron".into()),
            (12, "payload_too_large".into(), "jobs[12].payload".into()),
            (17, "invalid_field".into(), "jobs[17].schedule.cron".into()),
            (19, "duplicate_name".into(), "jobs[19].name".into()),
        ]
    );
    assert_eq!(answer.body["refused"], 6);
    let message = answer.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("nothing was stored"), "{message}");
    assert_eq!(stored(&app).await, 0);
}

#[tokio::test]
async fn post_batch_refusal_lists_at_most_100_items() {
    let app = TestApp::new().await;
    let mut jobs = named("many", 150);
    for job in &mut jobs {
        job["max_attempts"] = json!(0);
    }
    let answer = app.json(Method::POST, BATCH, &batch(jobs)).await;
    answer
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("jobs[0].max_attempts");
    assert_eq!(errors(&answer).len(), 100);
    assert_eq!(answer.body["refused"], 150);
    assert_eq!(stored(&app).await, 0);
}

#[tokio::test]
async fn post_batch_duplicate_names_are_conflicts_and_nothing_is_stored() {
    let app = TestApp::new().await;
    // Twice within the batch: the later one is refused.
    let mut jobs = named("dup", 5);
    jobs[4]["name"] = json!("dup-1");
    let answer = app.json(Method::POST, BATCH, &batch(jobs)).await;
    answer
        .assert_error(StatusCode::CONFLICT, "duplicate_name")
        .assert_field("jobs[4].name");
    assert_eq!(
        errors(&answer),
        vec![(4, "duplicate_name".into(), "jobs[4].name".into())]
    );
    assert_eq!(stored(&app).await, 0);
    // Against stored jobs: every taken one is named.
    app.create(&hourly("dup-2")).await;
    app.create(&hourly("dup-3")).await;
    let answer = app.json(Method::POST, BATCH, &batch(named("dup", 5))).await;
    answer
        .assert_error(StatusCode::CONFLICT, "duplicate_name")
        .assert_field("jobs[2].name");
    assert_eq!(
        errors(&answer),
        vec![
            (2, "duplicate_name".into(), "jobs[2].name".into()),
            (3, "duplicate_name".into(), "jobs[3].name".into()),
        ]
    );
    assert_eq!(stored(&app).await, 2);
}

#[tokio::test]
async fn post_batch_takes_1_to_10000_jobs() {
    let app = TestApp::new().await;
    app.json(Method::POST, BATCH, &batch(Vec::new()))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("jobs");
    // 10 001 small jobs fit the route's body limit and are refused by count.
    let tiny = json!({"name": "t", "schedule": {"every": "1h"}, "target": {"group": "g"}});
    let over = batch(vec![tiny; 10_001]);
    let answer = app.json(Method::POST, BATCH, &over).await;
    answer
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("jobs");
    let message = answer.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("10000"), "{message}");
    app.json(Method::POST, BATCH, &json!({"jobs": {}}))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("jobs");
    app.json(Method::POST, BATCH, &json!({"jobs": [], "atomic": false}))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("atomic");
    assert_eq!(stored(&app).await, 0);
}

#[tokio::test]
async fn post_batch_has_its_own_body_limit() {
    let app = TestApp::new().await;
    // Over every other route's limit (twice the payload limit plus 64 KiB), within 16 MiB.
    let jobs: Vec<Value> = (0..2_000)
        .map(|i| {
            let mut job = hourly(&format!("wide-{i}"));
            job["payload"] = json!({"text": "y".repeat(200)});
            job
        })
        .collect();
    let body = batch(jobs).to_string();
    assert!(body.len() > 2 * PAYLOAD_LIMIT + 64 * 1024);
    let answer = app.raw(Method::POST, BATCH, body.clone()).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    assert_eq!(answer.body["items"].as_array().map(Vec::len), Some(2_000));
    app.raw(Method::POST, "/v1/jobs", body)
        .await
        .assert_error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    let huge = format!("{{\"jobs\": [\"{}\"]}}", "z".repeat(17 << 20));
    app.raw(Method::POST, BATCH, huge)
        .await
        .assert_error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
}
