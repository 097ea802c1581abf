//! Settling deliveries with the broker: a busy consumer acks many deliveries with one
//! `multiple` ack; the acks behind a task that runs long still reach the broker; a
//! malformed task among acked ones is dead-lettered, not swept up by a `multiple` ack; and
//! a drain sends every waiting ack before it closes.

use std::collections::BTreeSet;

use chime_consumer::{Consumer, HandlerResult, TaskContext, protocol::topology};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

use crate::support::*;

/// A fresh group with its work queue declared; returns the group and its queue.
async fn group_with_queue(vhost: &TestVhost) -> (String, String) {
    let group = format!("settle-{}", Uuid::now_v7().simple());
    let (connection, channel) = vhost.channel().await;
    topology::declare_group(&connection, &channel, &group)
        .await
        .expect("declare the group");
    let _ = connection.close(200, "declared".into()).await;
    let queue = topology::group_queue(&group);
    (group, queue)
}

/// Publishes `n` tasks of `job` for `group` and returns their ids.
async fn publish_tasks(vhost: &TestVhost, group: &str, job: &str, n: usize) -> BTreeSet<Uuid> {
    let (connection, channel) = vhost.channel().await;
    let mut ids = BTreeSet::new();
    for _ in 0..n {
        let task = task("shop", job, group);
        assert!(publish(&channel, topology::TASK_EXCHANGE, group, &task.to_vec()).await);
        ids.insert(task.task_id);
    }
    let _ = connection.close(200, "published".into()).await;
    ids
}

/// Receives `n` handler runs and returns their task ids, failing on a task run twice.
async fn receive_runs(n: usize, ran: &mut mpsc::UnboundedReceiver<TaskContext>) -> BTreeSet<Uuid> {
    let mut ids = BTreeSet::new();
    for i in 0..n {
        let ctx = receive(&format!("run {} of {n}", i + 1), ran).await;
        assert!(
            ids.insert(ctx.task_id()),
            "task {} ran twice",
            ctx.task_id()
        );
    }
    ids
}

/// Waits until `queue` holds exactly `ready` ready and `unacked` unacknowledged messages.
async fn wait_for_counts(vhost: &TestVhost, queue: &str, ready: u64, unacked: u64) {
    eventually(
        &format!("{queue} to hold {ready} ready and {unacked} unacked"),
        || async { (vhost.ready_and_unacked(queue) == (ready, unacked)).then_some(()) },
    )
    .await;
}

/// Delivery ack frames counted by the consumer, as (multiple, single).
fn ack_frames(snapshotter: &Snapshotter) -> (u64, u64) {
    let mut frames = (0, 0);
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        if key.name() != "chime_consumer_delivery_acks_total" {
            continue;
        }
        let DebugValue::Counter(count) = value else {
            continue;
        };
        match key
            .labels()
            .find(|l| l.key() == "multiple")
            .map(|l| l.value())
        {
            Some("true") => frames.0 += count,
            Some("false") => frames.1 += count,
            other => panic!("unexpected multiple label {other:?}"),
        }
    }
    frames
}

#[tokio::test]
async fn a_busy_consumer_acks_many_deliveries_with_one_frame() {
    // The test runtime has one thread, so every metric the consumer records lands here.
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let vhost = fresh_vhost();
    let (group, queue) = group_with_queue(&vhost).await;
    let published = publish_tasks(&vhost, &group, "tick", 300).await;

    let (seen, mut ran) = mpsc::unbounded_channel();
    let consumer = Running::consumer(
        Consumer::builder(vhost.amqp_url(), &group)
            .concurrency(32)
            .prefetch(500)
            .fallback_handler(recording(seen)),
    );
    assert_eq!(receive_runs(300, &mut ran).await, published);
    wait_for_counts(&vhost, &queue, 0, 0).await;
    consumer.stop().await;

    let (multiple, single) = ack_frames(&snapshotter);
    assert!(multiple >= 1, "no multiple ack was sent ({single} single)");
    assert!(
        multiple + single < 300,
        "300 deliveries took {multiple} multiple and {single} single ack frames"
    );
    assert!(ran.try_recv().is_err(), "a task ran again after its ack");
}

