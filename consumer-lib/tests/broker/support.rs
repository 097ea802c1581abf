//! Fixtures for the broker tests: a virtual host per test, publishing, reading replies as
//! the scheduler would, running consumers in the background, and polling queue state.

use std::{future::Future, pin::Pin, process::Command, time::Duration};

use chime_consumer::{
    ConsumerBuilder, Handler, HandlerResult, TaskContext, TaskMessage,
    protocol::{PresenceMessage, Reply, topology},
    testing::TaskBuilder,
};
use futures_util::StreamExt;
use lapin::{
    BasicProperties, Channel, Connection, ConnectionProperties,
    options::{
        BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
    },
    types::FieldTable,
};
use serde_json::json;
use tokio::{
    sync::{mpsc, oneshot},
    task::JoinHandle,
};

/// How long any one condition may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------

/// A virtual host for one test, deleted on drop.
pub struct Vhost {
    name: String,
}

impl Vhost {
    pub fn new() -> Self {
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

    /// The vhost's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn amqp_url(&self) -> String {
        let addr =
            std::env::var("CHIME_TEST_AMQP_ADDR").unwrap_or_else(|_| "127.0.0.1:5672".into());
        format!("amqp://guest:guest@{addr}/{}", self.name)
    }

    /// A connection and a channel with publisher confirms.
    pub async fn channel(&self) -> (Connection, Channel) {
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

impl Vhost {
    /// `queue`'s messages ready and delivered but unacknowledged, as the broker counts
    /// them.
    pub fn ready_and_unacked(&self, queue: &str) -> (u64, u64) {
        let listing = rabbitmqctl_output(&[
            "list_queues",
            "-q",
            "--no-table-headers",
            "-p",
            &self.name,
            "name",
            "messages_ready",
            "messages_unacknowledged",
        ])
        .expect("list queues");
        listing
            .lines()
            .find_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                match fields.as_slice() {
                    [name, ready, unacked] if *name == queue => {
                        Some((ready.parse().ok()?, unacked.parse().ok()?))
                    }
                    _ => None,
                }
            })
            .unwrap_or_else(|| panic!("queue {queue} not in {listing:?}"))
    }
}

impl Drop for Vhost {
    fn drop(&mut self) {
        let _ = rabbitmqctl(&["delete_vhost", &self.name]);
    }
}

pub fn rabbitmqctl(args: &[&str]) -> Result<(), String> {
    rabbitmqctl_output(args).map(|_| ())
}

/// Runs `rabbitmqctl` (or `CHIME_RABBITMQCTL`) and returns its standard output.
pub fn rabbitmqctl_output(args: &[&str]) -> Result<String, String> {
    let command = std::env::var("CHIME_RABBITMQCTL").unwrap_or_else(|_| "rabbitmqctl".into());
    let mut words = command.split_whitespace();
    let program = words.next().expect("a rabbitmqctl command");
    let output = Command::new(program)
        .args(words)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {command}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
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
pub async fn publish(channel: &Channel, exchange: &str, routing_key: &str, body: &[u8]) -> bool {
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
pub struct Replies {
    _connection: Connection,
    consumer: lapin::Consumer,
    pub seen: Vec<Reply>,
    /// How many replies each message carried, in order.
    pub per_message: Vec<usize>,
}

impl Replies {
    pub async fn open(vhost: &Vhost) -> Self {
        let (connection, channel) = vhost.channel().await;
        topology::declare_replies(&connection, &channel)
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
    pub async fn wait_for(&mut self, what: &str, check: impl Fn(&[Reply]) -> bool) {
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
    pub async fn presence_of(&mut self, instance: &str) -> PresenceMessage {
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
pub struct Running {
    stop: oneshot::Sender<()>,
    handle: JoinHandle<Result<(), chime_consumer::ConsumerError>>,
}

impl Running {
    pub fn spawn<F, R>(run: R) -> Self
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

    pub fn consumer(builder: ConsumerBuilder) -> Self {
        let consumer = builder
            .drain_timeout(Duration::from_secs(2))
            .build()
            .expect("valid consumer");
        Self::spawn(|shutdown| consumer.run_until(shutdown))
    }

    pub async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(WAIT, self.handle)
            .await
            .expect("stops within the wait")
            .expect("run task did not panic")
            .expect("run ends cleanly");
    }
}

/// A handler that sends every context it runs to `seen` and returns its idempotency key.
pub fn recording(seen: mpsc::UnboundedSender<TaskContext>) -> impl Handler {
    move |ctx: TaskContext| {
        let seen = seen.clone();
        async move {
            let key = ctx.idempotency_key();
            let _ = seen.send(ctx);
            HandlerResult::Ok(Some(json!({"key": key})))
        }
    }
}

pub async fn receive<T>(what: &str, rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("timed out after {WAIT:?} waiting for {what}"))
        .expect("sender alive")
}

pub fn task(app: &str, job: &str, group: &str) -> TaskMessage {
    TaskBuilder::new(job)
        .app(app)
        .group(group)
        .payload(json!({"n": 1}))
        .build()
}

/// Polls `attempt` until it returns something.
pub async fn eventually<T, F, Fut>(what: &str, mut attempt: F) -> T
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

/// `queue` as the broker has it. A missing queue closes the channel this ran on.
async fn declare_passive(channel: &Channel, queue: &str) -> lapin::Result<lapin::Queue> {
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

/// Waits until `queue` exists and has a consumer. Each probe uses its own channel: a
/// passive declare of a missing queue closes the channel it ran on.
pub async fn wait_for_consumer(vhost: &Vhost, queue: &str) {
    let (connection, _) = vhost.channel().await;
    eventually(&format!("a consumer on {queue}"), || async {
        let channel = connection.create_channel().await.expect("open a channel");
        let declared = declare_passive(&channel, queue).await.ok()?;
        let _ = channel.close(200, "probe done".into()).await;
        (declared.consumer_count() > 0).then_some(())
    })
    .await;
}
