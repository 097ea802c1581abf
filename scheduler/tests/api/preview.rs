//! Schedule previews: a stored job's next fires (in its time zone, paused or not) and a
//! schedule not yet saved, with their refusals.

use chrono::{DateTime, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TestApp, hourly, id};

fn instants(answer: &Value) -> Vec<DateTime<Utc>> {
    answer["fires"]
        .as_array()
        .expect("fires")
        .iter()
        .map(|f| {
            DateTime::parse_from_rfc3339(f["at"].as_str().unwrap())
                .unwrap()
                .with_timezone(&Utc)
        })
        .collect()
}

#[tokio::test]
async fn a_jobs_preview_starts_at_its_next_fire_in_its_time_zone() {
    let app = TestApp::new().await;
    let mut spec = hourly("paris");
    spec["schedule"] = json!({"cron": "0 15 9 * * *", "timezone": "Europe/Paris"});
    let job = app.create(&spec).await;
    let answer = app
        .get(&format!("/v1/jobs/{}/preview?count=3", id(&job)))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["timezone"], "Europe/Paris");
    assert_eq!(answer.body["paused"], false);
    assert_eq!(
        answer.body["description"], "every day at 09:15:00, Europe/Paris",
        "the schedule in words"
    );
    let at = instants(&answer.body);
    assert_eq!(at.len(), 3);
    assert_eq!(
        at[0].to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        job["next_fire_at"].as_str().unwrap(),
        "the first is the job's next fire"
    );
    assert!(
        at.windows(2)
            .all(|w| w[1] - w[0] >= chrono::Duration::hours(23))
    );
    for fire in answer.body["fires"].as_array().unwrap() {
        let local = fire["local"].as_str().unwrap();
        assert!(local.contains("T09:15:00.000+0"), "{local}");
    }

    // Ten by default; an interval job's points are its interval apart.
    let every = app.create(&hourly("hourly")).await;
    let answer = app.get(&format!("/v1/jobs/{}/preview", id(&every))).await;
    let at = instants(&answer.body);
    assert_eq!(at.len(), 10);
    assert!(
        at.windows(2)
            .all(|w| w[1] - w[0] == chrono::Duration::hours(1))
    );
    assert_eq!(answer.body["timezone"], "UTC");

    // Paused: still previewed, flagged.
    let paused = app
        .call(Method::POST, &format!("/v1/jobs/{}/pause", id(&every)))
        .await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.body);
    let answer = app
        .get(&format!("/v1/jobs/{}/preview?count=2", id(&every)))
        .await;
    assert_eq!(answer.body["paused"], true);
    assert_eq!(instants(&answer.body).len(), 2);
}

#[tokio::test]
async fn a_schedule_not_yet_saved_is_previewed_without_storing_anything() {
    let app = TestApp::new().await;
    let answer = app
        .json(
            Method::POST,
            "/v1/schedules/preview",
            &json!({"schedule": {"every": "15m"}, "count": 4}),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let at = instants(&answer.body);
    assert_eq!(at.len(), 4);
    assert_eq!(answer.body["description"], "every 15m");
    let now = Utc::now();
    assert!(at[0] > now && at[0] <= now + chrono::Duration::minutes(15));
    assert!(answer.body.get("paused").is_none());

    let once = app
        .json(
            Method::POST,
            "/v1/schedules/preview",
            &json!({"schedule": {"at": "2099-01-01T00:00:00Z"}}),
        )
        .await;
    assert_eq!(instants(&once.body).len(), 1, "a one-shot fires once");
    assert_eq!(once.body["description"], "once at 2099-01-01T00:00:00.000Z");

    let jobs = app.get("/v1/jobs").await;
    assert_eq!(jobs.body["items"], json!([]), "nothing was stored");
}

#[tokio::test]
async fn previews_refuse_bad_counts_schedules_and_ids_naming_the_field() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("h")).await;
    for count in ["0", "101", "ten"] {
        app.get(&format!("/v1/jobs/{}/preview?count={count}", id(&job)))
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_field");
    }
    app.get(&format!("/v1/jobs/{}/preview?count=0", id(&job)))
        .await
        .assert_field("count");
    app.get("/v1/jobs/01890000-0000-7000-8000-000000000000/preview")
        .await
        .assert_error(StatusCode::NOT_FOUND, "not_found");

    for (body, field) in [
        (json!({"schedule": {"cron": "not cron"}}), "schedule.cron"),
        (
            json!({"schedule": {"cron": "0 0 * * * *", "timezone": "Mars/Base"}}),
            "schedule.timezone",
        ),
        (
            json!({"schedule": {"cron": "0 0 0 30 2 *"}}),
            "schedule.cron",
        ),
        (json!({"schedule": {"every": "1h"}, "count": 500}), "count"),
    ] {
        app.json(Method::POST, "/v1/schedules/preview", &body)
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
            .assert_field(field);
    }
    app.json(
        Method::POST,
        "/v1/schedules/preview",
        &json!({"schedule": {"every": "1h"}, "extra": 1}),
    )
    .await
    .assert_error(StatusCode::BAD_REQUEST, "invalid_field");
}
