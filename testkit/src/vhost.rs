//! A RabbitMQ virtual host per test — RabbitMQ's equivalent of a database per test — made
//! with `rabbitmqctl` and deleted on drop; plus helpers to look at and poke queues, and to
//! simulate an outage by cutting the vhost's connections.

use std::process::Command;

use lapin::{
    Channel, Connection, ConnectionProperties,
    options::{BasicGetOptions, ConfirmSelectOptions},
};

use crate::{publish, queue, wait};

/// The broker's host and port (`CHIME_TEST_AMQP_ADDR`, default `127.0.0.1:5672`).
fn broker_addr() -> String {
    std::env::var("CHIME_TEST_AMQP_ADDR").unwrap_or_else(|_| "127.0.0.1:5672".into())
}

/// Runs `rabbitmqctl` (or `CHIME_RABBITMQCTL`, e.g. `sudo rabbitmqctl`).
fn rabbitmqctl(args: &[&str]) -> Result<(), String> {
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

/// A virtual host that exists for one test, with `guest` allowed everything.
#[derive(Debug)]
pub struct TestVhost {
    name: String,
}

impl TestVhost {
    /// Creates a new vhost. Panics with instructions when RabbitMQ is not reachable.
    pub fn new() -> Self {
        let name = format!("chime-test-{}", uuid::Uuid::now_v7().simple());
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

    /// The vhost's AMQP URL for user guest.
    pub fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@{}/{}", broker_addr(), self.name)
    }

    /// Takes `guest`'s access to the vhost away and cuts its connections: to clients the
    /// broker is gone until [`TestVhost::restore_access`].
    pub fn cut_access(&self) {
        rabbitmqctl(&["clear_permissions", "-p", &self.name, "guest"]).expect("clear permissions");
        self.close_connections();
    }

    /// Gives `guest` its access back.
    pub fn restore_access(&self) {
        rabbitmqctl(&[
            "set_permissions",
            "-p",
            &self.name,
            "guest",
            ".*",
            ".*",
            ".*",
        ])
        .expect("set permissions");
    }

    /// Force-closes every client connection to this vhost (and only this vhost), as a
    /// broker restart or network cut would; returns how many were closed.
    pub fn close_connections(&self) -> usize {
        let listing = rabbitmqctl_output(&["list_connections", "-q", "pid", "vhost"])
            .expect("list connections");
        let mut closed = 0;
        for line in listing.lines() {
            let mut fields = line.split('\t');
            if let (Some(pid), Some(vhost)) = (fields.next(), fields.next())
                && vhost.trim() == self.name
                && rabbitmqctl(&[
                    "close_connection",
                    pid.trim(),
                    "chime test: simulated outage",
                ])
                .is_ok()
            {
                closed += 1;
            }
        }
        closed
    }

    /// A new connection to the vhost.
    pub async fn connect(&self) -> Connection {
        Connection::connect(&self.amqp_url(), ConnectionProperties::default())
            .await
            .expect("connect to the test vhost")
    }

    /// A channel with publisher confirms.
    pub async fn channel(&self) -> (Connection, Channel) {
        let connection = self.connect().await;
        let channel = connection.create_channel().await.expect("open a channel");
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm mode");
        (connection, channel)
    }

    /// Messages ready in `queue` and consumers attached to it (the queue must exist).
    pub async fn queue_state(&self, queue: &str) -> (u32, u32) {
        let (connection, channel) = self.channel().await;
        let state = queue::queue_state(&channel, queue).await;
        let _ = connection.close(200, "done".into()).await;
        state
    }

    /// Publishes `body` to `exchange` with `routing_key` and waits for the confirm; panics
    /// unless it reached a queue.
    pub async fn publish(&self, exchange: &str, routing_key: &str, body: &[u8]) {
        let (connection, channel) = self.channel().await;
        assert!(
            publish::publish(&channel, exchange, routing_key, body).await,
            "publish was not routed"
        );
        let _ = connection.close(200, "done".into()).await;
    }

    /// The type RabbitMQ reports for `queue` (`classic`, `quorum`, ...), if it exists.
    pub fn queue_type(&self, queue: &str) -> Option<String> {
        let listing = rabbitmqctl_output(&[
            "list_queues",
            "-q",
            "--no-table-headers",
            "-p",
            &self.name,
            "name",
            "type",
        ])
        .expect("rabbitmqctl list_queues");
        listing.lines().find_map(|line| {
            let (name, kind) = line.split_once('\t')?;
            (name == queue).then(|| kind.trim().to_string())
        })
    }

    /// `queue`'s messages ready and delivered but unacknowledged, as the broker counts
    /// them; panics if the queue does not exist.
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

    /// Waits until `queue` exists and has a consumer. Each probe uses its own channel: a
    /// passive declare of a missing queue closes the channel it ran on.
    pub async fn wait_for_consumer(&self, queue: &str) {
        let connection = self.connect().await;
        wait::eventually(&format!("a consumer on {queue}"), || async {
            let channel = connection.create_channel().await.expect("open a channel");
            let declared = queue::declare_passive(&channel, queue).await.ok()?;
            let _ = channel.close(200, "probe done".into()).await;
            (declared.consumer_count() > 0).then_some(())
        })
        .await;
        let _ = connection.close(200, "done".into()).await;
    }

    /// Takes one message from `queue` (acknowledged), if any.
    pub async fn get(&self, queue: &str) -> Option<Vec<u8>> {
        let (connection, channel) = self.channel().await;
        let message = channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic.get");
        let _ = connection.close(200, "done".into()).await;
        message.map(|m| m.delivery.data)
    }
}

/// A RabbitMQ user for one test (users are broker-wide; permissions are per vhost),
/// deleted on drop.
#[derive(Debug)]
pub struct TestUser {
    name: String,
    password: String,
    vhost: Option<String>,
}

impl TestUser {
    /// Creates a user with a unique name starting with `prefix` and no permissions.
    pub fn new(prefix: &str) -> Self {
        let name = format!("{prefix}-{}", uuid::Uuid::now_v7().simple());
        // A v7 id carries 74 random bits: enough for a throwaway test password.
        let password = uuid::Uuid::now_v7().simple().to_string();
        rabbitmqctl(&["add_user", &name, &password]).expect("add a test user");
        Self {
            name,
            password,
            vhost: None,
        }
    }

    /// Allows the user `configure`, `write` and `read` (regexes on resource names) on
    /// `vhost`, where [`TestUser::amqp_url`] then connects.
    pub fn grant(&mut self, vhost: &TestVhost, configure: &str, write: &str, read: &str) {
        rabbitmqctl(&[
            "set_permissions",
            "-p",
            vhost.name(),
            &self.name,
            configure,
            write,
            read,
        ])
        .expect("set the test user's permissions");
        self.vhost = Some(vhost.name().to_string());
    }

    /// Allows the user to publish and bind on `exchange` of `vhost` only with routing keys
    /// matching `write` and `read` (RabbitMQ topic permissions).
    pub fn grant_topic(&self, vhost: &TestVhost, exchange: &str, write: &str, read: &str) {
        rabbitmqctl(&[
            "set_topic_permissions",
            "-p",
            vhost.name(),
            &self.name,
            exchange,
            write,
            read,
        ])
        .expect("set the test user's topic permissions");
    }

    /// The user's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The AMQP URL of the vhost last granted, for this user.
    pub fn amqp_url(&self) -> String {
        format!(
            "amqp://{}:{}@{}/{}",
            self.name,
            self.password,
            broker_addr(),
            self.vhost.as_deref().unwrap_or("%2f")
        )
    }

    /// A connection as this user, and a channel with publisher confirms.
    pub async fn channel(&self) -> (Connection, Channel) {
        let connection = Connection::connect(&self.amqp_url(), ConnectionProperties::default())
            .await
            .expect("connect as the test user");
        let channel = connection.create_channel().await.expect("open a channel");
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm mode");
        (connection, channel)
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = rabbitmqctl(&["delete_user", &self.name]);
    }
}

impl Default for TestVhost {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TestVhost {
    fn drop(&mut self) {
        let _ = rabbitmqctl(&["delete_vhost", &self.name]);
    }
}
