//! Pause on failure end to end: a job whose handler always fails permanently, with
//! `pause_after_failures: 3`, fires every second until its last three runs are dead;
//! then the scheduler pauses it, with `paused_reason` on the job, a `job.pause` audit
//! entry by the actor `scheduler` and `chime_jobs_auto_paused_total{app}` counted. It
//! fires no more while paused.

use std::time::Duration;

use chime_tests::{
    TestConsumer,
    api::{in_state, metric},
    wait,
};
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    per_store,
    support::{Setup, StoreKind, every_second},
};

async fn a_job_that_keeps_failing_pauses_itself(kind: StoreKind) {
    let s = Setup::new(kind).await;
    let api = &s.chimed.api;
    let mut body = every_second("always-fails", "pausing", json!({"fail": "permanent"}));
    body["max_attempts"] = json!(1);
    body["pause_after_failures"] = json!(3);
    let job = api.create_job(body).await;
    assert_eq!(job["pause_after_failures"], 3);
    let job_id = job["id"].as_str().unwrap().to_string();
    let _consumer = TestConsumer::start(&s.vhost.amqp_url(), "pausing", "c1", &[]).await;

    let paused: Value = wait::until(
        "the job to pause itself",
        Duration::from_secs(60),
        || async {
            let job = api.job(&job_id).await;
            (job["paused"] == true).then_some(job)
        },
    )
    .await;
    let reason = paused["paused_reason"].as_str().expect("a paused_reason");
    assert!(reason.contains("3 consecutive failed runs"), "{reason}");

    // Its newest three finished runs are dead, and none succeeded.
    let runs = api.runs(&job_id).await;
    assert!(in_state(&runs, "dead").len() >= 3, "{runs:?}");
    assert!(in_state(&runs, "succeeded").is_empty(), "{runs:?}");

    let (status, trail) = api
        .call(Method::GET, "/v1/audit?action=job.pause", None)
        .await;
    assert_eq!(status, 200, "{trail}");
    let items = trail["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "paused once: {trail}");
    assert_eq!(items[0]["actor"], "scheduler");
    assert_eq!(items[0]["target"], format!("job:{job_id}"));
    assert_eq!(
        metric(
            &api.metrics().await,
            "chime_jobs_auto_paused_total{app=\"e2e\"}"
        ),
        1.0
    );

    // Paused, it records no new fire (runs in flight may still finish).
    let settled = api.runs(&job_id).await.len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        api.runs(&job_id).await.len() <= settled + 1,
        "a paused job keeps firing"
    );
    assert_eq!(api.job(&job_id).await["paused"], true);
}

per_store!(a_job_that_keeps_failing_pauses_itself);
