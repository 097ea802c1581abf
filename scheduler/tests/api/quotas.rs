//! Per-app quotas over HTTP: a create, a batch or a change that would take an app over
//! `app_max_jobs` or `app_max_groups` is refused 403 `quota_exceeded`, naming the field,
//! and changes nothing; other apps are not affected.

use chime_scheduler::domain::quota::Quotas;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TestApp, id};

fn job(app: &str, name: &str, group: &str) -> Value {
    json!({"app": app, "name": name, "schedule": {"every": "1h"}, "target": {"group": group}})
}

async fn count(app: &TestApp, of: &str) -> usize {
    let listed = app.get(&format!("/v1/jobs?app={of}")).await;
    listed.body["items"].as_array().unwrap().len()
}

#[tokio::test]
async fn jobs_and_groups_over_the_quota_are_refused_naming_the_field() {
    let app = TestApp::with_quotas(Quotas {
        max_jobs: 3,
        max_groups: 2,
    })
    .await;
    app.create(&job("shop", "a", "g1")).await;
    let second = app.create(&job("shop", "b", "g2")).await;
    // A third group is one too many.
    let refused = app
        .json(Method::POST, "/v1/jobs", &job("shop", "c", "g3"))
        .await;
    refused
        .assert_error(StatusCode::FORBIDDEN, "quota_exceeded")
        .assert_field("target.group");
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("app_max_groups"), "{message}");
    // A job in a group it already targets is fine, up to the job quota.
    app.create(&job("shop", "c", "g1")).await;
    app.json(Method::POST, "/v1/jobs", &job("shop", "d", "g1"))
        .await
        .assert_error(StatusCode::FORBIDDEN, "quota_exceeded")
        .assert_field("app");
    assert_eq!(count(&app, "shop").await, 3);
    // Another app has its own quotas.
    app.create(&job("web", "a", "g9")).await;
    // A batch that would go over stores nothing.
    let batch = app
        .json(
            Method::POST,
            "/v1/jobs/batch",
            &json!({"jobs": [job("web", "b", "g9"), job("web", "c", "g9"), job("web", "d", "g9")]}),
        )
        .await;
    assert_eq!(batch.status, StatusCode::FORBIDDEN, "{}", batch.body);
    assert_eq!(batch.code(), "quota_exceeded");
    assert_eq!(count(&app, "web").await, 1);
    // Changing a job into a new group over the quota is refused; the job keeps its own.
    let moved = app
        .json(
            Method::PATCH,
            &format!("/v1/jobs/{}", id(&second)),
            &json!({"target": {"group": "g4"}}),
        )
        .await;
    moved.assert_error(StatusCode::FORBIDDEN, "quota_exceeded");
    let kept = app.get(&format!("/v1/jobs/{}", id(&second))).await;
    assert_eq!(kept.body["target"]["group"], "g2");
}
