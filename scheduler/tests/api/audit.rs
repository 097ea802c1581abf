//! The audit trail over HTTP: every change through the API is recorded with its actor,
//! action, target and the change; `GET /v1/audit` filters and pages it; a job's versions;
//! a scoped token sees only its apps' entries.

use axum::{body::Body, http::header};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TestApp, hourly, id, request};

fn actions(answer: &Value) -> Vec<String> {
    answer["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn changes_are_recorded_with_actor_target_and_change() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("audited")).await;
    let job_id = id(&job).to_string();
    let path = format!("/v1/jobs/{job_id}");
    app.json(Method::PATCH, &path, &json!({"payload": {"n": 2}}))
        .await;
    app.call(Method::POST, &format!("{path}/pause")).await;
    app.call(Method::POST, &format!("{path}/resume")).await;
    app.call(Method::POST, &format!("{path}/trigger")).await;
    let token = app
        .json(
            Method::POST,
            "/v1/tokens",
            &json!({"name": "reader", "role": "reader", "apps": ["elsewhere"]}),
        )
        .await;
    let secret = token.body["token"].as_str().unwrap().to_string();

    let trail = app.get("/v1/audit").await;
    assert_eq!(trail.status, StatusCode::OK, "{}", trail.body);
    assert_eq!(
        actions(&trail.body),
        [
            "token.create",
            "job.trigger",
            "job.resume",
            "job.pause",
            "job.update",
            "job.create"
        ]
    );
    let update = &trail.body["items"][4];
    assert_eq!(update["actor"], "bootstrap");
    assert_eq!(update["target"], format!("job:{job_id}"));
    assert_eq!(update["app"], "api-test");
    assert_eq!(update["change"]["settings"]["payload"], json!({"n": 2}));
    assert_eq!(update["change"]["version"], 2);
    // The token entry never holds the secret.
    assert!(!trail.body.to_string().contains(&secret));

    // Filters and pages.
    let paused = app.get("/v1/audit?action=job.pause").await;
    assert_eq!(actions(&paused.body), ["job.pause"]);
    let first = app.get("/v1/audit?limit=4").await;
    let next = first.body["next"].as_str().unwrap();
    let second = app.get(&format!("/v1/audit?limit=4&cursor={next}")).await;
    assert_eq!(actions(&second.body), ["job.update", "job.create"]);
    app.get("/v1/audit?since=yesterday")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("since");

    // The job's versions: its definitions, newest first, also after it is deleted.
    app.call(Method::DELETE, &path).await;
    let versions = app.get(&format!("{path}/versions")).await;
    assert_eq!(
        actions(&versions.body),
        ["job.resume", "job.pause", "job.update", "job.create"]
    );
    assert_eq!(versions.body["items"][3]["change"]["version"], 1);

    // A reader of another app sees none of this app's entries, nor the token's.
    let scoped = app
        .send(
            request(Method::GET, "/v1/audit")
                .header(header::AUTHORIZATION, format!("Bearer {secret}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(scoped.status, StatusCode::OK);
    assert_eq!(scoped.body["items"], json!([]));
}
