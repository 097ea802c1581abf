//! Backfill: a job's past fires reach the handler once each, however often the range is
//! backfilled, with the fires' own run ids, spread out at the requested rate.

use std::{collections::HashMap, time::Duration};

use chime_tests::{TestConsumer, api::in_state, binaries, wait};
use chrono::{DateTime, SecondsFormat, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::{
    per_store,
    support::{Setup, StoreKind},
};

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str().expect("a timestamp").parse().expect("RFC 3339")
}

fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

async fn backfill_twice_runs_each_fire_once(kind: StoreKind) {
    let s = Setup::with_env(kind, &[("CHIME_REPUBLISH_AFTER", "2s")]).await;
    let consumer = TestConsumer::start(&s.vhost.amqp_url(), "bf", "w1", &[]).await;
    // Hourly: it does not fire by itself during the test.
    let job = s
        .chimed
        .api
        .create_job(json!({
            "app": "e2e", "name": "hourly", "schedule": {"every": "1h"},
            "target": {"group": "bf"}, "payload": {"n": 7},
        }))
        .await;
    let id = job["id"].as_str().unwrap().to_string();
    let now = Utc::now();
    let range = json!({
        "from": stamp(now - chrono::Duration::minutes(390)),
        "to": stamp(now - chrono::Duration::minutes(30)),
        "rate": 2,
    });
    let path = format!("/v1/jobs/{id}/backfill");
    let (status, first) = s.chimed.api.call(Method::POST, &path, Some(&range)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    assert_eq!(
        (&first["fires"], &first["recorded"]),
        (&json!(6), &json!(6))
    );

    let runs = wait::until("6 succeeded runs", Duration::from_secs(60), || async {
        let runs = s.chimed.api.runs(&id).await;
        (in_state(&runs, "succeeded").len() >= 6).then_some(runs)
    })
    .await;

    let (status, again) = s.chimed.api.call(Method::POST, &path, Some(&range)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{again}");
    assert_eq!(
        (&again["fires"], &again["recorded"], &again["present"]),
        (&json!(6), &json!(0), &json!(6)),
        "the second backfill records nothing"
    );

    assert_eq!(runs.len(), 6, "{runs:?}");
    let job_id = id.parse().unwrap();
    let mut dispatched = Vec::new();
    for run in &runs {
        assert_eq!(run["trigger"], "backfill");
        assert_eq!(run["attempt"], 1);
        assert_eq!(run["output"]["echo"], json!({"n": 7}));
        let key = chime_consumer::protocol::run_id(job_id, time(&run["fire_time"]), 0);
        assert_eq!(run["id"], key.to_string(), "the scheduled fire's own id");
        dispatched.push(time(&run["dispatched_at"]));
    }
    dispatched.sort();
    let spread = *dispatched.last().unwrap() - dispatched[0];
    assert!(
        spread >= chrono::Duration::milliseconds(1500),
        "six fires at 2 a second are not dispatched at once: {spread}"
    );

    // Long enough for a duplicate of the second backfill to arrive, were there one.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut started: HashMap<String, usize> = HashMap::new();
    for event in consumer.events_of("started") {
        *started
            .entry(event["task_id"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(started.len(), 6, "{started:?}");
    assert!(
        started.values().all(|n| *n == 1),
        "each fire once: {started:?}"
    );
    let runs = s.chimed.api.runs(&id).await;
    assert_eq!(runs.len(), 6);

    // chimectl says the same: a third backfill of the range records nothing.
    let api = s.chimed.api.clone();
    let (from, to) = (
        range["from"].as_str().unwrap().to_string(),
        range["to"].as_str().unwrap().to_string(),
    );
    let output = tokio::task::spawn_blocking(move || {
        binaries::chimectl(&api)
            .args([
                "job",
                "backfill",
                "e2e/hourly",
                "--from",
                &from,
                "--to",
                &to,
                "--rate",
                "2",
            ])
            .output()
            .expect("run chimectl")
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.contains("6 fires"), "{text}");
    assert!(
        text.contains("recorded 0 fires (0 runs), 6 already present"),
        "{text}"
    );
    assert_eq!(s.chimed.api.runs(&id).await.len(), 6);
}

per_store!(backfill_twice_runs_each_fire_once);
