//! Delivery modes: a zone consumer takes its zone's tasks, every broadcast subscriber runs
//! a broadcast once, an observer gets copies matching its patterns and reports nothing,
//! and every instance announces its presence.

use std::{collections::BTreeSet, time::Duration};

use chime_consumer::{
    Consumer, DeliveryMode, Observer, TaskMessage,
    protocol::{Reply, TaskOutcome, broadcast_idempotency_key, topology},
};
use lapin::options::BasicGetOptions;
use serde_json::json;
use tokio::sync::mpsc;

use crate::support::*;

#[tokio::test]
async fn a_zone_consumer_takes_its_zone_and_its_group_work() {
    let vhost = fresh_vhost();
    let mut replies = Replies::open(&vhost).await;
    let (seen, mut ran) = mpsc::unbounded_channel();
    let consumer = Running::consumer(
        Consumer::builder(vhost.amqp_url(), "web")
            .instance("web-dc1")
            .zone("dc1")
            .fallback_handler(recording(seen)),
    );
    // Presence goes out once every queue is declared and consumed.
    replies.presence_of("web-dc1").await;
    let (_connection, channel) = vhost.channel().await;

    let mut zoned = task("shop", "flush-cache", "web");
    zoned.mode = DeliveryMode::Zone;
    zoned.zone = Some("dc1".into());
    assert!(
        publish(
            &channel,
            topology::TASK_EXCHANGE,
            "web.dc1",
            &zoned.to_vec()
        )
        .await
    );
    let ctx = receive("the zone task", &mut ran).await;
    assert_eq!(ctx.task_id(), zoned.task_id);
    assert_eq!(ctx.mode(), DeliveryMode::Zone);
    assert_eq!(ctx.zone(), Some("dc1"));
    assert_eq!(ctx.idempotency_key(), zoned.task_id);

    let plain = task("shop", "close-orders", "web");
    assert!(publish(&channel, topology::TASK_EXCHANGE, "web", &plain.to_vec()).await);
    let ctx = receive("the group task", &mut ran).await;
    assert_eq!(ctx.task_id(), plain.task_id);
    assert_eq!(ctx.zone(), None);

    replies
        .wait_for("results of both tasks", |seen| {
            let done: BTreeSet<_> = seen
                .iter()
                .filter_map(|reply| match reply {
                    Reply::Result(result) if result.consumer == "web-dc1" => Some(result.task_id),
                    _ => None,
                })
                .collect();
            done.contains(&zoned.task_id) && done.contains(&plain.task_id)
        })
        .await;
    consumer.stop().await;
}

