//! Overlap `buffer_one` end to end: an every-second job whose handler takes 3 s runs
//! one fire at a time; the fire right after a running one is held (`scheduled`,
//! `waiting_for: previous`) and dispatched only once that run finished, and the fires
//! in between are skipped and counted as overlap skips.

use std::time::Duration;

use chime_tests::{
    TestConsumer,
    api::{in_state, metric},
    wait,
};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::{
    per_store,
    support::{Setup, StoreKind, every_second},
};

fn at(run: &Value, field: &str) -> DateTime<Utc> {
    run[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} of {run}"))
        .parse()
        .unwrap()
}

async fn a_buffer_one_job_runs_one_held_fire_after_the_slow_one(kind: StoreKind) {
    let s = Setup::new(kind).await;
    let api = &s.chimed.api;
    let _consumer = TestConsumer::start(&s.vhost.amqp_url(), "buffered", "c1", &[]).await;
    let mut body = every_second("slow", "buffered", json!({"sleep_ms": 3000}));
    body["overlap"] = json!("buffer_one");
    let job = api.create_job(body).await;
    assert_eq!(job["overlap"], "buffer_one");
    let job_id = job["id"].as_str().unwrap().to_string();

    let held: Value = wait::until("a held fire", Duration::from_secs(30), || async {
        api.runs(&job_id)
            .await
            .into_iter()
            .find(|run| run["waiting_for"] == "previous")
    })
    .await;
    assert_eq!(held["state"], "scheduled", "{held}");

    let runs: Vec<Value> =
        wait::until("three runs to succeed", Duration::from_secs(90), || async {
            let runs = api.runs(&job_id).await;
            (in_state(&runs, "succeeded").len() >= 3).then_some(runs)
        })
        .await;
    let mut done: Vec<Value> = in_state(&runs, "succeeded").into_iter().cloned().collect();
    done.sort_by_key(|run| at(run, "fire_time"));
    let (first, second, third) = (&done[0], &done[1], &done[2]);
    assert_eq!(
        at(second, "fire_time") - at(first, "fire_time"),
        chrono::Duration::seconds(1),
        "the fire right after the slow run was held, not skipped: {runs:?}"
    );
    assert!(
        at(second, "dispatched_at") >= at(first, "finished_at"),
        "the held fire went out only once the slow run finished: {first} {second}"
    );
    assert!(
        at(third, "fire_time") - at(second, "fire_time") >= chrono::Duration::seconds(2),
        "the fires while one was held were skipped: {runs:?}"
    );
    assert!(at(third, "dispatched_at") >= at(second, "finished_at"));
    let waiting = runs
        .iter()
        .filter(|run| run["waiting_for"] == "previous")
        .count();
    assert!(waiting <= 1, "one held fire at most: {runs:?}");
    let text = api.metrics().await;
    assert!(
        metric(&text, "chime_fires_skipped_total{reason=\"overlap\"}") >= 1.0,
        "skips counted"
    );
    assert!(metric(&text, "chime_held_fires_released_total") >= 2.0);
}

per_store!(a_buffer_one_job_runs_one_held_fire_after_the_slow_one);
