//! Pause on failure over HTTP: `pause_after_failures` is taken, bounded and shown; a job
//! whose last N finished runs died is paused by the scheduler
//! ([`chime_scheduler::app::Jobs::pause_failing`], the step `FailureWatch` runs), with
//! `paused_reason` on the job and a `job.pause` entry by the actor `scheduler`; a
//! resume clears the reason.

use axum::http::{Method, StatusCode};
use chime_scheduler::domain::{Run, RunState, RunTrigger};
use chrono::{Duration, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{TestApp, hourly, id};

fn pausing(name: &str, n: Value) -> Value {
    let mut job = hourly(name);
    job["pause_after_failures"] = n;
    job
}

#[tokio::test]
async fn pause_after_failures_is_taken_bounded_and_cleared_by_null() {
    let app = TestApp::new().await;
    let job = app.create(&pausing("bounded", json!(3))).await;
    assert_eq!(job["pause_after_failures"], 3);
    assert!(job.get("paused_reason").is_none(), "{job}");
    let plain = app.create(&hourly("plain")).await;
    assert!(plain.get("pause_after_failures").is_none(), "{plain}");

    for bad in [json!(0), json!(1001), json!(-1), json!("3")] {
        app.json(Method::POST, "/v1/jobs", &pausing("bad", bad))
            .await
            .assert_error(StatusCode::BAD_REQUEST, "invalid_field")
            .assert_field("pause_after_failures");
    }
    let path = format!("/v1/jobs/{}", id(&job));
    let cleared = app
        .json(Method::PATCH, &path, &json!({"pause_after_failures": null}))
        .await;
    assert_eq!(cleared.status, StatusCode::OK, "{}", cleared.body);
    assert!(cleared.body.get("pause_after_failures").is_none());
    let set = app
        .json(Method::PATCH, &path, &json!({"pause_after_failures": 7}))
        .await;
    assert_eq!(set.body["pause_after_failures"], 7);
}

#[tokio::test]
async fn a_job_whose_last_runs_died_is_paused_with_its_reason_and_audited() {
    let app = TestApp::new().await;
    let job = app.create(&pausing("failing", json!(2))).await;
    let job_id: Uuid = id(&job).parse().unwrap();
    let path = format!("/v1/jobs/{job_id}");
    let record = |state: RunState, minute: i64| {
        let now = Utc::now();
        let mut run = Run::new(
            job_id,
            now + Duration::minutes(minute),
            RunTrigger::Manual,
            json!(null),
            now,
        );
        run.state = state;
        run.finished_at = Some(now);
        run.due_at = None;
        run
    };

    // Runs count when recorded after the job's last change (times are in milliseconds).
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;

    // One dead run of two: nothing happens.
    app.store
        .insert_run(&record(RunState::Dead, 1))
        .await
        .unwrap();
    assert!(app.jobs.pause_failing(None).await.unwrap().is_empty());
    assert_eq!(app.get(&path).await.body["paused"], false);

    // Two in a row: paused, once however often the check runs.
    app.store
        .insert_run(&record(RunState::Dead, 2))
        .await
        .unwrap();
    let paused = app.jobs.pause_failing(None).await.unwrap();
    assert_eq!(paused.len(), 1);
    assert!(app.jobs.pause_failing(None).await.unwrap().is_empty());
    let shown = app.get(&path).await.body;
    assert_eq!(shown["paused"], true);
    let reason = shown["paused_reason"]
        .as_str()
        .expect("a reason")
        .to_string();
    assert!(reason.contains("2 consecutive failed runs"), "{reason}");

    let trail = app.get("/v1/audit?action=job.pause").await.body;
    let items = trail["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{trail}");
    assert_eq!(items[0]["actor"], "scheduler");
    assert_eq!(items[0]["target"], format!("job:{job_id}"));
    assert_eq!(items[0]["change"]["paused_reason"], reason.as_str());

    // Resuming clears the reason and the count: the old dead runs no longer trip it.
    let resumed = app.call(Method::POST, &format!("{path}/resume")).await;
    assert_eq!(resumed.status, StatusCode::OK, "{}", resumed.body);
    assert_eq!(resumed.body["paused"], false);
    assert!(
        resumed.body.get("paused_reason").is_none(),
        "{}",
        resumed.body
    );
    assert!(app.jobs.pause_failing(None).await.unwrap().is_empty());
    assert_eq!(app.get(&path).await.body["paused"], false);
}

/// The import format (`POST /v1/jobs/batch`, what `chimectl job import` sends) takes
/// the setting too, and refuses a bad one naming the item and field.
#[tokio::test]
async fn a_batch_import_takes_pause_after_failures() {
    let app = TestApp::new().await;
    let jobs = json!({"jobs": [pausing("imported", json!(4)), hourly("plain-import")]});
    let answer = app.json(Method::POST, "/v1/jobs/batch", &jobs).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    let items = answer.body["items"].as_array().unwrap();
    assert_eq!(items[0]["pause_after_failures"], 4);
    assert!(items[1].get("pause_after_failures").is_none());

    let bad = json!({"jobs": [pausing("bad-import", json!(0))]});
    let answer = app.json(Method::POST, "/v1/jobs/batch", &bad).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    assert_eq!(
        answer.body["errors"][0]["field"],
        "jobs[0].pause_after_failures"
    );
}
