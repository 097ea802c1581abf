//! Dead-letter queues against the real broker: created as classic queues (reading them by
//! get-and-requeue counts no deliveries), declared again idempotently, and an existing
//! quorum dead-letter queue (made by an older version) used as it is.

use chime_consumer::protocol::topology;
use lapin::{
    Channel,
    options::{BasicGetOptions, BasicNackOptions, QueueDeclareOptions},
    types::{AMQPValue, FieldTable, LongString},
};
use uuid::Uuid;

use crate::support::*;

/// Publishes a message into `group`'s work queue, takes it and rejects it without
/// requeue, so the broker dead-letters it.
async fn dead_letter_group_task(channel: &Channel, group: &str) {
    dead_letter_one(channel, &topology::group_queue(group), b"dead", WAIT).await;
}

#[tokio::test]
async fn dead_letter_queues_are_classic_and_declaring_twice_is_idempotent() {
    let vhost = fresh_vhost();
    let group = format!("dlq-{}", Uuid::now_v7().simple());
    let dlq = topology::dead_letter_queue(&topology::group_queue(&group));
    let (connection, channel) = vhost.channel().await;
    for _ in 0..2 {
        topology::declare_replies(&connection, &channel)
            .await
            .expect("declare replies");
        topology::declare_group(&connection, &channel, &group)
            .await
            .expect("declare the group");
        topology::declare_zone(&connection, &channel, &group, "dc1")
            .await
            .expect("declare a zone");
    }
    assert!(channel.status().connected());
    assert_eq!(vhost.queue_type(&dlq).as_deref(), Some("classic"));
    assert_eq!(
        vhost.queue_type("chime.replies.dlq").as_deref(),
        Some("classic")
    );
    assert_eq!(
        vhost.queue_type(&topology::group_queue(&group)).as_deref(),
        Some("quorum")
    );

    // The quorum work queue dead-letters (at least once) into the classic DLQ.
    dead_letter_group_task(&channel, &group).await;
    eventually("the dead letter", || async {
        (queue_state(&channel, &dlq).await.0 == 1).then_some(())
    })
    .await;
    // Read and handed back many times: no delivery is counted.
    for _ in 0..50 {
        let message = channel
            .basic_get(dlq.as_str().into(), BasicGetOptions { no_ack: false })
            .await
            .expect("basic.get")
            .expect("the dead letter");
        let headers = message.delivery.properties.headers().clone();
        assert!(
            headers
                .as_ref()
                .is_some_and(|h| !h.inner().contains_key("x-delivery-count")),
            "{headers:?}"
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
    }
    // The last one is handed back asynchronously: wait for it, it must not be dropped.
    eventually("the dead letter back in the DLQ", || async {
        (queue_state(&channel, &dlq).await.0 == 1).then_some(())
    })
    .await;
    let _ = connection.close(200, "done".into()).await;
}

#[tokio::test]
async fn an_existing_quorum_dead_letter_queue_is_used_as_it_is() {
    let vhost = fresh_vhost();
    let group = format!("dlq-{}", Uuid::now_v7().simple());
    let dlq = topology::dead_letter_queue(&topology::group_queue(&group));
    let (connection, channel) = vhost.channel().await;
    let mut quorum = FieldTable::default();
    quorum.insert(
        "x-queue-type".into(),
        AMQPValue::LongString(LongString::from("quorum")),
    );
    channel
        .queue_declare(
            dlq.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            quorum,
        )
        .await
        .expect("declare the old quorum DLQ");
    topology::declare_group(&connection, &channel, &group)
        .await
        .expect("declare the group over an old quorum DLQ");
    assert!(channel.status().connected());
    assert_eq!(vhost.queue_type(&dlq).as_deref(), Some("quorum"));
    dead_letter_group_task(&channel, &group).await;
    eventually("the dead letter in the old DLQ", || async {
        (queue_state(&channel, &dlq).await.0 == 1).then_some(())
    })
    .await;
    let _ = connection.close(200, "done".into()).await;
}
