//! `POST /v1/runs/{id}/cancel`.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TestApp, hourly, id};

/// Triggers a fresh job named `name` and returns the run's id.
async fn triggered(app: &TestApp, name: &str) -> String {
    let job = app.create(&hourly(name)).await;
    let answer = app
        .call(Method::POST, &format!("/v1/jobs/{}/trigger", id(&job)))
        .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    answer.body["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn cancel_ends_the_run_cancelled_by_the_caller_and_tells_consumers() {
    let app = TestApp::with_broker().await;
    let run = triggered(&app, "cancel-me").await;
    let answer = app
        .call(Method::POST, &format!("/v1/runs/{run}/cancel"))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["id"], json!(run));
    assert_eq!(answer.body["state"], "cancelled");
    assert_eq!(answer.body["cancelled_from"], "scheduled");
    assert_eq!(answer.body["cancelled_by"], "bootstrap");
    assert_eq!(answer.body["notified"], true, "{}", answer.body);
    assert_eq!(answer.body["fire_state"], "cancelled");
    assert!(answer.body["finished_at"].is_string());
    assert_eq!(answer.body["deadline_at"], Value::Null);
    assert_eq!(
        answer.body["history"].as_array().unwrap().last().unwrap()["event"],
        "cancelled"
    );

    // What the run reads now.
    let read = app.get(&format!("/v1/runs/{run}")).await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.body["state"], "cancelled");
    assert_eq!(read.body["cancelled_by"], "bootstrap");
    assert_eq!(read.body["finished_at"], answer.body["finished_at"]);

    // Audited once, through the application layer.
    let audit = app.get("/v1/audit?action=run.cancel").await;
    assert_eq!(audit.status, StatusCode::OK, "{}", audit.body);
    let entries = audit.body["items"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{}", audit.body);
    assert_eq!(entries[0]["target"], format!("run:{run}"));
    assert_eq!(entries[0]["actor"], "bootstrap");
    assert_eq!(entries[0]["change"]["was"], "scheduled");

    // A finished run cannot be cancelled (again): 409, and nothing changes.
    let again = app
        .call(Method::POST, &format!("/v1/runs/{run}/cancel"))
        .await;
    again.assert_error(StatusCode::CONFLICT, "run_finished");
    let message = again.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("already finished (cancelled)"),
        "{message}"
    );
    let audit = app.get("/v1/audit?action=run.cancel").await;
    assert_eq!(audit.body["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn cancel_without_a_broker_still_cancels_and_says_consumers_were_not_told() {
    let app = TestApp::new().await;
    let run = triggered(&app, "no-broker").await;
    let answer = app
        .call(Method::POST, &format!("/v1/runs/{run}/cancel"))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["state"], "cancelled");
    assert_eq!(answer.body["notified"], false);
    let read = app.get(&format!("/v1/runs/{run}")).await;
    assert_eq!(read.body["state"], "cancelled");
}

#[tokio::test]
async fn cancel_an_unknown_run_is_404_and_changes_nothing() {
    let app = TestApp::new().await;
    for path in [
        format!("/v1/runs/{}/cancel", uuid::Uuid::now_v7()),
        "/v1/runs/not-a-uuid/cancel".to_string(),
    ] {
        app.call(Method::POST, &path)
            .await
            .assert_error(StatusCode::NOT_FOUND, "not_found");
    }
    let audit = app.get("/v1/audit?action=run.cancel").await;
    assert_eq!(audit.body["items"], json!([]));
    app.call(
        Method::GET,
        &format!("/v1/runs/{}/cancel", uuid::Uuid::now_v7()),
    )
    .await
    .assert_error(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
}
