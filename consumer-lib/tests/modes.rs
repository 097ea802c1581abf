//! Delivery modes against a real RabbitMQ, each test in a fresh virtual host: a zone
//! consumer takes its zone's tasks, every broadcast subscriber runs a broadcast once, an
//! observer gets copies matching its patterns and reports nothing, and every instance
//! announces its presence.
//!
//! Needs `rabbitmqctl` (override with `CHIME_RABBITMQCTL="sudo rabbitmqctl"`) and a broker
//! at `CHIME_TEST_AMQP_ADDR` (default `127.0.0.1:5672`); fails loudly without them. Set
//! `TEST_LOG=1` to see the library's logs.

use std::{collections::BTreeSet, future::Future, pin::Pin, process::Command, time::Duration};

use chime_consumer::{
    Consumer, ConsumerBuilder, DeliveryMode, Handler, HandlerResult, Observer, TaskContext,
    TaskMessage,
    protocol::{PresenceMessage, Reply, TaskOutcome, broadcast_idempotency_key, topology},
    testing::TaskBuilder,
};
use futures_util::StreamExt;
use lapin::{
    BasicProperties, Channel, Connection, ConnectionProperties,
    options::{
        BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
        QueueDeclareOptions,
    },
    types::FieldTable,
};
use serde_json::json;
use tokio::{
    sync::{mpsc, oneshot},
    task::JoinHandle,
};

/// How long any one condition may take before the test fails.
const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------

/// A virtual host for one test, deleted on drop.
struct Vhost {
    name: String,
}

impl Vhost {
    fn new() -> Self {
        if std::env::var_os("TEST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter("debug")
                .try_init();
        }
        let name = format!("chime-modes-{}", uuid::Uuid::now_v7().simple());
        let created = rabbitmqctl(&["add_vhost", &name]).and_then(|()| {
            rabbitmqctl(&["set_permissions", "-p", &name, "guest", ".*", ".*", ".*"])
        });
        if let Err(error) = created {
            panic!(
                "RabbitMQ is required for this test: {error}. Start it with deploy/local/rabbitmq.sh; \
                 set CHIME_RABBITMQCTL=\"sudo rabbitmqctl\" if rabbitmqctl needs root."
            );
        }
        Self { name }
    }

    fn amqp_url(&self) -> String {
        let addr =
            std::env::var("CHIME_TEST_AMQP_ADDR").unwrap_or_else(|_| "127.0.0.1:5672".into());
        format!("amqp://guest:guest@{addr}/{}", self.name)
    }

    /// A connection and a channel with publisher confirms.
    async fn channel(&self) -> (Connection, Channel) {
        let connection = Connection::connect(&self.amqp_url(), ConnectionProperties::default())
            .await
            .expect("connect to the test vhost");
        let channel = connection.create_channel().await.expect("open a channel");
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm mode");
        (connection, channel)
    }
}

impl Drop for Vhost {
    fn drop(&mut self) {
        let _ = rabbitmqctl(&["delete_vhost", &self.name]);
    }
}