#[tokio::test]
async fn acks_behind_a_long_task_reach_the_broker_while_it_runs() {
    let vhost = fresh_vhost();
    let (group, queue) = group_with_queue(&vhost).await;
    let (release, released) = watch::channel(false);
    let (seen, mut ran) = mpsc::unbounded_channel::<TaskContext>();
    let handler = move |ctx: TaskContext| {
        let seen = seen.clone();
        let mut released = released.clone();
        async move {
            let hold = ctx.job() == "hold";
            let _ = seen.send(ctx);
            if hold {
                released
                    .wait_for(|go| *go)
                    .await
                    .expect("release sender alive");
            }
            HandlerResult::Ok(None)
        }
    };
    let consumer = Running::consumer(
        Consumer::builder(vhost.amqp_url(), &group)
            .prefetch(100)
            .fallback_handler(handler),
    );

    // The held task takes the channel's lowest delivery tag, so every ack above it is
    // blocked from a multiple ack for as long as it runs.
    let held = publish_tasks(&vhost, &group, "hold", 1).await;
    assert_eq!(receive_runs(1, &mut ran).await, held);
    let quick = publish_tasks(&vhost, &group, "quick", 20).await;
    assert_eq!(receive_runs(20, &mut ran).await, quick);
    wait_for_counts(&vhost, &queue, 0, 1).await;

    release.send(true).expect("handler alive");
    wait_for_counts(&vhost, &queue, 0, 0).await;
    consumer.stop().await;
    assert!(ran.try_recv().is_err(), "a task ran again after its ack");
}

#[tokio::test]
async fn a_malformed_task_among_acked_ones_is_dead_lettered() {
    let vhost = fresh_vhost();
    let (group, queue) = group_with_queue(&vhost).await;
    let before = publish_tasks(&vhost, &group, "tick", 5).await;
    let (connection, channel) = vhost.channel().await;
    assert!(publish(&channel, topology::TASK_EXCHANGE, &group, b"not a task").await);
    let _ = connection.close(200, "published".into()).await;
    let after = publish_tasks(&vhost, &group, "tick", 5).await;

    // Started after publishing, so all eleven arrive together with consecutive tags and
    // the malformed one sits inside what a multiple ack covers.
    let (seen, mut ran) = mpsc::unbounded_channel();
    let consumer = Running::consumer(
        Consumer::builder(vhost.amqp_url(), &group).fallback_handler(recording(seen)),
    );
    let ids = receive_runs(10, &mut ran).await;
    assert_eq!(ids, before.union(&after).copied().collect());
    wait_for_counts(&vhost, &queue, 0, 0).await;
    wait_for_counts(&vhost, &topology::dead_letter_queue(&queue), 1, 0).await;
    consumer.stop().await;
}

#[tokio::test]
async fn a_drain_sends_the_waiting_acks_before_closing() {
    let vhost = fresh_vhost();
    let (group, queue) = group_with_queue(&vhost).await;
    let published = publish_tasks(&vhost, &group, "tick", 50).await;
    let (seen, mut ran) = mpsc::unbounded_channel();
    let consumer = Running::consumer(
        Consumer::builder(vhost.amqp_url(), &group)
            .concurrency(16)
            .fallback_handler(recording(seen.clone())),
    );
    assert_eq!(receive_runs(50, &mut ran).await, published);
    // Stopped while the last acks wait for their batch: the drain must send them.
    consumer.stop().await;

    // A task the drain did not ack goes back to the queue when the channel closes, and a
    // quorum queue delivers returned messages first: the next consumer's first task must
    // be the sentinel published now.
    let sentinel = publish_tasks(&vhost, &group, "sentinel", 1).await;
    let consumer = Running::consumer(
        Consumer::builder(vhost.amqp_url(), &group).fallback_handler(recording(seen)),
    );
    assert_eq!(receive_runs(1, &mut ran).await, sentinel);
    wait_for_counts(&vhost, &queue, 0, 0).await;
    consumer.stop().await;
    assert!(ran.try_recv().is_err(), "a drained task ran again");
}
