//! `GET /v1/consumers`: instances with their fields, live or stale, per-group counts and
//! the unattended flag, the `group` and `stale` filters, and what scoped readers see.

use axum::http::header;
use chime_consumer::protocol::{PROTOCOL_VERSION, PresenceMessage};
use chime_scheduler::store::test_support::StoreTestSupport;
use chrono::{Duration, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Answer, TestApp, hourly, id, request};

/// Instance `instance` of `group` heard from `age` ago.
async fn presence(app: &TestApp, instance: &str, group: &str, age: Duration) {
    app.store
        .record_presence(&PresenceMessage {
            v: PROTOCOL_VERSION,
            instance: instance.into(),
            group: group.into(),
            zone: Some("dc1".into()),
            broadcast: false,
            version: Some("chime-consumer/9.9.9".into()),
            at: Utc::now() - age,
        })
        .await
        .unwrap();
}

/// A job of `app_name` targeting `group`; with `queued`, one of its runs published and
/// waiting in the queue.
async fn job(app: &TestApp, app_name: &str, name: &str, group: &str, queued: bool) {
    let mut spec = hourly(name);
    spec["app"] = json!(app_name);
    spec["target"] = json!({"group": group});
    let job = app.create(&spec).await;
    if queued {
        let fired = app
            .call(Method::POST, &format!("/v1/jobs/{}/trigger", id(&job)))
            .await;
        assert_eq!(fired.status, StatusCode::ACCEPTED, "{}", fired.body);
        let run: Uuid = fired.body["id"].as_str().unwrap().parse().unwrap();
        app.store.mark_dispatched(&[run], Utc::now()).await.unwrap();
    }
}

/// The world the tests look at: app `a`'s jobs target `ga` (a live consumer, one stale)
/// and `gq` (work queued, no consumer); app `b`'s target `gb` (work queued, a live
/// consumer); `free` has a consumer and no job.
async fn world() -> TestApp {
    let app = TestApp::new().await;
    job(&app, "a", "x", "ga", false).await;
    job(&app, "a", "q", "gq", true).await;
    job(&app, "b", "y", "gb", true).await;
    presence(&app, "a1", "ga", Duration::seconds(1)).await;
    presence(&app, "old", "ga", Duration::hours(2)).await;
    presence(&app, "b1", "gb", Duration::seconds(2)).await;
    presence(&app, "f1", "free", Duration::zero()).await;
    app
}

fn instances(answer: &Answer) -> Vec<(String, bool)> {
    answer.body["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["instance"].as_str().unwrap().to_string(),
                i["live"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn groups(answer: &Answer) -> Vec<Value> {
    answer.body["groups"].as_array().unwrap().clone()
}

fn names(groups: &[Value]) -> Vec<&str> {
    groups
        .iter()
        .map(|g| g["group"].as_str().unwrap())
        .collect()
}

async fn token(app: &TestApp, name: &str, apps: Value) -> String {
    let created = app
        .json(
            Method::POST,
            "/v1/tokens",
            &json!({"name": name, "role": "reader", "apps": apps}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    created.body["token"].as_str().unwrap().to_string()
}

async fn get_as(app: &TestApp, token: &str, path: &str) -> Answer {
    app.send(
        request(Method::GET, path)
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(axum::body::Body::empty())
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn consumers_lists_live_instances_and_flags_groups_with_queued_work_and_none() {
    let app = world().await;
    let answer = app.get("/v1/consumers").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(
        instances(&answer),
        [
            ("f1".to_string(), true),
            ("a1".to_string(), true),
            ("b1".to_string(), true)
        ],
        "live ones only, by group then instance"
    );
    let a1 = &answer.body["instances"][1];
    assert_eq!(a1["group"], "ga");
    assert_eq!(a1["zone"], "dc1");
    assert_eq!(a1["broadcast"], false);
    assert_eq!(a1["version"], "chime-consumer/9.9.9");
    assert_eq!(a1["running"], 0);
    assert_eq!(a1["first_seen"], a1["last_seen"]);
    assert!(a1["last_seen"].as_str().unwrap().ends_with('Z'));

    let groups = groups(&answer);
    assert_eq!(names(&groups), ["free", "ga", "gb", "gq"]);
    let by = |name: &str| groups.iter().find(|g| g["group"] == name).unwrap().clone();
    assert_eq!(
        by("gq"),
        json!({"group": "gq", "live_consumers": 0, "queued": 1, "running": 0, "unattended": true})
    );
    assert_eq!(
        by("gb"),
        json!({"group": "gb", "live_consumers": 1, "queued": 1, "running": 0, "unattended": false})
    );
    assert_eq!(
        by("ga")["live_consumers"],
        1,
        "the stale instance is not live"
    );
    assert_eq!(by("ga")["unattended"], false, "nothing is queued");
}

#[tokio::test]
async fn consumers_filter_by_group_and_include_stale_instances_on_request() {
    let app = world().await;
    let answer = app.get("/v1/consumers?stale=include").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(
        instances(&answer),
        [
            ("f1".to_string(), true),
            ("a1".to_string(), true),
            ("old".to_string(), false),
            ("b1".to_string(), true)
        ]
    );
    assert_eq!(groups(&answer)[1]["live_consumers"], 1);

    let answer = app.get("/v1/consumers?group=ga&stale=include").await;
    assert_eq!(
        instances(&answer),
        [("a1".to_string(), true), ("old".to_string(), false)]
    );
    assert_eq!(names(&groups(&answer)), ["ga"]);

    let answer = app.get("/v1/consumers?group=nobody").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body, json!({"instances": [], "groups": []}));

    app.get("/v1/consumers?stale=yes")
        .await
        .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
        .assert_field("stale");
    for bad in ["a%00b", "-lead", "has.dot"] {
        app.get(&format!("/v1/consumers?group={bad}"))
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
            .assert_field("group");
    }
}

#[tokio::test]
async fn a_reader_scoped_to_apps_sees_the_groups_its_apps_jobs_target() {
    let app = world().await;
    // Both made before either is used: an unknown token re-reads the store at most
    // every 2 s.
    let reader_a = token(&app, "read-a", json!(["a"])).await;
    let reader_all = token(&app, "read-all", json!(["*"])).await;
    let answer = get_as(&app, &reader_a, "/v1/consumers?stale=include").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(
        instances(&answer),
        [("a1".to_string(), true), ("old".to_string(), false)]
    );
    assert_eq!(names(&groups(&answer)), ["ga", "gq"]);
    // Another app's group, asked for by name, shows nothing.
    let answer = get_as(&app, &reader_a, "/v1/consumers?group=gb").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body, json!({"instances": [], "groups": []}));

    let answer = get_as(&app, &reader_all, "/v1/consumers").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(names(&groups(&answer)), ["free", "ga", "gb", "gq"]);
    assert_eq!(instances(&answer).len(), 3);
}
