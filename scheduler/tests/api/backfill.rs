//! `POST /v1/jobs/{id}/backfill`: a job's past fires recorded once however often the
//! range is backfilled, counted as recorded or already present; dry runs; the refusals
//! (each naming its field, recording nothing); overlap `forbid` on a busy job; the audit
//! entry.

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TestApp, hourly, id};

fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

async fn runs_of(app: &TestApp, job: &str) -> Vec<Value> {
    let answer = app.get(&format!("/v1/jobs/{job}/runs?limit=100")).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    answer.body["items"].as_array().unwrap().clone()
}

async fn backfill(app: &TestApp, job: &str, body: Value) -> crate::support::Answer {
    app.json(Method::POST, &format!("/v1/jobs/{job}/backfill"), &body)
        .await
}

#[tokio::test]
async fn a_range_is_recorded_once_and_a_repeat_or_overlap_counts_what_was_there() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("hourly")).await;
    let job = id(&job).to_string();
    let now = Utc::now();
    // The job's points are an hour apart from its creation: five in this range.
    let range = json!({
        "from": stamp(now - Duration::minutes(330)),
        "to": stamp(now - Duration::minutes(30)),
    });
    let first = backfill(&app, &job, range.clone()).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);
    assert_eq!(first.body["fires"], 5);
    assert_eq!(first.body["recorded"], 5);
    assert_eq!(first.body["present"], 0);
    assert_eq!(first.body["runs"], 5);
    assert_eq!(first.body["rate"], 10.0);
    assert_eq!(first.body["overlap"], "allow");
    assert!(first.body["last_due_at"].is_string());
    let runs = runs_of(&app, &job).await;
    assert_eq!(runs.len(), 5);
    assert!(runs.iter().all(|r| r["trigger"] == "backfill"), "{runs:?}");
    assert!(runs.iter().all(|r| r["state"] == "scheduled"));

    let again = backfill(&app, &job, range).await;
    assert_eq!(again.status, StatusCode::ACCEPTED, "{}", again.body);
    assert_eq!(
        (
            &again.body["fires"],
            &again.body["recorded"],
            &again.body["present"]
        ),
        (&json!(5), &json!(0), &json!(5))
    );
    assert_eq!(again.body["last_due_at"], Value::Null);
    assert_eq!(runs_of(&app, &job).await.len(), 5, "nothing recorded twice");

    // Overlapping the first range by three fires.
    let overlapping = json!({
        "from": stamp(now - Duration::minutes(450)),
        "to": stamp(now - Duration::minutes(150)),
        "rate": 2,
    });
    let mut dry_run = overlapping.clone();
    dry_run["dry_run"] = json!(true);
    let dry = backfill(&app, &job, dry_run).await;
    assert_eq!(dry.status, StatusCode::OK, "{}", dry.body);
    assert_eq!(dry.body["dry_run"], true);
    assert_eq!(dry.body["fires"], 5);
    assert_eq!(dry.body["recorded"], 0);
    assert_eq!(
        runs_of(&app, &job).await.len(),
        5,
        "a dry run records nothing"
    );
    let overlap = backfill(&app, &job, overlapping).await;
    assert_eq!(overlap.status, StatusCode::ACCEPTED, "{}", overlap.body);
    assert_eq!(overlap.body["fires"], 5);
    assert_eq!(overlap.body["recorded"], 2);
    assert_eq!(overlap.body["present"], 3);
    assert_eq!(overlap.body["rate"], 2.0);
    assert_eq!(runs_of(&app, &job).await.len(), 7);

    // Audited, with the counts.
    let trail = app.get("/v1/audit?action=job.backfill").await;
    let entries = trail.body["items"].as_array().unwrap();
    assert_eq!(entries.len(), 3, "{}", trail.body);
    let recorded: Vec<i64> = entries
        .iter()
        .map(|e| e["change"]["recorded"].as_i64().unwrap())
        .collect();
    assert_eq!(recorded, [2, 0, 5], "newest first");
}

#[tokio::test]
async fn refusals_name_their_field_and_record_nothing() {
    let app = TestApp::new().await;
    let mut spec = hourly("every-second");
    spec["schedule"] = json!({"every": "1s"});
    let job = app.create(&spec).await;
    let job = id(&job).to_string();
    let now = Utc::now();
    let past = |minutes: i64| stamp(now - Duration::minutes(minutes));
    for (body, field) in [
        (json!({"to": past(1)}), "from"),
        (json!({"from": past(2)}), "to"),
        (json!({"from": "last tuesday", "to": past(1)}), "from"),
        (json!({"from": past(1), "to": past(2)}), "to"),
        (
            json!({"from": past(1), "to": stamp(now + Duration::hours(1))}),
            "to",
        ),
        (json!({"from": past(2), "to": past(1), "rate": 0}), "rate"),
        (
            json!({"from": past(2), "to": past(1), "rate": 5000}),
            "rate",
        ),
        (
            json!({"from": past(2), "to": past(1), "rate": "fast"}),
            "rate",
        ),
        (
            json!({"from": past(2), "to": past(1), "overlap": "sometimes"}),
            "overlap",
        ),
        (json!({"from": past(2), "to": past(1), "extra": 1}), "extra"),
        // Three hours of a one-second schedule: over 10 000 fires.
        (json!({"from": past(190), "to": past(10)}), "to"),
    ] {
        let answer = backfill(&app, &job, body.clone()).await;
        answer.assert_error(StatusCode::BAD_REQUEST, "invalid_field");
        assert_eq!(answer.field(), Some(field), "{body}: {}", answer.body);
    }
    assert!(runs_of(&app, &job).await.is_empty());

    // Within the limit is fine.
    let fine = backfill(
        &app,
        &job,
        json!({"from": past(150), "to": past(10), "dry_run": true}),
    )
    .await;
    assert_eq!(fine.status, StatusCode::OK, "{}", fine.body);
    assert_eq!(fine.body["fires"], 8400);

    let missing = backfill(
        &app,
        "0190d0a0-0000-7000-8000-000000000000",
        json!({"from": past(2), "to": past(1)}),
    )
    .await;
    missing.assert_error(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn overlap_forbid_backfills_an_idle_job_only() {
    let app = TestApp::new().await;
    let job = app.create(&hourly("forbid")).await;
    let job = id(&job).to_string();
    let now = Utc::now();
    let range = |from: i64, to: i64| {
        json!({
            "from": stamp(now - Duration::minutes(from)),
            "to": stamp(now - Duration::minutes(to)),
            "overlap": "forbid",
        })
    };
    let idle = backfill(&app, &job, range(150, 30)).await;
    assert_eq!(idle.status, StatusCode::ACCEPTED, "{}", idle.body);
    assert_eq!(idle.body["recorded"], 2);
    assert_eq!(idle.body["overlap"], "forbid");
    // Its runs are not dispatched (no dispatcher runs here): the job is busy.
    let busy = backfill(&app, &job, range(400, 200)).await;
    busy.assert_error(StatusCode::CONFLICT, "job_busy");
    assert_eq!(busy.field(), Some("overlap"));
    assert_eq!(runs_of(&app, &job).await.len(), 2, "nothing recorded");
    let allowed = backfill(
        &app,
        &job,
        json!({
            "from": stamp(now - Duration::minutes(400)),
            "to": stamp(now - Duration::minutes(200)),
        }),
    )
    .await;
    assert_eq!(allowed.status, StatusCode::ACCEPTED, "{}", allowed.body);
    assert_eq!(allowed.body["recorded"], 3);
}
