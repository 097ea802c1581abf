//! A job's fire window (`start_at`, `end_at`) and `jitter` through the API: stored and
//! returned, refused with the field named, a job past its end shown as finished, a PATCH
//! of the window recomputing the next fire, and previews honouring both.

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TestApp, hourly, id};

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn instant(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().unwrap_or_else(|| panic!("not an instant: {v}")))
        .unwrap()
        .with_timezone(&Utc)
}

#[tokio::test]
async fn window_and_jitter_are_stored_and_the_first_fire_waits_for_the_start() {
    let app = TestApp::new().await;
    let start = Utc::now() + Duration::days(2);
    let start = DateTime::from_timestamp(start.timestamp(), 0).unwrap();
    let end = start + Duration::days(1);
    let mut spec = hourly("windowed");
    spec["start_at"] = json!(ts(start));
    spec["end_at"] = json!(ts(end));
    spec["jitter"] = json!("30s");
    let job = app.create(&spec).await;
    assert_eq!(job["start_at"], ts(start));
    assert_eq!(job["end_at"], ts(end));
    assert_eq!(job["jitter"], "30s");
    assert_eq!(job["finished"], false);
    assert_eq!(instant(&job["next_fire_at"]), start, "waits for the start");
    let read = app.get(&format!("/v1/jobs/{}", id(&job))).await;
    assert_eq!(read.body["jitter"], "30s");

    // The preview stops at the end and shows each fire's jittered publish time.
    let preview = app
        .get(&format!("/v1/jobs/{}/preview?count=100", id(&job)))
        .await;
    assert_eq!(preview.status, StatusCode::OK, "{}", preview.body);
    let fires = preview.body["fires"].as_array().unwrap();
    assert_eq!(fires.len(), 25, "hourly from start to end, both included");
    assert_eq!(instant(&fires[0]["at"]), start);
    assert_eq!(instant(&fires[24]["at"]), end);
    for fire in fires {
        let (at, due) = (instant(&fire["at"]), instant(&fire["due"]));
        assert!(due >= at && due - at <= Duration::seconds(30), "{fire}");
    }
    let again = app
        .get(&format!("/v1/jobs/{}/preview?count=100", id(&job)))
        .await;
    assert_eq!(again.body["fires"], preview.body["fires"], "deterministic");
}

#[tokio::test]
async fn bad_window_values_are_refused_naming_the_field_and_change_nothing() {
    let app = TestApp::new().await;
    let cases = [
        (json!({"start_at": "soon"}), "start_at"),
        (json!({"end_at": 5}), "end_at"),
        (
            json!({"start_at": "2026-12-02T00:00:00Z", "end_at": "2026-12-01T00:00:00Z"}),
            "end_at",
        ),
        (
            json!({"start_at": "2026-12-01T00:00:00Z", "end_at": "2026-12-01T00:00:00Z"}),
            "end_at",
        ),
        (json!({"jitter": "2h"}), "jitter"),
        (json!({"jitter": "a bit"}), "jitter"),
        (json!({"end_at": "10000-01-01T00:00:00Z"}), "end_at"),
    ];
    for (extra, field) in cases {
        let mut spec = hourly("bad-window");
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        app.json(Method::POST, "/v1/jobs", &spec)
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
            .assert_field(field);
    }
    let listed = app.get("/v1/jobs").await;
    assert_eq!(listed.body["items"], json!([]), "nothing was created");

    // The same refusals on PATCH leave the job as it was.
    let job = app.create(&hourly("kept")).await;
    let path = format!("/v1/jobs/{}", id(&job));
    app.json(
        Method::PATCH,
        &path,
        &json!({"start_at": "2026-12-02T00:00:00Z", "end_at": "2026-12-01T00:00:00Z"}),
    )
    .await
    .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
    .assert_field("end_at");
    let read = app.get(&path).await;
    assert_eq!(read.body["version"], 1);
    assert!(read.body.get("end_at").is_none(), "{}", read.body);
}

