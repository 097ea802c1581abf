//! Reply validation against a real chimed: a bad item of a reply batch is dead-lettered
//! alone with its reason (`x-chime-reject-reason`), counted by reason and noted on its
//! run's history, while the other items of the batch are applied.

use std::time::Duration;

use chime_consumer::protocol::{ReplyBatch, dead_letter::REJECT_REASON_HEADER, topology};
use chime_tests::{api::metric, wait};
use lapin::{options::BasicGetOptions, types::AMQPValue};
use reqwest::Method;
use serde_json::json;

use crate::support::{Setup, StoreKind};

const DLQ: &str = "chime.replies.dlq";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_item_of_a_reply_batch_is_dead_lettered_alone_with_its_reason() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let job = s
        .chimed
        .api
        .create_job(json!({
            "app": "e2e", "name": "batchy",
            "schedule": {"every": "1h"},
            "target": {"group": "replies"},
        }))
        .await;
    let run = s.chimed.api.trigger(job["id"].as_str().unwrap()).await;
    let run_id = run["id"].as_str().unwrap().to_string();
    s.chimed
        .api
        .wait_run(&run_id, "the run to be dispatched", |r| {
            r["state"] == "dispatched"
        })
        .await;

    let ack = json!({"v": 1, "type": "ack", "task_id": run_id, "attempt": 1,
        "consumer": "c1", "acked_at": "2026-11-21T10:00:00.000Z"});
    let missing = json!({"v": 1, "type": "ack", "task_id": run_id, "attempt": 1,
        "consumer": "c1"});
    let bad_consumer = json!({"v": 1, "type": "heartbeat", "task_id": run_id, "attempt": 1,
        "consumer": "not an id", "at": "2026-11-21T10:00:00.000Z"});
    let body = ReplyBatch::body_of(&[
        missing.to_string().into_bytes(),
        ack.to_string().into_bytes(),
        bad_consumer.to_string().into_bytes(),
    ]);
    s.vhost
        .publish(topology::REPLY_EXCHANGE, topology::REPLY_ROUTING_KEY, &body)
        .await;

    // The good ack is applied although the items around it are refused.
    s.chimed
        .api
        .wait_run(&run_id, "the batch's ack to apply", |r| {
            r["state"] == "acked"
        })
        .await;
    wait::until(
        "both refused items in the DLQ",
        Duration::from_secs(30),
        || async { (s.vhost.queue_state(DLQ).await.0 == 2).then_some(()) },
    )
    .await;
    let (connection, channel) = s.vhost.channel().await;
    let mut reasons = Vec::new();
    for _ in 0..2 {
        let message = channel
            .basic_get(DLQ.into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic.get")
            .expect("a refused item");
        let body: serde_json::Value =
            serde_json::from_slice(&message.delivery.data).expect("an item's JSON");
        let headers = message
            .delivery
            .properties
            .headers()
            .clone()
            .unwrap_or_default();
        let reason = match headers.inner().get(REJECT_REASON_HEADER) {
            Some(AMQPValue::LongString(reason)) => reason.to_string(),
            other => panic!("no reason header: {other:?}"),
        };
        reasons.push((body, reason));
    }
    let _ = connection.close(200, "done".into()).await;
    assert_eq!(reasons[0].0, missing, "each item goes alone, as sent");
    assert!(
        reasons[0].1.contains("missing field `acked_at`"),
        "{reasons:?}"
    );
    assert_eq!(reasons[1].0, bad_consumer);
    assert!(reasons[1].1.starts_with("invalid consumer"), "{reasons:?}");

    let metrics = s.chimed.api.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"chime_rejected_replies_total{reason="malformed"}"#
        ),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            r#"chime_rejected_replies_total{reason="invalid"}"#
        ),
        1.0
    );
    let (_, run) = s
        .chimed
        .api
        .call(Method::GET, &format!("/v1/runs/{run_id}"), None)
        .await;
    assert_eq!(run["consumer"], "c1");
    // Both refused replies are noted on the run, with their reasons.
    let notes: Vec<&serde_json::Value> = run["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter(|r| r["event"] == "reply_rejected")
        .collect();
    assert_eq!(notes.len(), 2, "{run}");
    assert!(
        notes[0]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("missing field `acked_at`"),
        "{run}"
    );
    assert_eq!(notes[0]["consumer"], "c1");
    assert!(
        notes[1]["consumer"].is_null(),
        "an invalid id is not repeated"
    );
}
