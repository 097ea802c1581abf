//! Attempts are not used up while nobody can consume (issue 34 §4): with every consumer
//! of a group stopped for longer than `max_attempts` × `ack_timeout`, the runs wait as
//! `dispatched` with `waiting_for: consumer` on their first attempt, the group is named
//! in one WARN line and the `chime_group_without_consumer` gauge, nothing is published
//! again, and when a consumer comes back every handler runs once and its result lands.

use std::time::Duration;

use chime_tests::{TestConsumer, api::metric, wait};
use serde_json::{Value, json};

use crate::per_store;
use crate::support::{Setup, StoreKind};

per_store!(runs_wait_for_a_consumer_without_using_attempts);

async fn runs_wait_for_a_consumer_without_using_attempts(kind: StoreKind) {
    let s = Setup::with_env(kind, &[("CHIME_RECONCILE_INTERVAL", "200ms")]).await;
    let api = &s.chimed.api;
    let job = api
        .create_job(json!({
            "app": "e2e", "name": "lonely", "schedule": {"every": "1h"},
            "target": {"group": "lonely"}, "ack_timeout": "1s", "max_attempts": 2,
        }))
        .await;
    let job_id = job["id"].as_str().expect("an id").to_string();
    let queue = "chime.group.lonely";

    // A consumer runs one fire, then every consumer of the group stops.
    let consumer = TestConsumer::start(&s.vhost.amqp_url(), "lonely", "w1", &[]).await;
    let first = api.trigger(&job_id).await;
    let first_id = first["id"].as_str().expect("an id").to_string();
    api.wait_run(&first_id, "the first run to succeed", |r| {
        r["state"] == "succeeded"
    })
    .await;
    consumer.stop().await;
    wait::until(
        "the queue to lose its consumer",
        Duration::from_secs(20),
        || async {
            let (_, consumers) = s.vhost.queue_state(queue).await;
            (consumers == 0).then_some(())
        },
    )
    .await;

    let mut ids = Vec::new();
    for _ in 0..3 {
        let run = api.trigger(&job_id).await;
        ids.push(run["id"].as_str().expect("an id").to_string());
    }
    for id in &ids {
        let run = api
            .wait_run(id, "the run to wait for a consumer", |r| {
                r["waiting_for"] == "consumer"
            })
            .await;
        assert_eq!(
            (run["state"].as_str(), run["attempt"].as_u64()),
            (Some("dispatched"), Some(1)),
            "{run}"
        );
    }
    // Each run's ack deadline passes at least `max_attempts` times over.
    wait::until(
        "every run's ack deadline to pass twice more",
        Duration::from_secs(30),
        || async {
            let withheld = metric(
                &api.metrics().await,
                "chime_republishes_withheld_total{reason=\"no_consumer\"}",
            );
            (withheld >= 3.0 * 3.0).then_some(())
        },
    )
    .await;
    let metrics = api.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "chime_group_without_consumer{group=\"lonely\",queue=\"chime.group.lonely\"}"
        ),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "chime_republishes_total{reason=\"ack_timeout\"}"),
        0.0
    );
    for id in &ids {
        let run = api.run(id).await;
        assert_eq!(
            (
                run["state"].as_str(),
                run["attempt"].as_u64(),
                run["waiting_for"].as_str()
            ),
            (Some("dispatched"), Some(1), Some("consumer")),
            "{run}"
        );
        assert_eq!(run["history"], json!([]), "no attempt used: {run}");
    }
    // One copy of each task waits; none was published again.
    assert_eq!(s.vhost.queue_state(queue).await, (3, 0));
    let log = s.chimed.log();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("group has no consumer"))
        .collect();
    assert_eq!(warned.len(), 1, "one WARN line per transition: {warned:?}");
    assert!(
        warned[0].contains("WARN")
            && warned[0].contains("lonely")
            && warned[0].contains("e2e/lonely"),
        "{}",
        warned[0]
    );

    // The consumers come back: every handler runs once, on the first attempt.
    let back = TestConsumer::start(&s.vhost.amqp_url(), "lonely", "w2", &[]).await;
    for id in &ids {
        let run: Value = api
            .wait_run(id, "the run to succeed once a consumer is back", |r| {
                r["state"] == "succeeded"
            })
            .await;
        assert_eq!(
            (run["attempt"].as_u64(), run["consumer"].as_str()),
            (Some(1), Some("w2")),
            "{run}"
        );
        assert_eq!(run["waiting_for"], Value::Null, "{run}");
        let started = back
            .events_of("started")
            .iter()
            .filter(|e| e["task_id"] == id.as_str())
            .count();
        assert_eq!(started, 1, "the handler ran once");
    }
    wait::until("the gauge to clear", Duration::from_secs(20), || async {
        let metrics = api.metrics().await;
        (metric(
            &metrics,
            "chime_group_without_consumer{group=\"lonely\",queue=\"chime.group.lonely\"}",
        ) == 0.0)
            .then_some(())
    })
    .await;
    assert!(s.chimed.log().contains("group has a consumer again"));
    assert_eq!(
        metric(
            &api.metrics().await,
            "chime_dead_runs_total{reason=\"ack_timeout\"}"
        ),
        0.0
    );
}
