//! Reading dead letters consumes no delivery attempts: chimed creates dead-letter queues
//! as classic queues, so a dead letter peeked a thousand times (through the API and the
//! sampler's `dlq ls` path) stays in place with its body and headers unchanged; and a
//! dead-letter queue that already exists as a quorum queue (made by an older Chime) is
//! used as it is.

use std::time::Duration;

use chime_testkit::queue;
use chime_tests::{TestVhost, wait};
use lapin::{
    options::{BasicGetOptions, BasicNackOptions, QueueDeclareOptions},
    types::{AMQPValue, FieldTable, LongString},
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Setup, StoreKind};

async fn create_job(s: &Setup, group: &str) {
    s.chimed
        .api
        .create_job(json!({
            "app": "e2e", "name": "peek",
            "schedule": {"every": "1h"},
            "target": {"group": group},
            "payload": {},
        }))
        .await;
}

/// Dead-letters one message of `group` the way the broker does for a consumer's reject:
/// published to the group's work queue, taken, and rejected without requeue.
async fn dead_letter_one(vhost: &TestVhost, group: &str, body: &[u8]) {
    let queue = format!("chime.group.{group}");
    let (connection, channel) = vhost.channel().await;
    queue::dead_letter_one(&channel, &queue, body, WAIT).await;
    let _ = connection.close(200, "done".into()).await;
}

const WAIT: Duration = Duration::from_secs(30);

/// The head message of `queue` (body and headers), handed back unacknowledged.
async fn head(vhost: &TestVhost, queue: &str) -> (Vec<u8>, Option<FieldTable>) {
    let (connection, channel) = vhost.channel().await;
    // A message handed back a moment ago may still be on its way back to the queue.
    let message = wait::until("a message at the head", WAIT, || async {
        channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: false })
            .await
            .expect("basic.get")
    })
    .await;
    let seen = (
        message.delivery.data.clone(),
        message.delivery.properties.headers().clone(),
    );
    message
        .delivery
        .acker
        .nack(BasicNackOptions {
            requeue: true,
            ..BasicNackOptions::default()
        })
        .await
        .expect("requeue");
    let _ = connection.close(200, "done".into()).await;
    seen
}

async fn listed(s: &Setup, queue: &str) -> Option<Value> {
    let (status, list) = s.chimed.api.call(Method::GET, "/v1/dlq", None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|q| q["queue"] == queue)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_peek_a_thousand_times_leaves_the_dead_letter_unchanged() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let group = "dlqpeek";
    let dlq = "chime.group.dlqpeek.dlq";
    create_job(&s, group).await;
    assert_eq!(s.vhost.queue_type(dlq).as_deref(), Some("classic"));
    assert_eq!(
        s.vhost.queue_type("chime.replies.dlq").as_deref(),
        Some("classic")
    );

    // A quorum work queue dead-letters (at least once) into the classic DLQ.
    dead_letter_one(&s.vhost, group, b"{\"not\": \"a task\"}").await;
    wait::until("the dead letter in the DLQ", WAIT, || async {
        (s.vhost.queue_state(dlq).await.0 == 1).then_some(())
    })
    .await;
    let (body, headers) = head(&s.vhost, dlq).await;
    let headers = headers.expect("a dead letter carries x-death");
    assert!(headers.inner().contains_key("x-death"), "{headers:?}");

    for i in 0..1_000 {
        // A peek reads the head and hands it back; while another reader holds it (chimed's
        // own 15 s DLQ sampler, or the previous peek's channel still closing) the queue
        // looks empty for a moment, so a peek that finds nothing is tried again: the
        // message must come back every time, never be lost.
        let page = wait::until(
            &format!("peek {i} to see the dead letter"),
            WAIT,
            || async {
                let (status, page) = s
                    .chimed
                    .api
                    .call(
                        Method::GET,
                        &format!("/v1/dlq/{dlq}/messages?limit=5"),
                        None,
                    )
                    .await;
                assert_eq!(status, StatusCode::OK, "peek {i}: {page}");
                (page["items"].as_array().map(Vec::len) != Some(0)).then_some(page)
            },
        )
        .await;
        assert_eq!(page["items"].as_array().map(Vec::len), Some(1), "peek {i}");
        // The sampler's path (each DLQ's head read for its age and reasons).
        if i % 100 == 0 {
            // Depth counts ready messages: one held by a reader for a moment is not ready.
            wait::until("dlq ls to show the dead letter", WAIT, || async {
                let item = listed(&s, dlq).await.expect("the DLQ in dlq ls");
                (item["depth"] == 1).then_some(())
            })
            .await;
        }
    }

    // The last peek's message goes back as its channel closes; it must not be dropped.
    wait::until("the dead letter still in the DLQ", WAIT, || async {
        (s.vhost.queue_state(dlq).await.0 == 1).then_some(())
    })
    .await;
    let (body_after, headers_after) = head(&s.vhost, dlq).await;
    assert_eq!(body_after, body, "body unchanged");
    assert_eq!(headers_after.as_ref(), Some(&headers), "headers unchanged");
    assert!(
        !headers.inner().contains_key("x-delivery-count"),
        "a classic queue counts no deliveries: {headers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_an_existing_quorum_dlq_is_used_as_it_is() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let group = "dlqold";
    let dlq = "chime.group.dlqold.dlq";
    // As an older Chime declared it.
    let (connection, channel) = s.vhost.channel().await;
    let mut quorum = FieldTable::default();
    quorum.insert(
        "x-queue-type".into(),
        AMQPValue::LongString(LongString::from("quorum")),
    );
    channel
        .queue_declare(
            dlq.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            quorum,
        )
        .await
        .expect("declare the old quorum DLQ");
    let _ = connection.close(200, "done".into()).await;

    // chimed declares the group on top without a precondition failure.
    create_job(&s, group).await;
    let (status, job_list) = s.chimed.api.call(Method::GET, "/v1/jobs", None).await;
    assert_eq!(status, StatusCode::OK, "{job_list}");
    assert_eq!(s.vhost.queue_type(dlq).as_deref(), Some("quorum"));
    assert_eq!(
        s.vhost
            .queue_type(&format!("chime.group.{group}"))
            .as_deref(),
        Some("quorum"),
        "the work queue was declared"
    );

    // Dead letters land there, and dlq ls shows it.
    dead_letter_one(&s.vhost, group, b"{\"not\": \"a task\"}").await;
    let item = wait::until("the dead letter in dlq ls", WAIT, || async {
        listed(&s, dlq).await.filter(|q| q["depth"] == 1)
    })
    .await;
    assert_eq!(item["depth"], 1, "{item}");
    assert_eq!(s.vhost.queue_type(dlq).as_deref(), Some("quorum"));
}
