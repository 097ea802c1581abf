//! `/v1/jobs/{id}/runs` and `/v1/runs/{id}`.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TestApp, hourly, id};

/// Triggers `job` and returns the first run's id.
async fn trigger(app: &TestApp, job: &Value) -> String {
    let answer = app
        .call(Method::POST, &format!("/v1/jobs/{}/trigger", id(job)))
        .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    answer.body["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn get_job_runs_newest_first_paged_by_cursor() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("runs")).await;
    let mut fired = Vec::new();
    for _ in 0..3 {
        fired.push(trigger(&app, &job).await);
        // Each trigger its own millisecond, so each is a fire of its own.
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let path = format!("/v1/jobs/{}/runs", id(&job));
    let first = app.get(&format!("{path}?limit=2")).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let ids = |answer: &Value| -> Vec<String> {
        answer["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|run| run["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&first.body), vec![fired[2].clone(), fired[1].clone()]);
    // Run lists carry no fire view.
    assert!(
        first.body["items"][0]
            .get("items")
            .is_none_or(Value::is_null)
    );
    let next = first.body["next"].as_str().expect("a next cursor");
    let second = app.get(&format!("{path}?limit=2&cursor={next}")).await;
    assert_eq!(ids(&second.body), vec![fired[0].clone()]);
    assert_eq!(second.body["next"], Value::Null);
}

#[tokio::test]
async fn get_job_runs_unknown_job_is_404_and_bad_query_400() {
    let app = TestApp::new().await;
    app.get(&format!("/v1/jobs/{}/runs", uuid::Uuid::now_v7()))
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    app.get("/v1/jobs/not-a-uuid/runs")
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");
    let job = app.create(&hourly("runs-query")).await;
    let path = format!("/v1/jobs/{}/runs", id(&job));
    app.get(&format!("{path}?cursor=garbage"))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("cursor");
    app.get(&format!("{path}?limit=1001"))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("limit");
}

#[tokio::test]
async fn get_run_answers_the_run_with_its_fire() {
    let app = TestApp::new().await;
    let mut job = hourly("run-get");
    job["target"] = json!({"group": "g-run-get", "mode": "sharded", "shards": 2});
    let job = app.create(&job).await;
    let answer = app
        .call(Method::POST, &format!("/v1/jobs/{}/trigger", id(&job)))
        .await;
    let second = answer.body["items"][1]["id"].as_str().unwrap().to_string();
    let run = app.get(&format!("/v1/runs/{second}")).await;
    assert_eq!(run.status, StatusCode::OK, "{}", run.body);
    assert_eq!(run.body["id"], second.as_str());
    assert_eq!(run.body["shard"], 1);
    assert_eq!(run.body["shard_total"], 2);
    assert_eq!(run.body["items"], answer.body["items"]);
    assert_eq!(run.body["fire_state"], "running");
}

#[tokio::test]
async fn get_run_unknown_or_malformed_id_is_404() {
    let app = TestApp::new().await;
    let missing = uuid::Uuid::now_v7();
    let answer = app.get(&format!("/v1/runs/{missing}")).await;
    answer.assert_error(StatusCode::NOT_FOUND, "not_found");
    assert_eq!(
        answer.body["error"]["message"],
        format!("no run with id \"{missing}\"")
    );
    let answer = app.get("/v1/runs/nope").await;
    answer.assert_error(StatusCode::NOT_FOUND, "not_found");
    assert_eq!(answer.body["error"]["message"], "no run with id \"nope\"");
}
