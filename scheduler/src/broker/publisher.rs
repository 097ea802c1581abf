//! A confirmed publisher for the odd message outside the dispatcher's hot path: dead
//! letters and DLQ replays. One lazily (re)opened connection and confirm channel; each
//! publish is mandatory and persistent, and succeeds only on a clean broker confirm.

use std::time::Duration;

use lapin::{
    BasicProperties, Channel, Confirmation, Connection,
    options::{BasicPublishOptions, ConfirmSelectOptions},
};
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};

use chime_consumer::protocol::topology;

/// How long a confirm may take.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a publish did not go through.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The broker is unreachable or the channel failed.
    #[error("rabbitmq error: {0}")]
    Amqp(#[from] lapin::Error),
    /// No queue took the message.
    #[error("unroutable: no queue is bound for exchange {exchange:?} routing key {routing_key:?}")]
    Unroutable {
        /// Exchange published to.
        exchange: String,
        /// Routing key used.
        routing_key: String,
    },
    /// The broker refused it.
    #[error("the broker nacked the message")]
    Nacked,
    /// No confirm came in time.
    #[error("no confirm within {CONFIRM_TIMEOUT:?}")]
    Timeout,
}

/// Publishes single messages with confirms. Cheap to share; publishes are serialised.
pub struct ConfirmedPublisher {
    url: String,
    component: &'static str,
    open: Mutex<Option<(Connection, Channel)>>,
}

impl ConfirmedPublisher {
    /// A publisher to the broker at `url`, named `chimed/<component>`; connects on first use.
    pub fn new(url: impl Into<String>, component: &'static str) -> Self {
        Self {
            url: url.into(),
            component,
            open: Mutex::new(None),
        }
    }

    /// The broker's URL (other components of the same service connect to it too).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The open channel, (re)connecting if needed.
    pub async fn channel(&self) -> Result<Channel, lapin::Error> {
        Ok(self.open().await?.1.clone())
    }

    /// The open connection and channel, (re)connecting if needed; held until dropped.
    async fn open(&self) -> Result<MappedMutexGuard<'_, (Connection, Channel)>, lapin::Error> {
        let mut open = self.open.lock().await;
        let pair = match open.take() {
            Some(pair) if pair.1.status().connected() => pair,
            _ => {
                let connection = super::connect(&self.url, self.component).await?;
                let channel = connection.create_channel().await?;
                channel
                    .confirm_select(ConfirmSelectOptions::default())
                    .await?;
                (connection, channel)
            }
        };
        Ok(MutexGuard::map(open, |slot| slot.insert(pair)))
    }

    /// Declares `group`'s queues (work queue, dead-letter queue, and the scheduler's
    /// dead-letter notices binding), so a dead letter or replay for it is routable.
    pub async fn declare_group(&self, group: &str) -> Result<(), lapin::Error> {
        let open = self.open().await?;
        let (connection, channel) = &*open;
        topology::declare_group(connection, channel, group).await?;
        topology::declare_dead_letter_notices(channel, Some(group)).await
    }

    /// Declares what `task` is published into (see [`topology::declare_task_destination`])
    /// and its group's dead-letter notices binding.
    pub async fn declare_destination(
        &self,
        task: &chime_consumer::protocol::TaskMessage,
    ) -> Result<(), lapin::Error> {
        let open = self.open().await?;
        let (connection, channel) = &*open;
        topology::declare_task_destination(connection, channel, task).await?;
        topology::declare_dead_letter_notices(channel, Some(&task.group)).await
    }

    /// Declares the cancel notices stream (see [`topology::declare_cancel_notices`]).
    pub async fn declare_cancel_notices(&self) -> Result<(), lapin::Error> {
        let open = self.open().await?;
        topology::declare_cancel_notices(&open.1).await
    }

    /// Publishes `body` to `exchange` with `routing_key`, waiting for a clean confirm.
    pub async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
        properties: BasicProperties,
    ) -> Result<(), PublishError> {
        let exchange_name = topology::short_string(exchange)?;
        let routing_key_name = topology::short_string(routing_key)?;
        let channel = self.channel().await?;
        let properties = properties.with_delivery_mode(2);
        let confirm = channel
            .basic_publish(
                exchange_name,
                routing_key_name,
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                body,
                properties,
            )
            .await?;
        match tokio::time::timeout(CONFIRM_TIMEOUT, confirm).await {
            Err(_) => Err(PublishError::Timeout),
            Ok(Err(error)) => Err(error.into()),
            Ok(Ok(Confirmation::Ack(None) | Confirmation::NotRequested)) => Ok(()),
            Ok(Ok(Confirmation::Ack(Some(_)))) => Err(PublishError::Unroutable {
                exchange: exchange.to_string(),
                routing_key: routing_key.to_string(),
            }),
            Ok(Ok(Confirmation::Nack(_))) => Err(PublishError::Nacked),
        }
    }

    /// Closes the connection, if open.
    pub async fn close(&self) {
        if let Some((connection, _)) = self.open.lock().await.take() {
            let _ = connection.close(200, "chimed stopping".into()).await;
        }
    }
}