#[tokio::test]
async fn a_job_past_its_end_is_finished_and_moving_the_window_reschedules_it() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("ends")).await;
    let path = format!("/v1/jobs/{}", id(&job));
    assert_eq!(job["finished"], false);

    // An end already past: no next fire, finished.
    let past = ts(Utc::now() - Duration::minutes(1));
    let ended = app
        .json(Method::PATCH, &path, &json!({"end_at": past}))
        .await;
    assert_eq!(ended.status, StatusCode::OK, "{}", ended.body);
    assert_eq!(ended.body["next_fire_at"], Value::Null);
    assert_eq!(ended.body["finished"], true);
    let preview = app.get(&format!("{path}/preview")).await;
    assert_eq!(preview.body["fires"], json!([]));

    // Clearing the end (null) and starting later: the next fire is recomputed.
    let start = Utc::now() + Duration::days(3);
    let start = DateTime::from_timestamp(start.timestamp(), 0).unwrap();
    let reopened = app
        .json(
            Method::PATCH,
            &path,
            &json!({"end_at": null, "start_at": ts(start)}),
        )
        .await;
    assert_eq!(reopened.status, StatusCode::OK, "{}", reopened.body);
    assert_eq!(reopened.body["finished"], false);
    assert_eq!(instant(&reopened.body["next_fire_at"]), start);
    assert!(reopened.body.get("end_at").is_none(), "{}", reopened.body);

    // The list shows the flag too.
    let listed = app.get("/v1/jobs").await;
    assert_eq!(listed.body["items"][0]["finished"], false);
}

#[tokio::test]
async fn an_unsaved_schedule_preview_honours_the_window_and_checks_the_jitter() {
    let app = TestApp::new().await;
    let start = Utc::now() + Duration::days(1);
    let start = DateTime::from_timestamp(start.timestamp(), 0).unwrap();
    let answer = app
        .json(
            Method::POST,
            "/v1/schedules/preview",
            &json!({"schedule": {"every": "1m"}, "start_at": ts(start),
                    "end_at": ts(start + Duration::minutes(2)), "jitter": "10s"}),
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let at: Vec<_> = answer.body["fires"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| instant(&f["at"]))
        .collect();
    assert_eq!(
        at,
        [0, 1, 2].map(|m| start + Duration::minutes(m)),
        "from the start to the end"
    );
    assert!(
        answer.body["fires"][0].get("due").is_none(),
        "no job id to jitter by"
    );
    app.json(
        Method::POST,
        "/v1/schedules/preview",
        &json!({"schedule": {"every": "1m"}, "jitter": "3h"}),
    )
    .await
    .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
    .assert_field("jitter");
}

#[tokio::test]
async fn imported_jobs_carry_their_window_and_a_bad_one_is_named_by_its_path() {
    let app = TestApp::new().await;
    let mut windowed = hourly("imported");
    windowed["end_at"] = json!(ts(Utc::now() - Duration::hours(1)));
    windowed["jitter"] = json!("1m");
    let answer = app
        .json(
            Method::POST,
            "/v1/jobs/batch",
            &json!({"jobs": [windowed, hourly("plain")]}),
        )
        .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    let items = answer.body["items"].as_array().unwrap();
    assert_eq!(items[0]["jitter"], "1m");
    assert_eq!(items[0]["finished"], true, "imported past its end");
    assert_eq!(items[1]["finished"], false);

    let mut bad = hourly("bad-jitter");
    bad["jitter"] = json!("90m");
    let refused = app
        .json(
            Method::POST,
            "/v1/jobs/batch",
            &json!({"jobs": [hourly("fine"), bad]}),
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    assert_eq!(refused.body["errors"][0]["index"], 1, "{}", refused.body);
    assert_eq!(
        refused.body["errors"][0]["field"], "jobs[1].jitter",
        "{}",
        refused.body
    );
}
