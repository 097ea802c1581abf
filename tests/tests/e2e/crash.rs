//! A consumer dying mid-task does not lose the task.

use std::time::Duration;

use chime_tests::{TestConsumer, wait};
use chrono::Utc;
use serde_json::json;

use crate::support::{Setup, StoreKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_killed_mid_handler_is_replaced_and_the_run_succeeds() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let a = TestConsumer::start(&s.vhost.amqp_url(), "workers", "a", &[]).await;
    let at = (Utc::now() + chrono::Duration::seconds(1)).to_rfc3339();
    let job = s
        .chimed
        .api
        .create_job(json!({
            "name": "slow", "schedule": {"at": at}, "target": {"group": "workers"},
            "payload": {"sleep_ms": 5000},
        }))
        .await;
    let id = job["id"].as_str().unwrap().to_string();
    a.wait_for("a to start the task", Duration::from_secs(20), |events| {
        events.iter().any(|e| e["event"] == "started")
    })
    .await;

    let b = TestConsumer::start(&s.vhost.amqp_url(), "workers", "b", &[]).await;
    wait::until("b to consume", Duration::from_secs(20), || async {
        (s.vhost.queue_state("chime.group.workers").await.1 == 2).then_some(())
    })
    .await;
    a.kill().await;

    let run = wait::until(
        "the run to succeed on b",
        Duration::from_secs(30),
        || async {
            let runs = s.chimed.api.runs(&id).await;
            runs.into_iter().find(|r| r["state"] == "succeeded")
        },
    )
    .await;
    assert_eq!(run["consumer"], "b");
    assert_eq!(run["output"]["instance"], "b");
    let started_on_b = b.events_of("started");
    assert_eq!(started_on_b.len(), 1);
    assert_eq!(started_on_b[0]["task_id"], run["id"]);
    assert_eq!(
        s.chimed.api.runs(&id).await.len(),
        1,
        "still one run for the fire"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_panic_fails_the_run_and_the_consumer_lives_on() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let consumer = TestConsumer::start(&s.vhost.amqp_url(), "workers", "w1", &[]).await;
    let api = &s.chimed.api;
    let hourly = |name: &str, payload| json!({"name": name, "schedule": {"every": "1h"}, "target": {"group": "workers"}, "payload": payload});
    let panicky = api
        .create_job(hourly("panicky", json!({"panic": true})))
        .await;
    let run = api.trigger(panicky["id"].as_str().unwrap()).await;
    // A panic is a permanent failure: the run is given up at once, not retried.
    let failed = api
        .wait_run(run["id"].as_str().unwrap(), "the run to be given up", |r| {
            r["state"] == "dead"
        })
        .await;
    assert_eq!(
        failed["error"],
        "permanent failure: handler panicked: asked to panic"
    );
    assert_eq!(failed["attempt"], 1);

    let fine = api.create_job(hourly("fine", json!(null))).await;
    let run = api.trigger(fine["id"].as_str().unwrap()).await;
    api.wait_run(
        run["id"].as_str().unwrap(),
        "the next task to succeed on the same consumer",
        |r| r["state"] == "succeeded" && r["consumer"] == "w1",
    )
    .await;
    assert_eq!(consumer.events_of("started").len(), 2);
}

/// SIGTERM to a consumer: it stops taking tasks, lets the running handler finish and
/// report, and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_shutdown_drains_running_handlers() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let consumer = TestConsumer::start(&s.vhost.amqp_url(), "workers", "w1", &[]).await;
    let api = &s.chimed.api;
    let job = api
        .create_job(
            json!({"name": "slowish", "schedule": {"every": "1h"}, "target": {"group": "workers"},
            "payload": {"sleep_ms": 2000}}),
        )
        .await;
    let run = api.trigger(job["id"].as_str().unwrap()).await;
    consumer
        .wait_for("the handler to start", Duration::from_secs(20), |events| {
            events.iter().any(|e| e["event"] == "started")
        })
        .await;
    let status = consumer.stop().await;
    assert!(status.success(), "the consumer exits 0: {status:?}");
    let finished = api.run(run["id"].as_str().unwrap()).await;
    let finished = if finished["state"] == "succeeded" {
        finished
    } else {
        api.wait_run(
            run["id"].as_str().unwrap(),
            "the drained result to be recorded",
            |r| r["state"] == "succeeded",
        )
        .await
    };
    assert_eq!(finished["consumer"], "w1");
    let (ready, consumers) = s.vhost.queue_state("chime.group.workers").await;
    assert_eq!(
        (ready, consumers),
        (0, 0),
        "the task was acknowledged, not left behind"
    );
}
