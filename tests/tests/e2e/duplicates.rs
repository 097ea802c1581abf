//! Duplicate deliveries of one task run the handler once.

use std::time::Duration;

use chime_consumer::{
    protocol::{Reply, TaskMessage, TaskOutcome, topology},
    testing::TaskBuilder,
};
use chime_tests::{TestConsumer, TestDatabase, TestVhost, wait};
use serde_json::json;
use sqlx::Connection;

/// Takes replies about tasks off the reply queue until `want` have arrived (consumers'
/// presence messages are skipped).
async fn replies(vhost: &TestVhost, want: usize) -> Vec<Reply> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut replies = Vec::new();
    while replies.len() < want {
        match vhost.get(topology::REPLY_QUEUE).await {
            Some(body) => replies.extend(
                Reply::many_from_slice(&body)
                    .expect("replies parse")
                    .into_iter()
                    .filter(|reply| !matches!(reply, Reply::Presence(_))),
            ),
            None => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "only {} of {want} replies: {replies:?}",
                    replies.len()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    replies
}

fn results(replies: &[Reply]) -> Vec<(bool, TaskOutcome)> {
    replies
        .iter()
        .filter_map(|r| match r {
            Reply::Result(result) => Some((result.replayed, result.outcome.clone())),
            Reply::Ack(_) | Reply::Heartbeat(_) | Reply::Presence(_) | Reply::Observe(_) => None,
        })
        .collect()
}

async fn wait_for_consumers(vhost: &TestVhost, group: &str, n: u32) {
    wait::until(
        &format!("{n} consumers on {group}"),
        Duration::from_secs(20),
        || async {
            let (connection, channel) = vhost.channel().await;
            let declared = channel
                .queue_declare(
                    topology::group_queue(group).as_str().into(),
                    lapin::options::QueueDeclareOptions {
                        passive: true,
                        ..Default::default()
                    },
                    lapin::types::FieldTable::default(),
                )
                .await
                .ok();
            let _ = connection.close(200, "done".into()).await;
            declared.filter(|q| q.consumer_count() >= n).map(|_| ())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_task_published_twice_runs_the_handler_once() {
    let vhost = TestVhost::new();
    let consumer = TestConsumer::start(&vhost.amqp_url(), "dups", "c1", &[]).await;
    wait_for_consumers(&vhost, "dups", 1).await;
    let task: TaskMessage = TaskBuilder::new("echo")
        .group("dups")
        .payload(json!({"sleep_ms": 300}))
        .build();
    vhost
        .publish(topology::TASK_EXCHANGE, "dups", &task.to_vec())
        .await;
    vhost
        .publish(topology::TASK_EXCHANGE, "dups", &task.to_vec())
        .await;

    let replies = replies(&vhost, 3).await;
    let results = results(&replies);
    assert_eq!(results.len(), 2, "each delivery is answered: {replies:?}");
    assert_eq!(results.iter().filter(|(replayed, _)| *replayed).count(), 1);
    assert!(
        results
            .iter()
            .all(|(_, o)| matches!(o, TaskOutcome::Succeeded { .. }))
    );
    assert_eq!(
        consumer.events_of("started").len(),
        1,
        "the handler ran once"
    );
    let (ready, _) = vhost.queue_state(&topology::group_queue("dups")).await;
    assert_eq!(ready, 0, "both deliveries were acknowledged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_transactional_handler_writes_once_across_instances() {
    let vhost = TestVhost::new();
    let db = TestDatabase::postgres().await;
    let pg = ["--postgres", db.url()];
    let a = TestConsumer::start(&vhost.amqp_url(), "fx", "a", &pg).await;
    let b = TestConsumer::start(&vhost.amqp_url(), "fx", "b", &pg).await;
    wait_for_consumers(&vhost, "fx", 2).await;
    let task = TaskBuilder::new("effect")
        .group("fx")
        .payload(json!({"sleep_ms": 500}))
        .build();
    for _ in 0..3 {
        vhost
            .publish(topology::TASK_EXCHANGE, "fx", &task.to_vec())
            .await;
    }
    let replies = replies(&vhost, 3 + 3).await;
    let results = results(&replies);
    assert_eq!(results.len(), 3);
    assert_eq!(
        results.iter().filter(|(replayed, _)| !replayed).count(),
        1,
        "{results:?}"
    );
    let started = a.events_of("started").len() + b.events_of("started").len();
    assert_eq!(
        started, 1,
        "the handler body ran once across both instances"
    );
    let mut conn = sqlx::PgConnection::connect(db.url()).await.unwrap();
    let effects: i64 = sqlx::query_scalar("SELECT count(*) FROM test_effects WHERE task_id = $1")
        .bind(task.task_id)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(effects, 1, "the handler's write committed exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_task_is_dead_lettered_and_work_continues() {
    let vhost = TestVhost::new();
    let consumer = TestConsumer::start(&vhost.amqp_url(), "mixed", "c1", &[]).await;
    wait_for_consumers(&vhost, "mixed", 1).await;
    vhost
        .publish(topology::TASK_EXCHANGE, "mixed", b"{\"not\": \"a task\"}")
        .await;
    let good = TaskBuilder::new("echo").group("mixed").build();
    vhost
        .publish(topology::TASK_EXCHANGE, "mixed", &good.to_vec())
        .await;
    consumer
        .wait_for("the good task", Duration::from_secs(20), |events| {
            events
                .iter()
                .any(|e| e["event"] == "finished" && e["task_id"] == good.task_id.to_string())
        })
        .await;
    let dlq = topology::dead_letter_queue(&topology::group_queue("mixed"));
    wait::until(
        "the malformed task in the DLQ",
        Duration::from_secs(10),
        || async { (vhost.queue_state(&dlq).await.0 == 1).then_some(()) },
    )
    .await;
    assert_eq!(
        vhost.get(&dlq).await.as_deref(),
        Some(&b"{\"not\": \"a task\"}"[..])
    );
}