#[tokio::test]
async fn every_broadcast_subscriber_runs_a_broadcast_once() {
    let vhost = fresh_vhost();
    let mut replies = Replies::open(&vhost).await;
    let (seen, mut ran) = mpsc::unbounded_channel();
    let consumers: Vec<_> = ["b-1", "b-2"]
        .into_iter()
        .map(|instance| {
            Running::consumer(
                Consumer::builder(vhost.amqp_url(), "web")
                    .instance(instance)
                    .broadcast()
                    .fallback_handler(recording(seen.clone())),
            )
        })
        .collect();
    for instance in ["b-1", "b-2"] {
        assert!(replies.presence_of(instance).await.broadcast);
    }

    let mut fire = task("shop", "reload-config", "web");
    fire.mode = DeliveryMode::Broadcast;
    let (_connection, channel) = vhost.channel().await;
    assert!(
        publish(
            &channel,
            topology::BROADCAST_EXCHANGE,
            "web",
            &fire.to_vec()
        )
        .await
    );

    let mut runs = [
        receive("the first run", &mut ran).await,
        receive("the second run", &mut ran).await,
    ];
    runs.sort_by(|a, b| a.consumer().cmp(b.consumer()));
    for (ctx, instance) in runs.iter().zip(["b-1", "b-2"]) {
        assert_eq!(ctx.consumer(), instance);
        assert_eq!(ctx.task_id(), fire.task_id);
        assert_eq!(ctx.mode(), DeliveryMode::Broadcast);
        assert_eq!(
            ctx.idempotency_key(),
            broadcast_idempotency_key(fire.task_id, instance)
        );
    }

    let replied = |seen: &[Reply], kind: &str| -> BTreeSet<String> {
        seen.iter()
            .filter_map(|reply| match (reply, kind) {
                (Reply::Ack(ack), "ack") if ack.task_id == fire.task_id => {
                    Some(ack.consumer.clone())
                }
                (Reply::Result(result), "result") if result.task_id == fire.task_id => {
                    Some(result.consumer.clone())
                }
                _ => None,
            })
            .collect()
    };
    let both: BTreeSet<String> = ["b-1".to_string(), "b-2".to_string()].into();
    replies
        .wait_for("acks and results from both instances", |seen| {
            replied(seen, "ack") == both && replied(seen, "result") == both
        })
        .await;
    for reply in &replies.seen {
        if let Reply::Result(result) = reply
            && result.task_id == fire.task_id
        {
            let key = broadcast_idempotency_key(fire.task_id, &result.consumer);
            assert_eq!(
                result.outcome,
                TaskOutcome::Succeeded {
                    output: Some(json!({"key": key}))
                }
            );
        }
    }
    for consumer in consumers {
        consumer.stop().await;
    }
    assert!(
        ran.try_recv().is_err(),
        "a broadcast ran more than once per instance"
    );
}

