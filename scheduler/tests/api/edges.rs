//! What the router answers at its edges, whatever the route: no such route, a method the
//! route does not take, a path that is not UTF-8, and a failure of the store.

use axum::http::{Method, StatusCode};
use serde_json::json;
use sqlx::{Connection, SqliteConnection};

use crate::support::{TestApp, hourly, id};

#[tokio::test]
async fn unknown_route_is_404_json() {
    let app = TestApp::new().await;
    for path in ["/v1/nope", "/", "/v1/jobs/x/y/z"] {
        app.get(path)
            .await
            .assert_error(StatusCode::NOT_FOUND, "not_found");
    }
}

#[tokio::test]
async fn wrong_method_is_405_json() {
    let app = TestApp::new().await;
    for (method, path) in [
        (Method::PUT, "/v1/jobs"),
        (Method::DELETE, "/v1/jobs"),
        (Method::PUT, "/v1/jobs/x"),
        (Method::GET, "/v1/jobs/x/trigger"),
        (Method::POST, "/v1/runs/x"),
        (Method::DELETE, "/v1/dlq"),
        (Method::GET, "/v1/dlq/q/purge"),
        (Method::POST, "/healthz"),
    ] {
        app.call(method.clone(), path)
            .await
            .assert_error(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    }
}

#[tokio::test]
async fn path_not_utf8_is_400_naming_path() {
    let app = TestApp::new().await;
    app.get("/v1/jobs/%FF%FE")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("path");
}

#[tokio::test]
async fn get_job_with_a_corrupt_row_is_500_without_details() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("corrupt")).await;
    let mut db = SqliteConnection::connect(app.database.url())
        .await
        .expect("open the test database");
    sqlx::query(r#"UPDATE jobs SET settings = '{"secret": "garbage"}'"#)
        .execute(&mut db)
        .await
        .expect("corrupt the row");
    db.close().await.unwrap();
    let answer = app.get(&format!("/v1/jobs/{}", id(&job))).await;
    answer.assert_error(StatusCode::INTERNAL_SERVER_ERROR, "internal");
    assert!(
        !answer.body.to_string().contains("garbage"),
        "{}",
        answer.body
    );
    // The other routes keep answering.
    let health = app.get("/healthz").await;
    assert_eq!(health.body, json!({"status": "ok"}));
}
