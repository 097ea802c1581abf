//! Authenticated messages (`reply_users`): on a private vhost with two RabbitMQ users,
//! app B's user cannot settle app A's run or speak for A's group; what it sends is
//! dead-lettered with reason `user`, counted, and changes nothing, while A's own replies
//! apply.

use std::time::Duration;

use chime_consumer::protocol::{dead_letter::REJECT_REASON_HEADER, topology};
use chime_tests::{TestConsumer, api::metric, vhost::TestUser, wait};
use lapin::{
    BasicProperties, Channel,
    options::{BasicGetOptions, BasicPublishOptions},
    types::AMQPValue,
};
use reqwest::Method;
use serde_json::json;

use crate::support::{Setup, StoreKind};

const DLQ: &str = "chime.replies.dlq";

/// Publishes `body` to the reply exchange with `user_id` (if any) and waits for the
/// confirm; panics unless the broker acked it and it reached a queue.
async fn reply_as(channel: &Channel, user_id: Option<&str>, body: &serde_json::Value) {
    let mut properties = BasicProperties::default().with_delivery_mode(2);
    if let Some(user) = user_id {
        properties = properties.with_user_id(user.into());
    }
    let confirm = channel
        .basic_publish(
            topology::REPLY_EXCHANGE.into(),
            topology::REPLY_ROUTING_KEY.into(),
            BasicPublishOptions {
                mandatory: true,
                ..BasicPublishOptions::default()
            },
            body.to_string().as_bytes(),
            properties,
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_ack(), "broker nacked the reply");
    assert!(confirm.take_message().is_none(), "reply not routed");
}

/// The reasons of the messages in the reply DLQ (taking them).
async fn dead_letter_reasons(s: &Setup, expected: usize) -> Vec<(serde_json::Value, String)> {
    wait::until(
        "the refused replies in the DLQ",
        Duration::from_secs(30),
        || async { (s.vhost.queue_state(DLQ).await.0 as usize >= expected).then_some(()) },
    )
    .await;
    let (connection, channel) = s.vhost.channel().await;
    let mut reasons = Vec::new();
    while let Some(message) = channel
        .basic_get(DLQ.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        let body = serde_json::from_slice(&message.delivery.data).expect("a reply's JSON");
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
    reasons
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_apps_user_cannot_settle_a_run_and_is_refused_and_counted() {
    let mut app_a = TestUser::new("chime-app-a");
    let mut app_b = TestUser::new("chime-app-b");
    let rule = format!("ga={},gb={}", app_a.name(), app_b.name());
    let s = Setup::with_env(StoreKind::Sqlite, &[("CHIME_REPLY_USERS", &rule)]).await;
    let write_replies = format!("^{}$", topology::REPLY_EXCHANGE.replace('.', "\\."));
    app_a.grant(&s.vhost, "^$", &write_replies, "^$");
    app_b.grant(&s.vhost, "^$", &write_replies, "^$");

    let job = s
        .chimed
        .api
        .create_job(json!({
            "app": "a", "name": "nightly",
            "schedule": {"every": "1h"},
            "target": {"group": "ga"},
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

    let success = |consumer: &str| {
        json!({"v": 1, "type": "result", "task_id": run_id, "attempt": 1,
            "consumer": consumer, "finished_at": "2026-11-21T10:00:00.000Z",
            "status": "succeeded", "output": {"forged": consumer == "b-1"}})
    };
    // App B forges a success for A's run, and speaks for A's group.
    let (b_connection, b_channel) = app_b.channel().await;
    reply_as(&b_channel, Some(app_b.name()), &success("b-1")).await;
    let presence = json!({"v": 1, "type": "presence", "instance": "b-1", "group": "ga",
        "broadcast": false, "at": "2026-11-21T10:00:00.000Z"});
    reply_as(&b_channel, Some(app_b.name()), &presence).await;
    // A reply without user_id is refused too (guest is listed for nothing).
    let (guest_connection, guest_channel) = s.vhost.channel().await;
    reply_as(&guest_channel, None, &success("b-1")).await;

    let reasons = dead_letter_reasons(&s, 3).await;
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert_eq!(reasons[0].0, success("b-1"), "the refused reply as sent");
    assert!(
        reasons[0].1.contains(&format!(
            "{:?} may not answer for group \"ga\"",
            app_b.name()
        )),
        "{reasons:?}"
    );
    assert!(reasons[1].1.contains("may not answer"), "{reasons:?}");
    assert!(reasons[2].1.contains("no user_id"), "{reasons:?}");
    let metrics = s.chimed.api.metrics().await;
    assert_eq!(
        metric(&metrics, r#"chime_rejected_replies_total{reason="user"}"#),
        3.0,
        "{metrics}"
    );

    // The run is untouched: still dispatched, nothing noted on it.
    let (_, unaffected) = s
        .chimed
        .api
        .call(Method::GET, &format!("/v1/runs/{run_id}"), None)
        .await;
    assert_eq!(unaffected["state"], "dispatched", "{unaffected}");
    assert!(unaffected["consumer"].is_null(), "{unaffected}");
    assert!(
        !unaffected["history"]
            .as_array()
            .expect("history")
            .iter()
            .any(|r| r["event"] == "reply_rejected"),
        "{unaffected}"
    );

    // A's own success applies.
    let (a_connection, a_channel) = app_a.channel().await;
    reply_as(&a_channel, Some(app_a.name()), &success("a-1")).await;
    let done = s
        .chimed
        .api
        .wait_run(&run_id, "A's success to apply", |r| {
            r["state"] == "succeeded"
        })
        .await;
    assert_eq!(done["consumer"], "a-1", "{done}");
    assert_eq!(done["output"], json!({"forged": false}), "{done}");

    for connection in [a_connection, b_connection, guest_connection] {
        let _ = connection.close(200, "done".into()).await;
    }
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_own_consumer_settles_its_runs_under_reply_users() {
    let mut app_a = TestUser::new("chime-app-a");
    let rule = format!("ga={}", app_a.name());
    let s = Setup::with_env(StoreKind::Sqlite, &[("CHIME_REPLY_USERS", &rule)]).await;
    app_a.grant(&s.vhost, ".*", ".*", ".*");
    // The library stamps every reply with its connection's user.
    let consumer = TestConsumer::start(&app_a.amqp_url(), "ga", "a-1", &[]).await;
    let job = s
        .chimed
        .api
        .create_job(json!({
            "app": "a", "name": "own",
            "schedule": {"every": "1h"},
            "target": {"group": "ga"},
        }))
        .await;
    let run = s.chimed.api.trigger(job["id"].as_str().unwrap()).await;
    let run_id = run["id"].as_str().unwrap().to_string();
    let done = s
        .chimed
        .api
        .wait_run(&run_id, "the app's consumer to settle it", |r| {
            r["state"] == "succeeded"
        })
        .await;
    assert_eq!(done["consumer"], "a-1", "{done}");
    let metrics = s.chimed.api.metrics().await;
    assert_eq!(
        metric(&metrics, r#"chime_rejected_replies_total{reason="user"}"#),
        0.0,
        "presence and replies of the app's own user are accepted: {metrics}"
    );
    consumer.kill().await;
}
