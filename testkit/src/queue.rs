//! Looking at queues through a channel: passive declares and dead-lettering one message
//! the way the broker does for a consumer's reject.

use std::time::Duration;

use lapin::{
    Channel,
    options::{BasicGetOptions, BasicRejectOptions, QueueDeclareOptions},
    types::FieldTable,
};

use crate::{publish, wait};

/// `queue` as the broker has it. A missing queue closes the channel this ran on.
pub async fn declare_passive(channel: &Channel, queue: &str) -> lapin::Result<lapin::Queue> {
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
}

/// Messages ready in `queue` and its consumers (the queue must exist).
pub async fn queue_state(channel: &Channel, queue: &str) -> (u32, u32) {
    let declared = declare_passive(channel, queue)
        .await
        .unwrap_or_else(|e| panic!("queue {queue} should exist: {e}"));
    (declared.message_count(), declared.consumer_count())
}

/// Dead-letters one message: publishes `body` straight into the work queue `queue`
/// (through the default exchange), takes it and rejects it without requeue, so the broker
/// moves it to the queue's dead-letter queue. Waits up to `timeout` for the message.
pub async fn dead_letter_one(channel: &Channel, queue: &str, body: &[u8], timeout: Duration) {
    assert!(
        publish::publish(channel, "", queue, body).await,
        "the work queue {queue} exists"
    );
    let message = wait::until("the message in the work queue", timeout, || async {
        channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: false })
            .await
            .expect("basic.get")
    })
    .await;
    message
        .delivery
        .acker
        .reject(BasicRejectOptions { requeue: false })
        .await
        .expect("reject");
}
