//! The DLQ tools against a real chimed: they act only on the dead-letter queues Chime
//! declared (observers' included, which `ls` and the depth gauges show), a replay
//! publishes only where Chime's store says and never where a message's headers point,
//! `remaining` counts what is left, and a dead letter whose run has since succeeded is
//! marked resolved and left in place by a replay.

use std::time::Duration;

use chime_consumer::protocol::{TaskMessage, topology};
use chime_testkit::publish;
use chime_tests::{TestConsumer, TestVhost, api::metric, wait};
use chrono::Utc;
use lapin::{
    options::QueueDeclareOptions,
    types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString},
};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Setup, StoreKind};

const GROUP: &str = "dlqtools";
const GROUP_DLQ: &str = "chime.group.dlqtools.dlq";
const REPLIES_DLQ: &str = "chime.replies.dlq";
const PRIVATE: &str = "private.data";

/// An id no run has: the time in nanoseconds and a counter.
fn fresh_id() -> Uuid {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = Utc::now().timestamp_nanos_opt().unwrap_or_default() as u64;
    Uuid::from_u64_pair(nanos, n)
}

/// A task of group [`GROUP`] for run `task_id`, as its JSON body.
fn task(task_id: Uuid) -> Vec<u8> {
    TaskMessage {
        v: 1,
        task_id,
        job_id: fresh_id(),
        app: "e2e".into(),
        job: "tools".into(),
        group: GROUP.into(),
        fire_time: Utc::now(),
        shard: 0,
        shard_total: 1,
        attempt: 1,
        mode: Default::default(),
        zone: None,
        payload: json!({}),
        published_at: Utc::now(),
        run_timeout_ms: None,
    }
    .to_vec()
}

/// An `x-death` header claiming the message was first published to the default exchange
/// with routing key `routing_key`.
fn forged_death(routing_key: &str) -> FieldTable {
    let long = |s: &str| AMQPValue::LongString(LongString::from(s));
    let mut death = FieldTable::default();
    death.insert(ShortString::from("reason"), long("rejected"));
    death.insert(ShortString::from("queue"), long(routing_key));
    death.insert(ShortString::from("exchange"), long(""));
    death.insert(
        ShortString::from("routing-keys"),
        AMQPValue::FieldArray(FieldArray::from(vec![long(routing_key)])),
    );
    death.insert(ShortString::from("count"), AMQPValue::LongLongInt(1));
    let mut headers = FieldTable::default();
    headers.insert(
        ShortString::from("x-death"),
        AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(death)])),
    );
    headers
}

/// Puts `body` straight into `queue` (through the default exchange) with `headers`.
async fn put(vhost: &TestVhost, queue: &str, body: &[u8], headers: FieldTable) {
    let (connection, channel) = vhost.channel().await;
    assert!(publish::publish_with_headers(&channel, "", queue, body, headers).await);
    let _ = connection.close(200, "done".into()).await;
}

/// Declares a plain durable queue `queue`.
async fn declare_plain(vhost: &TestVhost, queue: &str) {
    let (connection, channel) = vhost.channel().await;
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare");
    let _ = connection.close(200, "done".into()).await;
}

/// Declares group [`GROUP`]'s queues and observer `observer`'s, as consumers would.
async fn declare_topology(vhost: &TestVhost, observer: &str) {
    let (connection, channel) = vhost.channel().await;
    topology::declare_group(&connection, &channel, GROUP)
        .await
        .expect("declare group");
    topology::declare_observer(&connection, &channel, observer, &["e2e.*".to_string()])
        .await
        .expect("declare observer");
    let _ = connection.close(200, "done".into()).await;
}

async fn replay(s: &Setup, queue: &str, body: Value) -> (StatusCode, Value) {
    s.chimed
        .api
        .call(
            Method::POST,
            &format!("/v1/dlq/{queue}/replay"),
            Some(&body),
        )
        .await
}

