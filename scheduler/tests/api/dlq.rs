//! `/v1/dlq` and `/v1/dlq/{queue}/messages|replay|purge`, on the real RabbitMQ (and one
//! case without it).

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TestApp, hourly};

/// An app with a job of group `group` (so its dead-letter queue is Chime's) and one
/// message in that queue; returns the queue's name.
async fn one_dead_letter(app: &TestApp, group: &str) -> String {
    let mut job = hourly(group);
    job["target"] = json!({"group": group});
    app.create(&job).await;
    let queue = format!("chime.group.{group}.dlq");
    app.publish_to_queue(&queue, b"not a task").await;
    queue
}

fn summary<'a>(list: &'a Value, queue: &str) -> Option<&'a Value> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["queue"] == queue)
}

#[tokio::test]
async fn get_dlq_lists_chimes_dead_letter_queues_with_depth() {
    let app = TestApp::with_broker().await;
    let queue = one_dead_letter(&app, "dlq-list").await;
    let answer = app.get("/v1/dlq").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let item = summary(&answer.body, &queue).expect("the group's dead-letter queue");
    assert_eq!(item["depth"], 1);
    assert_eq!(
        item["reasons"]
            .as_object()
            .unwrap()
            .values()
            .filter_map(Value::as_i64)
            .sum::<i64>(),
        1
    );
    assert!(
        summary(&answer.body, "chime.replies.dlq").is_some(),
        "{}",
        answer.body
    );
}

#[tokio::test]
async fn get_dlq_without_a_broker_is_503() {
    let app = TestApp::new().await;
    app.get("/v1/dlq")
        .await
        .assert_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
}

#[tokio::test]
async fn get_dlq_messages_peeks_and_leaves_them() {
    let app = TestApp::with_broker().await;
    let queue = one_dead_letter(&app, "dlq-peek").await;
    let path = format!("/v1/dlq/{queue}/messages?limit=5");
    for _ in 0..2 {
        let answer = app.get(&path).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let items = answer.body["items"].as_array().unwrap();
        assert_eq!(items.len(), 1, "{}", answer.body);
        assert_eq!(items[0]["kind"], "unreadable");
        assert_eq!(items[0]["resolved"], false);
    }
}

#[tokio::test]
async fn get_dlq_messages_bad_limit_is_400_naming_limit() {
    let app = TestApp::with_broker().await;
    let queue = one_dead_letter(&app, "dlq-limit").await;
    for limit in ["0", "1001", "many"] {
        app.get(&format!("/v1/dlq/{queue}/messages?limit={limit}"))
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
            .assert_field("limit");
    }
}

#[tokio::test]
async fn dlq_routes_refuse_a_queue_chime_did_not_declare_with_400() {
    let app = TestApp::with_broker().await;
    let too_long = format!("chime.group.{}.dlq", "g".repeat(300));
    for queue in ["orders", "chime.group.nobody.dlq", &too_long] {
        app.get(&format!("/v1/dlq/{queue}/messages"))
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
            .assert_field("queue");
        app.call(Method::POST, &format!("/v1/dlq/{queue}/replay"))
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
            .assert_field("queue");
        app.call(Method::POST, &format!("/v1/dlq/{queue}/purge"))
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
            .assert_field("queue");
    }
}

#[tokio::test]
async fn dlq_route_with_a_non_utf8_queue_is_400_naming_path() {
    let app = TestApp::new().await;
    app.call(Method::POST, "/v1/dlq/chime.%C3.dlq/purge")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("path");
}

#[tokio::test]
async fn dlq_routes_on_a_missing_dead_letter_queue_are_404() {
    let app = TestApp::with_broker().await;
    let queue = one_dead_letter(&app, "dlq-gone").await;
    app.delete_queue(&queue).await;
    app.get(&format!("/v1/dlq/{queue}/messages"))
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    app.call(Method::POST, &format!("/v1/dlq/{queue}/purge"))
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn post_dlq_replay_reports_what_it_did() {
    let app = TestApp::with_broker().await;
    let queue = one_dead_letter(&app, "dlq-replay").await;
    let path = format!("/v1/dlq/{queue}/replay");
    let answer = app.call(Method::POST, &path).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["replayed"], 0);
    assert_eq!(answer.body["remaining"], 1);
    let skipped = answer.body["skipped"].as_object().unwrap();
    assert_eq!(
        skipped.values().filter_map(Value::as_i64).sum::<i64>(),
        1,
        "{}",
        answer.body
    );
    let answer = app
        .json(
            Method::POST,
            &path,
            &json!({"job": "api-test/dlq-replay", "limit": 10}),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
}

#[tokio::test]
async fn post_dlq_replay_bad_body_is_400_naming_the_field() {
    let app = TestApp::with_broker().await;
    let queue = one_dead_letter(&app, "dlq-replay-bad").await;
    let path = format!("/v1/dlq/{queue}/replay");
    app.json(Method::POST, &path, &json!({"jobs": "x"}))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("jobs");
    app.json(Method::POST, &path, &json!({"limit": 0}))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("limit");
    app.raw(Method::POST, &path, "{")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_json");
}

#[tokio::test]
async fn post_dlq_purge_empties_the_queue() {
    let app = TestApp::with_broker().await;
    let queue = one_dead_letter(&app, "dlq-purge").await;
    let answer = app
        .call(Method::POST, &format!("/v1/dlq/{queue}/purge"))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body, json!({"queue": queue, "purged": 1}));
    let list = app.get("/v1/dlq").await;
    assert_eq!(summary(&list.body, &queue).unwrap()["depth"], 0);
}
