//! `GET /v1/runs`: runs searched across jobs, newest first, filtered and paged; every bad
//! parameter is a 400 naming it.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TestApp, hourly, id};

fn ids(answer: &Value) -> Vec<String> {
    answer["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["id"].as_str().unwrap().to_string())
        .collect()
}

/// Creates job `name` of `app` and fires it `times` times; returns the job id and the
/// runs' ids, oldest first.
async fn fired_job(
    app: &TestApp,
    name: &str,
    app_name: &str,
    times: usize,
) -> (String, Vec<String>) {
    let mut spec = hourly(name);
    spec["app"] = json!(app_name);
    let job = id(&app.create(&spec).await).to_string();
    let mut runs = Vec::new();
    for _ in 0..times {
        let answer = app
            .call(Method::POST, &format!("/v1/jobs/{job}/trigger"))
            .await;
        assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
        runs.push(answer.body["id"].as_str().unwrap().to_string());
        // Each trigger its own millisecond, so each is a fire of its own, in this order.
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    (job, runs)
}

#[tokio::test]
async fn get_runs_searches_across_jobs_newest_first_by_filter_and_page() {
    let app = TestApp::new().await;
    let (shop, shop_runs) = fired_job(&app, "close", "shop", 2).await;
    let (_, mail_runs) = fired_job(&app, "send", "mail", 2).await;
    // Newest first across both jobs.
    let mut newest: Vec<String> = shop_runs.iter().chain(&mail_runs).cloned().collect();
    newest.reverse();

    let all = app.get("/v1/runs").await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.body);
    assert_eq!(ids(&all.body), newest);
    assert_eq!(all.body["next"], Value::Null);
    assert!(
        all.body["items"][0].get("items").is_none_or(Value::is_null),
        "run lists carry no fire view"
    );

    // Pages of three join up through the cursor.
    let first = app.get("/v1/runs?limit=3").await;
    assert_eq!(ids(&first.body), newest[..3]);
    let next = first.body["next"].as_str().expect("a next cursor");
    let second = app.get(&format!("/v1/runs?limit=3&cursor={next}")).await;
    assert_eq!(ids(&second.body), newest[3..]);
    assert_eq!(second.body["next"], Value::Null);

    let shop_newest: Vec<String> = shop_runs.iter().rev().cloned().collect();
    for path in [
        "/v1/runs?app=shop".to_string(),
        format!("/v1/runs?job={shop}"),
        "/v1/runs?group=g-close".to_string(),
        "/v1/runs?app=shop&state=scheduled,dispatched&mode=group".to_string(),
    ] {
        let answer = app.get(&path).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.body);
        assert_eq!(ids(&answer.body), shop_newest, "{path}");
    }
    for path in [
        "/v1/runs?state=dead",
        "/v1/runs?mode=broadcast",
        "/v1/runs?app=nobody",
        "/v1/runs?finished_after=2000-01-01T00:00:00Z",
    ] {
        let answer = app.get(path).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.body);
        assert!(ids(&answer.body).is_empty(), "{path}: {}", answer.body);
    }
    let unknown_job = app
        .get(&format!("/v1/runs?job={}", uuid::Uuid::now_v7()))
        .await;
    assert_eq!(unknown_job.status, StatusCode::OK);
    assert!(ids(&unknown_job.body).is_empty());

    // Fire-time range: at or after the second run's fire time, before the fourth's.
    let at = |i: usize| {
        all.body["items"][i]["fire_time"]
            .as_str()
            .unwrap()
            .replace('+', "%2B")
    };
    let range = app
        .get(&format!(
            "/v1/runs?fired_after={}&fired_before={}",
            at(2),
            at(0)
        ))
        .await;
    assert_eq!(range.status, StatusCode::OK, "{}", range.body);
    assert_eq!(ids(&range.body), newest[1..3]);
}

#[tokio::test]
async fn get_runs_refuses_each_bad_parameter_naming_it() {
    let app = TestApp::new().await;
    for (query, field) in [
        ("state=done", "state"),
        ("state=failed,", "state"),
        ("app=no%20spaces", "app"),
        ("job=not-a-uuid", "job"),
        ("group=", "group"),
        ("mode=fanout", "mode"),
        ("fired_after=yesterday", "fired_after"),
        ("fired_before=2026-13-01T00:00:00Z", "fired_before"),
        ("finished_after=1", "finished_after"),
        ("finished_before=now", "finished_before"),
        (
            "fired_after=2026-11-27T10:00:00Z&fired_before=2026-11-27T09:00:00Z",
            "fired_before",
        ),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("cursor=nope", "cursor"),
    ] {
        app.get(&format!("/v1/runs?{query}"))
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
            .assert_field(field);
    }
    // A parameter the route does not take, and a number that is not one.
    for query in ["states=failed", "limit=ten", "state=failed&state=dead"] {
        app.get(&format!("/v1/runs?{query}"))
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_field");
    }
}
