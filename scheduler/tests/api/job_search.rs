//! `GET /v1/jobs` searched: filters, orders and paging by cursor; every bad parameter is a
//! 400 naming it (a next-fire order among them), and a cursor of another order is
//! refused.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TestApp, hourly};

fn names(answer: &Value) -> Vec<String> {
    answer["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| {
            format!(
                "{}/{}",
                job["app"].as_str().unwrap(),
                job["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn get_jobs_filters_sorts_and_pages_by_name() {
    let app = TestApp::new().await;
    for (app_name, name, group, mode) in [
        ("shop", "close-orders", "orders", "group"),
        ("shop", "refresh-cache", "web", "broadcast"),
        ("mail", "send-digest", "mailers", "group"),
        ("mail", "Close-Mailbox", "mailers", "group"),
    ] {
        let mut spec = hourly(name);
        spec["app"] = json!(app_name);
        spec["target"] = json!({"group": group, "mode": mode});
        app.create(&spec).await;
    }
    let paused = app.get("/v1/jobs?q=refresh").await;
    let id = paused.body["items"][0]["id"].as_str().unwrap().to_string();
    let answer = app
        .call(Method::POST, &format!("/v1/jobs/{id}/pause"))
        .await;
    assert_eq!(answer.status, StatusCode::OK);

    // Case-insensitive search over app/name, by name descending, a page at a time.
    let first = app.get("/v1/jobs?q=CLOSE&sort=-name&limit=1").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    assert_eq!(names(&first.body), ["shop/close-orders"]);
    let next = first.body["next"].as_str().expect("a next cursor");
    let second = app
        .get(&format!(
            "/v1/jobs?q=CLOSE&sort=-name&limit=1&cursor={next}"
        ))
        .await;
    assert_eq!(names(&second.body), ["mail/Close-Mailbox"]);
    let cursor = second.body["next"]
        .as_str()
        .expect("a full page has a cursor");
    let last = app
        .get(&format!(
            "/v1/jobs?q=CLOSE&sort=-name&limit=1&cursor={cursor}"
        ))
        .await;
    assert_eq!(names(&last.body), Vec::<String>::new());
    assert_eq!(last.body["next"], Value::Null);
    // The cursor of one order is refused by another.
    app.get(&format!("/v1/jobs?sort=name&cursor={next}"))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("cursor");
    app.get(&format!("/v1/jobs?cursor={next}"))
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("cursor");

    let by = |query: &'static str| {
        let app = &app;
        async move {
            let answer = app.get(&format!("/v1/jobs?{query}")).await;
            assert_eq!(answer.status, StatusCode::OK, "{query}: {}", answer.body);
            names(&answer.body)
        }
    };
    assert_eq!(
        by("group=mailers&sort=name").await,
        ["mail/Close-Mailbox", "mail/send-digest"]
    );
    assert_eq!(by("mode=broadcast").await, ["shop/refresh-cache"]);
    assert_eq!(by("paused=true").await, ["shop/refresh-cache"]);
    assert_eq!(by("paused=false&app=shop").await, ["shop/close-orders"]);
    assert_eq!(by("q=p/c&sort=updated_at").await, ["shop/close-orders"]);
    // Every order still answers each job's next fire.
    let by_change = app.get("/v1/jobs?sort=-updated_at").await;
    assert_eq!(by_change.status, StatusCode::OK, "{}", by_change.body);
    let items = by_change.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 4);
    assert!(items.iter().all(|job| job["next_fire_at"].is_string()));
}

/// There is no next-fire order (an index on `next_fire_at` would be rewritten by every
/// fire): `sort=next_fire_at` either way is a 400 on `sort` listing the orders there are.
#[tokio::test]
async fn get_jobs_has_no_next_fire_order() {
    let app = TestApp::new().await;
    for sort in ["next_fire_at", "-next_fire_at"] {
        let answer = app.get(&format!("/v1/jobs?sort={sort}")).await;
        answer
            .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
            .assert_field("sort");
        let message = answer.body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("name, -name, updated_at, -updated_at"),
            "{message}"
        );
    }
}

#[tokio::test]
async fn get_jobs_refuses_each_bad_parameter_naming_it() {
    let app = TestApp::new().await;
    let long = "x".repeat(129);
    for (query, field) in [
        ("group=a%20b", "group"),
        ("group=", "group"),
        ("mode=fanout", "mode"),
        ("paused=yes", "paused"),
        ("paused=", "paused"),
        ("q=", "q"),
        (&*format!("q={long}"), "q"),
        ("q=a%00", "q"),
        ("sort=id", "sort"),
        ("sort=-created_at", "sort"),
        ("sort=name&cursor=nope", "cursor"),
        (
            "sort=name&cursor=00000000-0000-0000-0000-000000000001",
            "cursor",
        ),
        (
            "sort=-updated_at&cursor=updated_at.0.00000000-0000-0000-0000-000000000001",
            "cursor",
        ),
        ("app=a%20b", "app"),
        ("limit=0", "limit"),
    ] {
        app.get(&format!("/v1/jobs?{query}"))
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
            .assert_field(field);
    }
}
