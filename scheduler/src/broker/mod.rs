//! Connections to RabbitMQ: connect with backoff (`chimed` outlives broker outages), the
//! best-effort queue declaration the API does when a job is created or updated, and a
//! confirmed publisher for dead letters and replays ([`publisher`]).

pub mod publisher;

pub use publisher::{ConfirmedPublisher, PublishError};

use std::time::Duration;

use lapin::{Channel, Connection, ConnectionProperties};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use chime_consumer::{backoff::Backoff, protocol::topology};

use crate::telemetry;

/// Opens a connection named `chimed/<component>` (shown in RabbitMQ's connection list),
/// in plaintext for `amqp://` and over TLS for `amqps://` (the consumer library's
/// [`chime_consumer::connect`], so both sides read a URL the same way).
pub async fn connect(url: &str, component: &str) -> Result<Connection, lapin::Error> {
    let properties =
        ConnectionProperties::default().with_connection_name(format!("chimed/{component}").into());
    chime_consumer::connect::connect(url, properties).await
}

/// Whether an operation failed because the broker refuses it (a declaration whose
/// arguments differ from the existing queue's, no permission) or a name cannot be sent
/// (over 255 bytes), rather than because the connection failed: trying again will not
/// help.
pub fn is_refusal(error: &lapin::Error) -> bool {
    use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
    match error.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => matches!(
            amqp.kind(),
            AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED | AMQPSoftError::ACCESSREFUSED)
        ),
        lapin::ErrorKind::IOError(io) => io.kind() == std::io::ErrorKind::InvalidInput,
        _ => false,
    }
}

/// Connects, retrying with backoff until it succeeds or `cancel` fires (then None).
pub async fn connect_with_backoff(
    url: &str,
    component: &'static str,
    cancel: &CancellationToken,
) -> Option<Connection> {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        let attempt = tokio::select! {
            result = connect(url, component) => result,
            () = cancel.cancelled() => return None,
        };
        match attempt {
            Ok(connection) => {
                info!(component, "connected to rabbitmq");
                metrics::counter!(telemetry::BROKER_CONNECTS, "component" => component)
                    .increment(1);
                return Some(connection);
            }
            Err(error) => {
                let delay = backoff.next_delay();
                warn!(component, %error, attempt = backoff.attempts(),
                    retry_in_ms = delay.as_millis() as u64, "cannot reach rabbitmq; retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = cancel.cancelled() => return None,
                }
            }
        }
    }
}

/// Declares groups' work queues on behalf of the API, over one lazily (re)opened channel.
/// Failure is not fatal to the API call: the dispatcher declares a group again before its
/// first publish on every connection.
pub struct GroupDeclarer {
    url: String,
    channel: Mutex<Slot>,
}

#[derive(Default)]
struct Slot {
    open: Option<(Connection, Channel)>,
    /// When the broker last failed us: within [`RETRY_AFTER`] of it, declarations fail at
    /// once instead of each API call waiting out a timeout during an outage.
    failed_at: Option<std::time::Instant>,
}

/// How long the API waits for the broker when declaring.
const DECLARE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long after a failure the declarer tries the broker again.
const RETRY_AFTER: Duration = Duration::from_secs(5);

impl GroupDeclarer {
    /// A declarer for the broker at `url`; connects on first use.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            channel: Mutex::new(Slot::default()),
        }
    }

    /// Declares `group`'s work queue and dead-letter queue, and the work queues of
    /// `zones` (a zone job's own zone list), so tasks wait for consumers that start later.
    pub async fn declare(&self, group: &str, zones: &[String]) -> Result<(), String> {
        let mut slot = self.channel.lock().await;
        if slot.failed_at.is_some_and(|t| t.elapsed() < RETRY_AFTER) {
            return Err("rabbitmq failed moments ago; not trying again yet".into());
        }
        let result = tokio::time::timeout(DECLARE_TIMEOUT, async {
            if !slot
                .open
                .as_ref()
                .is_some_and(|(_, ch)| ch.status().connected())
            {
                let connection = connect(&self.url, "api").await?;
                let channel = connection.create_channel().await?;
                slot.open = Some((connection, channel));
            }
            let (connection, channel) = slot.open.as_ref().expect("channel just opened");
            topology::declare_group(connection, channel, group).await?;
            for zone in zones {
                topology::declare_zone(connection, channel, group, zone).await?;
            }
            // chimed learns from these which tasks the broker dead-letters.
            topology::declare_dead_letter_notices(channel, Some(group)).await
        })
        .await;
        let error = match result {
            Ok(Ok(())) => {
                slot.failed_at = None;
                return Ok(());
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("rabbitmq did not answer within {DECLARE_TIMEOUT:?}"),
        };
        slot.open = None;
        slot.failed_at = Some(std::time::Instant::now());
        Err(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::protocol::{AMQPError, AMQPErrorKind, AMQPHardError, AMQPSoftError};

    fn protocol(kind: AMQPErrorKind) -> lapin::Error {
        lapin::ErrorKind::ProtocolError(AMQPError::new(kind, "refused".into())).into()
    }

    #[test]
    fn refusals_are_told_from_failures() {
        assert!(is_refusal(&protocol(AMQPErrorKind::Soft(
            AMQPSoftError::PRECONDITIONFAILED
        ))));
        assert!(is_refusal(&protocol(AMQPErrorKind::Soft(
            AMQPSoftError::ACCESSREFUSED
        ))));
        assert!(!is_refusal(&protocol(AMQPErrorKind::Soft(
            AMQPSoftError::NOTFOUND
        ))));
        assert!(!is_refusal(&protocol(AMQPErrorKind::Hard(
            AMQPHardError::CONNECTIONFORCED
        ))));
        let too_long = std::io::Error::new(std::io::ErrorKind::InvalidInput, "too long");
        assert!(is_refusal(&too_long.into()));
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(!is_refusal(&reset.into()));
    }
}
