//! Fixtures for the broker tests on top of the shared test kit (vhosts, confirmed
//! publishing, waits, queue state): reading replies as the scheduler would, running
//! consumers in the background, and a recording handler.

use std::{future::Future, pin::Pin, time::Duration};

use chime_consumer::{
    ConsumerBuilder, Handler, HandlerResult, TaskContext, TaskMessage,
    protocol::{PresenceMessage, Reply, topology},
    testing::TaskBuilder,
};
pub use chime_testkit::{
    TestVhost,
    publish::publish,
    queue::{dead_letter_one, queue_state},
    wait::{WAIT, eventually, receive},
};
use futures_util::StreamExt;
use lapin::{Connection, options::BasicConsumeOptions, types::FieldTable};
use serde_json::json;
use tokio::{
    sync::{mpsc, oneshot},
    task::JoinHandle,
};

/// A virtual host for one test (deleted on drop); with `TEST_LOG` set, the library's logs
/// go to the test's stderr.
pub fn fresh_vhost() -> TestVhost {
    if std::env::var_os("TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("debug")
            .try_init();
    }
    TestVhost::new()
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
    pub async fn open(vhost: &TestVhost) -> Self {
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

pub fn task(app: &str, job: &str, group: &str) -> TaskMessage {
    TaskBuilder::new(job)
        .app(app)
        .group(group)
        .payload(json!({"n": 1}))
        .build()
}