fn rabbitmqctl(args: &[&str]) -> Result<(), String> {
    let command = std::env::var("CHIME_RABBITMQCTL").unwrap_or_else(|_| "rabbitmqctl".into());
    let mut words = command.split_whitespace();
    let program = words.next().expect("a rabbitmqctl command");
    let output = Command::new(program)
        .args(words)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {command}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Publishes `body` persistently with `mandatory` set and returns whether it reached a
/// queue.
async fn publish(channel: &Channel, exchange: &str, routing_key: &str, body: &[u8]) -> bool {
    let confirm = channel
        .basic_publish(
            exchange.into(),
            routing_key.into(),
            BasicPublishOptions {
                mandatory: true,
                ..BasicPublishOptions::default()
            },
            body,
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_ack(), "broker nacked the publish");
    confirm.take_message().is_none()
}

/// Everything published to `chime.replies`, read by the test as the scheduler would.
struct Replies {
    _connection: Connection,
    consumer: lapin::Consumer,
    seen: Vec<Reply>,
    /// How many replies each message carried, in order.
    per_message: Vec<usize>,
}

impl Replies {
    async fn open(vhost: &Vhost) -> Self {
        let (connection, channel) = vhost.channel().await;
        topology::declare_replies(&channel)
            .await
            .expect("declare replies");
        let consumer = channel
            .basic_consume(
                topology::REPLY_QUEUE.into(),
                "test-replies".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("consume replies");
        Self {
            _connection: connection,
            consumer,
            seen: Vec::new(),
            per_message: Vec::new(),
        }
    }

    /// Reads replies until `check` holds for all of them seen so far.
    async fn wait_for(&mut self, what: &str, check: impl Fn(&[Reply]) -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !check(&self.seen) {
            match tokio::time::timeout_at(deadline, self.consumer.next()).await {
                Ok(Some(Ok(delivery))) => {
                    let replies = Reply::many_from_slice(&delivery.data).expect("valid replies");
                    self.per_message.push(replies.len());
                    self.seen.extend(replies);
                }
                Ok(other) => panic!("reply stream failed while waiting for {what}: {other:?}"),
                Err(_) => panic!(
                    "timed out after {WAIT:?} waiting for {what}; replies: {:#?}",
                    self.seen
                ),
            }
        }
    }

    /// Waits for a presence message from `instance` and returns the first one.
    async fn presence_of(&mut self, instance: &str) -> PresenceMessage {
        let find = |seen: &[Reply]| {
            seen.iter().find_map(|reply| match reply {
                Reply::Presence(p) if p.instance == instance => Some(p.clone()),
                _ => None,
            })
        };
        self.wait_for(&format!("presence of {instance}"), |seen| {
            find(seen).is_some()
        })
        .await;
        find(&self.seen).expect("found above")
    }
}

/// A consumer or observer running in the background until stopped.
struct Running {
    stop: oneshot::Sender<()>,
    handle: JoinHandle<Result<(), chime_consumer::ConsumerError>>,
}

impl Running {
    fn spawn<F, R>(run: R) -> Self
    where
        R: FnOnce(Pin<Box<dyn Future<Output = ()> + Send>>) -> F,
        F: Future<Output = Result<(), chime_consumer::ConsumerError>> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = Box::pin(async move {
            let _ = stopped.await;
        });
        Self {
            stop,
            handle: tokio::spawn(run(shutdown)),
        }
    }

    fn consumer(builder: ConsumerBuilder) -> Self {
        let consumer = builder
            .drain_timeout(Duration::from_secs(2))
            .build()
            .expect("valid consumer");
        Self::spawn(|shutdown| consumer.run_until(shutdown))
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(WAIT, self.handle)
            .await
            .expect("stops within the wait")
            .expect("run task did not panic")
            .expect("run ends cleanly");
    }
}

/// A handler that sends every context it runs to `seen` and returns its idempotency key.
fn recording(seen: mpsc::UnboundedSender<TaskContext>) -> impl Handler {
    move |ctx: TaskContext| {
        let seen = seen.clone();
        async move {
            let key = ctx.idempotency_key();
            let _ = seen.send(ctx);
            HandlerResult::Ok(Some(json!({"key": key})))
        }
    }
}

async fn receive<T>(what: &str, rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("timed out after {WAIT:?} waiting for {what}"))
        .expect("sender alive")
}

fn task(app: &str, job: &str, group: &str) -> TaskMessage {
    TaskBuilder::new(job)
        .app(app)
        .group(group)
        .payload(json!({"n": 1}))
        .build()
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_zone_consumer_takes_its_zone_and_its_group_work() {
    let vhost = Vhost::new();
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
    let vhost = Vhost::new();
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
    let vhost = Vhost::new();
    let (_connection, channel) = vhost.channel().await;
    topology::declare_replies(&channel)
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
    wait_for_consumer(&vhost, &queue).await;

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
    let vhost = Vhost::new();
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
    let vhost = Vhost::new();
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
            let confirm = channel
                .basic_publish(
                    topology::TASK_EXCHANGE.into(),
                    group.into(),
                    BasicPublishOptions {
                        mandatory: true,
                        ..BasicPublishOptions::default()
                    },
                    &task.to_vec(),
                    BasicProperties::default().with_delivery_mode(2),
                )
                .await
                .expect("publish");
            confirms.push(confirm);
        }
        for confirm in confirms {
            let confirm = confirm.await.expect("confirm");
            assert!(confirm.is_ack() && confirm.take_message().is_none());
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

/// Polls `attempt` until it returns something.
async fn eventually<T, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(found) = attempt().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Messages ready in `queue` and its consumers (the queue must exist).
async fn queue_state(channel: &Channel, queue: &str) -> (u32, u32) {
    let declared = channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("queue {queue} should exist: {e}"));
    (declared.message_count(), declared.consumer_count())
}

/// Waits until `queue` exists and has a consumer. Each probe uses its own channel: a
/// passive declare of a missing queue closes the channel it ran on.
async fn wait_for_consumer(vhost: &Vhost, queue: &str) {
    let (connection, _) = vhost.channel().await;
    eventually(&format!("a consumer on {queue}"), || async {
        let channel = connection.create_channel().await.expect("open a channel");
        let declared = channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .ok()?;
        let _ = channel.close(200, "probe done".into()).await;
        (declared.consumer_count() > 0).then_some(())
    })
    .await;
}
