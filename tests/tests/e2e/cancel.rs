//! Cancelling runs (`POST /v1/runs/{id}/cancel`, `chimectl run cancel`) with real
//! consumers: a run cancelled while its task waits in the queue never reaches a handler,
//! even on a consumer that starts after the cancel; a handler already running is told
//! within about a second; either way the run ends `cancelled` and stays so.

use std::time::{Duration, Instant};

use chime_tests::{TestConsumer, binaries, wait};
use reqwest::Method;
use serde_json::{Value, json};

use crate::per_store;
use crate::support::{Setup, StoreKind};

per_store!(
    a_run_cancelled_before_its_ack_never_runs,
    a_running_handler_is_told_and_the_run_ends_cancelled
);

async fn a_run_cancelled_before_its_ack_never_runs(kind: StoreKind) {
    let s = Setup::new(kind).await;
    let api = &s.chimed.api;
    let job = api
        .create_job(json!({
            "app": "e2e", "name": "withdrawn", "schedule": {"every": "1h"},
            "target": {"group": "withdrawn"},
        }))
        .await;
    let job_id = job["id"].as_str().expect("an id").to_string();
    // No consumer yet: the task waits in the queue.
    let run = api.trigger(&job_id).await;
    let run_id = run["id"].as_str().expect("an id").to_string();
    api.wait_run(&run_id, "the task to be published", |r| {
        r["state"] == "dispatched"
    })
    .await;
    assert_eq!(s.vhost.queue_state("chime.group.withdrawn").await, (1, 0));

    // Cancelled with chimectl.
    let server = api.clone();
    let id = run_id.clone();
    let output = tokio::task::spawn_blocking(move || {
        binaries::chimectl(&server)
            .args(["run", "cancel", &id])
            .output()
            .expect("run chimectl")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!("cancelled run {run_id} (was dispatched)")),
        "{stdout}"
    );
    assert!(!stdout.contains("could not be told"), "{stdout}");

    // A consumer that starts after the cancel takes the task and skips it; a later
    // task of the same queue runs, so the cancelled one was taken first.
    let consumer = TestConsumer::start(&s.vhost.amqp_url(), "withdrawn", "w1", &[]).await;
    let later = api.trigger(&job_id).await;
    let later_id = later["id"].as_str().expect("an id").to_string();
    api.wait_run(&later_id, "the later run to succeed", |r| {
        r["state"] == "succeeded"
    })
    .await;
    wait::until("the queue to be empty", Duration::from_secs(20), || async {
        let (messages, _) = s.vhost.queue_state("chime.group.withdrawn").await;
        (messages == 0).then_some(())
    })
    .await;
    let started: Vec<Value> = consumer
        .events_of("started")
        .into_iter()
        .filter(|e| e["task_id"] == run_id.as_str())
        .collect();
    assert_eq!(started, Vec::<Value>::new(), "the handler never ran");
    let run = api.run(&run_id).await;
    assert_eq!(run["state"], "cancelled", "{run}");
    assert_eq!(run["acked_at"], Value::Null, "{run}");
    assert_eq!(run["cancelled_by"], "bootstrap", "{run}");
    // Cancelling it again is refused.
    let (status, body) = api
        .call(Method::POST, &format!("/v1/runs/{run_id}/cancel"), None)
        .await;
    assert_eq!(status.as_u16(), 409, "{body}");
    assert_eq!(body["error"]["code"], "run_finished");
    consumer.stop().await;
}

async fn a_running_handler_is_told_and_the_run_ends_cancelled(kind: StoreKind) {
    let s = Setup::new(kind).await;
    let api = &s.chimed.api;
    let job = api
        .create_job(json!({
            "app": "e2e", "name": "long", "schedule": {"every": "1h"},
            "target": {"group": "busy"}, "payload": {"wait_for_cancel_ms": 60_000},
        }))
        .await;
    let job_id = job["id"].as_str().expect("an id").to_string();
    let run = api.trigger(&job_id).await;
    let run_id = run["id"].as_str().expect("an id").to_string();
    // chimed is connected (and has declared the cancel notices) once it published.
    api.wait_run(&run_id, "the task to be published", |r| {
        r["state"] == "dispatched"
    })
    .await;
    let consumer = TestConsumer::start(&s.vhost.amqp_url(), "busy", "w1", &[]).await;
    api.wait_run(&run_id, "the handler to run", |r| r["state"] == "acked")
        .await;
    consumer
        .wait_for("the handler to start", Duration::from_secs(20), |events| {
            events.iter().any(|e| e["event"] == "started")
        })
        .await;

    let asked = Instant::now();
    let asked_ms = chrono::Utc::now().timestamp_millis();
    let (status, answer) = api
        .call(Method::POST, &format!("/v1/runs/{run_id}/cancel"), None)
        .await;
    assert_eq!(status.as_u16(), 200, "{answer}");
    assert_eq!(
        (
            &answer["state"],
            &answer["cancelled_from"],
            &answer["notified"]
        ),
        (&json!("cancelled"), &json!("acked"), &json!(true)),
        "{answer}"
    );
    consumer
        .wait_for(
            "the handler to be told",
            Duration::from_secs(10),
            |events| events.iter().any(|e| e["event"] == "cancelled"),
        )
        .await;
    let told = &consumer.events_of("cancelled")[0];
    let after_ms = told["at_ms"].as_i64().unwrap() - asked_ms;
    // About a second is the goal; the bound leaves room for a loaded CI machine.
    assert!(
        after_ms < 3_000,
        "told {after_ms} ms after the cancel (waited {:?})",
        asked.elapsed()
    );
    assert_eq!(told["task_id"], run_id.as_str());

    // The handler's failure comes late: noted, and the run stays cancelled.
    let run = api
        .wait_run(&run_id, "the late result to be noted", |r| {
            r["history"]
                .as_array()
                .is_some_and(|h| h.iter().any(|e| e["event"] == "late_failure"))
        })
        .await;
    assert_eq!(run["state"], "cancelled", "{run}");
    assert_eq!(run["cancelled_by"], "bootstrap", "{run}");
    assert_eq!(run["deadline_at"], Value::Null, "{run}");
    assert_eq!(run["attempt"], 1, "never published again: {run}");
    consumer.stop().await;
}
