//! Dead-lettering the replies the collector refuses, with their reason: a refused reply
//! is published to `chime.replies.dlq` (through the dead-letter exchange) carrying the
//! reason in the `x-chime-reject-reason` header, and counted in
//! `chime_rejected_replies_total{reason}` (`user` for a reply from a user not allowed to
//! send it). A refused item of a batch goes alone, as its
//! own JSON text; the other items are applied. If that publish fails, a whole message is
//! rejected to the broker instead (its dead letter then carries only `x-death`).

use std::time::Duration;

use lapin::{
    BasicProperties,
    message::Delivery,
    options::{BasicAckOptions, BasicRejectOptions},
    types::{AMQPValue, LongString, ShortString},
};
use tracing::{error, warn};

use chime_consumer::protocol::{ProtocolError, dead_letter::REJECT_REASON_HEADER, topology};

use crate::{broker::ConfirmedPublisher, telemetry};

/// The header that keeps a refused reply's `user_id` (the dead letter is published by
/// chimed's own user, which the broker would not let carry another user's id).
pub(super) const PUBLISHED_BY_HEADER: &str = "x-chime-published-by";
/// Longest reason written in the header.
const MAX_REASON: usize = 1024;
/// How long publishing a refused reply may take before the collector falls back.
const PUBLISH_WITHIN: Duration = Duration::from_secs(10);

/// Why a reply was refused: the `reason` label of the rejects counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RejectKind {
    /// Not JSON of a reply's shape (a missing field, a wrong type, nested too deep).
    Malformed,
    /// Another protocol version.
    Version,
    /// Well-formed but invalid (a name that cannot route, a bad consumer id).
    Invalid,
    /// The store refuses it as data.
    StoreRefused,
    /// Its publisher (the validated `user_id`) may not send it (`reply_users`).
    User,
}

impl RejectKind {
    fn as_str(self) -> &'static str {
        match self {
            RejectKind::Malformed => "malformed",
            RejectKind::Version => "version",
            RejectKind::Invalid => "invalid",
            RejectKind::StoreRefused => "store_refused",
            RejectKind::User => "user",
        }
    }

    /// The kind of a parse error.
    pub(super) fn of(error: &ProtocolError) -> Self {
        match error {
            ProtocolError::UnsupportedVersion { .. } => RejectKind::Version,
            ProtocolError::Malformed(_) => RejectKind::Malformed,
        }
    }
}

/// Publishes refused replies to the reply queue's dead-letter queue.
pub(super) struct Rejects {
    publisher: ConfirmedPublisher,
}

impl Rejects {
    /// Rejects through a connection of their own to the broker at `amqp_url`.
    pub(super) fn new(amqp_url: &str) -> Self {
        Self {
            publisher: ConfirmedPublisher::new(amqp_url, "results"),
        }
    }

    /// Dead-letters the whole of `delivery` with `reason`, and settles it.
    pub(super) async fn message(&self, delivery: &Delivery, kind: RejectKind, reason: &str) {
        if self
            .publish(&delivery.data, &delivery.properties, kind, reason)
            .await
        {
            let _ = delivery.ack(BasicAckOptions::default()).await;
        } else {
            let _ = delivery.reject(BasicRejectOptions { requeue: false }).await;
        }
    }

    /// Dead-letters one item of a batch (`body`, its JSON text) with `reason`; false if
    /// it could not be published (it is then only logged and counted).
    pub(super) async fn item(
        &self,
        body: &[u8],
        properties: &BasicProperties,
        kind: RejectKind,
        reason: &str,
    ) -> bool {
        let published = self.publish(body, properties, kind, reason).await;
        if !published {
            error!(reason, item = %String::from_utf8_lossy(&body[..body.len().min(512)]),
                "cannot dead-letter a refused reply item; dropping it");
        }
        published
    }

    /// Counts a refused reply and publishes `body` with the reason header; true once
    /// confirmed.
    async fn publish(
        &self,
        body: &[u8],
        properties: &BasicProperties,
        kind: RejectKind,
        reason: &str,
    ) -> bool {
        if kind != RejectKind::User {
            metrics::counter!(telemetry::MALFORMED, "queue" => topology::REPLY_QUEUE).increment(1);
        }
        metrics::counter!(telemetry::REJECTED_REPLIES, "reason" => kind.as_str()).increment(1);
        let mut headers = properties.headers().clone().unwrap_or_default();
        headers.insert(
            ShortString::from(REJECT_REASON_HEADER),
            AMQPValue::LongString(LongString::from(truncate(reason, MAX_REASON))),
        );
        if let Some(user) = properties.user_id() {
            headers.insert(
                ShortString::from(PUBLISHED_BY_HEADER),
                AMQPValue::LongString(LongString::from(user.as_str())),
            );
        }
        let properties = without_user_id(properties).with_headers(headers);
        let dlq = topology::dead_letter_queue(topology::REPLY_QUEUE);
        let publish =
            self.publisher
                .publish(topology::DEAD_LETTER_EXCHANGE, &dlq, body, properties);
        match tokio::time::timeout(PUBLISH_WITHIN, publish).await {
            Ok(Ok(())) => true,
            Ok(Err(error)) => {
                warn!(%error, "cannot publish a refused reply to its dead-letter queue");
                false
            }
            Err(_) => {
                warn!("timed out publishing a refused reply to its dead-letter queue");
                false
            }
        }
    }

    /// Closes the publishing connection.
    pub(super) async fn close(&self) {
        self.publisher.close().await;
    }
}

/// `properties` without `user_id`: RabbitMQ closes the channel of a publish whose
/// `user_id` is not the connection's user.
fn without_user_id(properties: &BasicProperties) -> BasicProperties {
    let mut copy = BasicProperties::default();
    macro_rules! keep {
        ($($get:ident => $set:ident),* $(,)?) => {
            $(if let Some(value) = properties.$get().clone() {
                copy = copy.$set(value);
            })*
        };
    }
    keep!(
        content_type => with_content_type,
        content_encoding => with_content_encoding,
        headers => with_headers,
        delivery_mode => with_delivery_mode,
        priority => with_priority,
        correlation_id => with_correlation_id,
        reply_to => with_reply_to,
        expiration => with_expiration,
        message_id => with_message_id,
        timestamp => with_timestamp,
        kind => with_type,
        app_id => with_app_id,
        cluster_id => with_cluster_id,
    );
    copy
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_cut_at_a_character_boundary() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("héllo", 3), "hé");
    }

    #[test]
    fn dead_letters_drop_the_user_id_and_keep_the_rest() {
        let properties = BasicProperties::default()
            .with_user_id("app-b".into())
            .with_delivery_mode(2)
            .with_message_id("m1".into())
            .with_type("reply".into());
        let expected = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id("m1".into())
            .with_type("reply".into());
        assert_eq!(without_user_id(&properties), expected);
    }

    #[test]
    fn parse_errors_have_a_kind() {
        let error = chime_consumer::protocol::Reply::from_slice(b"{}").unwrap_err();
        assert_eq!(RejectKind::of(&error), RejectKind::Malformed);
        let version = ProtocolError::UnsupportedVersion { found: 9 };
        assert_eq!(RejectKind::of(&version).as_str(), "version");
    }
}