async fn dlq_list(s: &Setup) -> Vec<Value> {
    let (status, list) = s.chimed.api.call(Method::GET, "/v1/dlq", None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    list["items"].as_array().expect("items").clone()
}

async fn create_job(s: &Setup) -> Value {
    s.chimed
        .api
        .create_job(json!({
            "app": "e2e", "name": "tools",
            "schedule": {"every": "1h"},
            "target": {"group": GROUP},
            "payload": {},
        }))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_tools_act_only_on_chimes_queues_and_never_route_by_headers() {
    let s = Setup::new(StoreKind::Sqlite).await;
    create_job(&s).await;
    declare_topology(&s.vhost, "audit").await;
    declare_plain(&s.vhost, PRIVATE).await;

    // A queue that merely looks like a DLQ is refused by every endpoint, and untouched.
    declare_plain(&s.vhost, "chime.lookalike.dlq").await;
    put(
        &s.vhost,
        "chime.lookalike.dlq",
        b"secret",
        FieldTable::default(),
    )
    .await;
    for (method, action) in [
        (Method::GET, "messages"),
        (Method::POST, "replay"),
        (Method::POST, "purge"),
    ] {
        let (status, body) = s
            .chimed
            .api
            .call(
                method,
                &format!("/v1/dlq/chime.lookalike.dlq/{action}"),
                None,
            )
            .await;
        assert!(status.is_client_error(), "{action}: {status} {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("not one of Chime's dead-letter queues"),
            "{action}: {body}"
        );
    }
    assert_eq!(s.vhost.queue_state("chime.lookalike.dlq").await.0, 1);
    assert!(
        !dlq_list(&s)
            .await
            .iter()
            .any(|q| q["queue"] == "chime.lookalike.dlq")
    );

    // A reply with a forged death record naming another queue goes back to the reply
    // queue (where the collector dead-letters it again), not to the queue named.
    put(&s.vhost, REPLIES_DLQ, b"not a reply", forged_death(PRIVATE)).await;
    let (status, report) = replay(&s, REPLIES_DLQ, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["replayed"], 1, "{report}");
    // A task of a run Chime never recorded, with the same forged record, is left alone.
    put(
        &s.vhost,
        GROUP_DLQ,
        &task(fresh_id()),
        forged_death(PRIVATE),
    )
    .await;
    put(&s.vhost, GROUP_DLQ, b"{}", forged_death(PRIVATE)).await;
    let (status, report) = replay(&s, GROUP_DLQ, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["replayed"], 0, "{report}");
    assert_eq!(report["remaining"], 2, "{report}");
    assert_eq!(
        report["skipped"],
        json!({"run unknown (job deleted or run pruned)": 1, "not a task (no run to route it by)": 1})
    );
    // The replayed reply is back in its DLQ once the collector has rejected it again.
    wait::until(
        "the replayed reply to be dead-lettered again",
        Duration::from_secs(30),
        || async { (s.vhost.queue_state(REPLIES_DLQ).await.0 == 1).then_some(()) },
    )
    .await;
    assert_eq!(
        s.vhost.queue_state(PRIVATE).await.0,
        0,
        "nothing reached the queue the headers named"
    );

    // Once the observer has registered, its DLQ is listed and sampled.
    let observe = json!({"v": 1, "type": "observe", "observer": "audit",
        "patterns": ["e2e.*"], "at": Utc::now()});
    s.vhost
        .publish(
            topology::REPLY_EXCHANGE,
            topology::REPLY_ROUTING_KEY,
            observe.to_string().as_bytes(),
        )
        .await;
    put(
        &s.vhost,
        "chime.observe.audit.dlq",
        &task(fresh_id()),
        FieldTable::default(),
    )
    .await;
    let listed = wait::until(
        "the observer's DLQ in dlq ls",
        Duration::from_secs(30),
        || async {
            dlq_list(&s)
                .await
                .into_iter()
                .find(|q| q["queue"] == "chime.observe.audit.dlq")
        },
    )
    .await;
    assert_eq!(listed["depth"], 1, "{listed}");
    // The sampler passes every 15 s.
    wait::until(
        "the observer's DLQ depth gauge",
        Duration::from_secs(40),
        || async {
            let text = s.chimed.api.metrics().await;
            (metric(&text, r#"chime_dlq_depth{queue="chime.observe.audit.dlq"}"#) == 1.0)
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_replay_remaining_counts_the_messages_left() {
    let s = Setup::new(StoreKind::Sqlite).await;
    create_job(&s).await;
    declare_topology(&s.vhost, "audit").await;
    for _ in 0..8 {
        put(
            &s.vhost,
            GROUP_DLQ,
            &task(fresh_id()),
            FieldTable::default(),
        )
        .await;
    }
    // Every message is left in place and handed back as the replay's channel closes;
    // the count must not be taken before they are all back.
    for round in 0..5 {
        let (status, report) = replay(&s, GROUP_DLQ, json!({})).await;
        assert_eq!(status, StatusCode::OK, "{report}");
        assert_eq!(report["remaining"], 8, "round {round}: {report}");
        assert_eq!(report["replayed"], 0, "round {round}: {report}");
    }
    let (status, report) = replay(&s, GROUP_DLQ, json!({"limit": 3})).await;
    assert_eq!((status, &report["remaining"]), (StatusCode::OK, &json!(8)));
    assert_eq!(s.vhost.queue_state(GROUP_DLQ).await.0, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_marks_a_dead_letter_of_a_run_that_succeeded_as_resolved() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let job = create_job(&s).await;
    declare_topology(&s.vhost, "audit").await;
    let _consumer = TestConsumer::start(&s.vhost.amqp_url(), GROUP, "c1", &[]).await;
    let run = s.chimed.api.trigger(job["id"].as_str().unwrap()).await;
    let run_id: Uuid = run["id"].as_str().unwrap().parse().unwrap();
    s.chimed
        .api
        .wait_run(&run_id.to_string(), "the run to succeed", |r| {
            r["state"] == "succeeded"
        })
        .await;
    // A dead letter of that run (as left by an attempt given up before its late result),
    // and one of a run still dead-lettered for good.
    put(&s.vhost, GROUP_DLQ, &task(run_id), FieldTable::default()).await;
    put(
        &s.vhost,
        GROUP_DLQ,
        &task(fresh_id()),
        FieldTable::default(),
    )
    .await;

    let (status, peeked) = s
        .chimed
        .api
        .call(Method::GET, &format!("/v1/dlq/{GROUP_DLQ}/messages"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{peeked}");
    let resolved: Vec<(Value, Value)> = peeked["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["run_id"].clone(), m["resolved"].clone()))
        .collect();
    assert_eq!(resolved[0], (json!(run_id), json!(true)), "{peeked}");
    assert_eq!(resolved[1].1, json!(false), "{peeked}");
    let listed = dlq_list(&s).await;
    let queue = listed.iter().find(|q| q["queue"] == GROUP_DLQ).unwrap();
    assert_eq!(
        (&queue["depth"], &queue["resolved"]),
        (&json!(2), &json!(1))
    );

    let (status, report) = replay(&s, GROUP_DLQ, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["replayed"], 0, "{report}");
    assert_eq!(report["skipped"]["resolved"], 1, "{report}");
    assert_eq!(report["remaining"], 2, "{report}");
    assert_eq!(
        s.chimed.api.run(&run_id.to_string()).await["state"],
        "succeeded",
        "a resolved run is not revived"
    );
}