#[tokio::test]
async fn an_observer_registers_and_gets_matching_copies() {
    let vhost = fresh_vhost();
    let (connection, channel) = vhost.channel().await;
    topology::declare_replies(&connection, &channel)
        .await
        .expect("declare replies");
    let (seen, mut observed) = mpsc::unbounded_channel();
    let observer = Observer::builder(vhost.amqp_url(), "audit")
        .subscribe("shop.*")
        .handler(move |task: TaskMessage| {
            let seen = seen.clone();
            async move {
                let _ = seen.send(task);
                Ok(())
            }
        })
        .drain_timeout(Duration::from_secs(2))
        .build()
        .expect("valid observer");
    let queue = observer.queue();
    let observer = Running::spawn(|shutdown| observer.run_until(shutdown));
    vhost.wait_for_consumer(&queue).await;

    let other = task("other", "refresh", "web");
    let key = topology::topic_routing_key(&other.app, &other.job);
    assert!(
        !publish(&channel, topology::TOPIC_EXCHANGE, &key, &other.to_vec()).await,
        "other.refresh matches no observer pattern, so nothing may receive it"
    );
    let shop = task("shop", "refresh", "web");
    let key = topology::topic_routing_key(&shop.app, &shop.job);
    assert!(publish(&channel, topology::TOPIC_EXCHANGE, &key, &shop.to_vec()).await);
    let copy = receive("the shop.refresh copy", &mut observed).await;
    assert_eq!(copy, shop);

    // A body that is not a task is dead-lettered to the observer's own DLQ.
    assert!(
        publish(
            &channel,
            topology::TOPIC_EXCHANGE,
            "shop.garbage",
            b"not a task"
        )
        .await
    );
    let dlq = topology::dead_letter_queue(&queue);
    let dead = eventually("the malformed copy in the observer's DLQ", || async {
        channel
            .basic_get(dlq.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic.get")
    })
    .await;
    assert_eq!(dead.delivery.data, b"not a task");

    observer.stop().await;
    assert!(observed.try_recv().is_err(), "only the shop.refresh copy");
    let (ready, _) = queue_state(&channel, &queue).await;
    assert_eq!(ready, 0, "the copy was acknowledged");
    // Its only message to the scheduler is its registration: no ack, result or presence.
    let (replies, _) = queue_state(&channel, topology::REPLY_QUEUE).await;
    assert_eq!(replies, 1, "observers publish only their registration");
    let registration = channel
        .basic_get(
            topology::REPLY_QUEUE.into(),
            BasicGetOptions { no_ack: true },
        )
        .await
        .expect("basic.get")
        .expect("the registration");
    let Reply::Observe(registration) =
        Reply::from_slice(&registration.delivery.data).expect("a reply")
    else {
        panic!("expected an observer registration")
    };
    assert_eq!(registration.observer, "audit");
    assert_eq!(registration.patterns, ["shop.*"]);
}

#[tokio::test]
async fn presence_carries_zone_and_broadcast() {
    let vhost = fresh_vhost();
    let mut replies = Replies::open(&vhost).await;
    let (seen, _ran) = mpsc::unbounded_channel();
    let subscribed = Running::consumer(
        Consumer::builder(vhost.amqp_url(), "web")
            .instance("p-1")
            .zone("dc2")
            .broadcast()
            .fallback_handler(recording(seen.clone())),
    );
    let plain = Running::consumer(
        Consumer::builder(vhost.amqp_url(), "web")
            .instance("p-2")
            .fallback_handler(recording(seen)),
    );
    let presence = replies.presence_of("p-1").await;
    assert_eq!(presence.group, "web");
    assert_eq!(presence.zone.as_deref(), Some("dc2"));
    assert!(presence.broadcast);
    let presence = replies.presence_of("p-2").await;
    assert_eq!(presence.group, "web");
    assert_eq!(presence.zone, None);
    assert!(!presence.broadcast);
    subscribed.stop().await;
    plain.stop().await;
}

#[tokio::test]
async fn a_busy_consumer_batches_its_replies_and_can_be_told_not_to() {
    const TASKS: usize = 300;
    let vhost = fresh_vhost();
    let mut replies = Replies::open(&vhost).await;
    let (_connection, channel) = vhost.channel().await;
    for (group, batch) in [("batched", true), ("single", false)] {
        let (seen, _ran) = mpsc::unbounded_channel();
        let consumer = Running::consumer(
            Consumer::builder(vhost.amqp_url(), group)
                .instance(group)
                .concurrency(64)
                .prefetch(TASKS as u16)
                .batch_replies(batch)
                .fallback_handler(recording(seen)),
        );
        replies.presence_of(group).await;
        let from = replies.per_message.len();
        let seen_before = replies.seen.len();
        // All published before any confirm is awaited, so replies pile up.
        let tasks: Vec<TaskMessage> = (0..TASKS).map(|_| task("shop", "burst", group)).collect();
        let mut confirms = Vec::new();
        for task in &tasks {
            let confirm = chime_testkit::publish::start(
                &channel,
                topology::TASK_EXCHANGE,
                group,
                &task.to_vec(),
                None,
            )
            .await;
            confirms.push(confirm);
        }
        for confirm in confirms {
            assert!(chime_testkit::publish::confirmed(confirm).await);
        }
        let results_of = |seen: &[Reply]| {
            seen.iter()
                .filter(|r| matches!(r, Reply::Result(r) if r.consumer == group))
                .count()
        };
        replies
            .wait_for(&format!("{TASKS} results from {group}"), |seen| {
                results_of(&seen[seen_before..]) == TASKS
            })
            .await;
        consumer.stop().await;

        let ours = &replies.seen[seen_before..];
        for task in &tasks {
            let of_task: Vec<&str> = ours
                .iter()
                .filter(|r| r.task_id() == Some(task.task_id))
                .map(|r| match r {
                    Reply::Ack(_) => "ack",
                    Reply::Result(_) => "result",
                    _ => "other",
                })
                .collect();
            assert_eq!(of_task, ["ack", "result"], "task {}", task.task_id);
        }
        let largest = replies.per_message[from..].iter().max().copied();
        if batch {
            assert!(
                largest > Some(1),
                "{TASKS} tasks at once should share messages: {:?}",
                &replies.per_message[from..]
            );
        } else {
            assert_eq!(
                largest,
                Some(1),
                "one reply per message when batching is off"
            );
        }
    }
}
