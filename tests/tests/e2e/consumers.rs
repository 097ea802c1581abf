//! `GET /v1/consumers` against real consumers (issue 38): two `chime-test-consumer`
//! instances of one group are listed with their zone, broadcast flag, the library's
//! version and first/last seen times; the one running a slow task counts it; a group a
//! job targets with work queued and no consumer is flagged unattended.

use std::time::Duration;

use chime_tests::{TestConsumer, wait};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::per_store;
use crate::support::{Setup, StoreKind};

per_store!(consumers_lists_instances_running_work_and_unattended_groups);

/// The answer of `GET /v1/consumers` once `check` accepts it.
async fn consumers_when(
    api: &chime_tests::api::Api,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    wait::until(what, Duration::from_secs(30), || async {
        let (status, body) = api.call(Method::GET, "/v1/consumers", None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        check(&body).then_some(body)
    })
    .await
}

fn instance<'a>(body: &'a Value, id: &str) -> Option<&'a Value> {
    body["instances"]
        .as_array()?
        .iter()
        .find(|i| i["instance"] == id)
}

fn group<'a>(body: &'a Value, name: &str) -> Option<&'a Value> {
    body["groups"]
        .as_array()?
        .iter()
        .find(|g| g["group"] == name)
}

async fn consumers_lists_instances_running_work_and_unattended_groups(kind: StoreKind) {
    let s = Setup::new(kind).await;
    let api = &s.chimed.api;
    let slow = api
        .create_job(json!({
            "app": "e2e", "name": "slow", "schedule": {"every": "1h"},
            "target": {"group": "workers"}, "payload": {"sleep_ms": 60000},
        }))
        .await;
    let orphan = api
        .create_job(json!({
            "app": "e2e", "name": "orphan", "schedule": {"every": "1h"},
            "target": {"group": "nobody"},
        }))
        .await;

    let amqp = s.vhost.amqp_url();
    let w1 = TestConsumer::start(&amqp, "workers", "w1", &[]).await;
    let w2 = TestConsumer::start(&amqp, "workers", "w2", &["--zone", "dc1"]).await;
    let body = consumers_when(api, "both instances to be live", |b| {
        ["w1", "w2"]
            .iter()
            .all(|id| instance(b, id).is_some_and(|i| i["live"] == true))
    })
    .await;
    for id in ["w1", "w2"] {
        let i = instance(&body, id).unwrap();
        assert_eq!(i["group"], "workers", "{i}");
        assert_eq!(i["broadcast"], false, "{i}");
        assert_eq!(i["running"], 0, "{i}");
        let version = i["version"].as_str().unwrap_or_default();
        assert!(version.starts_with("chime-consumer/"), "{i}");
        let (first, last) = (
            i["first_seen"].as_str().unwrap(),
            i["last_seen"].as_str().unwrap(),
        );
        assert!(first <= last, "{i}");
    }
    assert_eq!(instance(&body, "w1").unwrap()["zone"], Value::Null);
    assert_eq!(instance(&body, "w2").unwrap()["zone"], "dc1");

    // A slow task runs on one of them; a task for the group nobody consumes waits.
    let run = api.trigger(slow["id"].as_str().unwrap()).await;
    let run_id = run["id"].as_str().unwrap().to_string();
    let acked = api
        .wait_run(&run_id, "the slow run to be acked", |r| {
            r["state"] == "acked"
        })
        .await;
    let runner = acked["consumer"].as_str().expect("a consumer").to_string();
    let waiting = api.trigger(orphan["id"].as_str().unwrap()).await;
    api.wait_run(
        waiting["id"].as_str().unwrap(),
        "the orphan run to be published",
        |r| r["state"] == "dispatched",
    )
    .await;

    let body = consumers_when(api, "the running task and the queued one", |b| {
        group(b, "nobody").is_some_and(|g| g["queued"] == 1)
            && group(b, "workers").is_some_and(|g| g["running"] == 1)
    })
    .await;
    assert_eq!(instance(&body, &runner).unwrap()["running"], 1, "{body}");
    let other = if runner == "w1" { "w2" } else { "w1" };
    assert_eq!(instance(&body, other).unwrap()["running"], 0, "{body}");
    assert_eq!(
        group(&body, "nobody").unwrap(),
        &json!({"group": "nobody", "live_consumers": 0, "queued": 1, "running": 0, "unattended": true})
    );
    assert_eq!(
        group(&body, "workers").unwrap(),
        &json!({"group": "workers", "live_consumers": 2, "queued": 0, "running": 1, "unattended": false})
    );

    // Filtered to one group.
    let (status, only) = api
        .call(Method::GET, "/v1/consumers?group=nobody", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{only}");
    assert_eq!(only["instances"], json!([]));
    assert_eq!(only["groups"].as_array().map(Vec::len), Some(1));

    w1.kill().await;
    w2.kill().await;
}
