//! Publishing with a publisher confirm, as the scheduler does: persistent, `mandatory`,
//! and judged by the confirm. A positive confirm does not mean "queued" — RabbitMQ also
//! confirms unroutable messages, handing them back — so the helpers report whether the
//! message reached a queue and panic on a broker nack.

use lapin::{
    BasicProperties, Channel, PublisherConfirm, options::BasicPublishOptions, types::FieldTable,
};

/// Starts a persistent, `mandatory` publish and returns its pending confirm (to pipeline
/// many publishes before awaiting any, see [`confirmed`]). `channel` must be in confirm
/// mode, as [`crate::TestVhost::channel`] makes it.
pub async fn start(
    channel: &Channel,
    exchange: &str,
    routing_key: &str,
    body: &[u8],
    headers: Option<FieldTable>,
) -> PublisherConfirm {
    let mut properties = BasicProperties::default().with_delivery_mode(2);
    if let Some(headers) = headers {
        properties = properties.with_headers(headers);
    }
    channel
        .basic_publish(
            exchange.into(),
            routing_key.into(),
            BasicPublishOptions {
                mandatory: true,
                ..BasicPublishOptions::default()
            },
            body,
            properties,
        )
        .await
        .expect("publish")
}

/// Awaits a confirm from [`start`]: panics on a nack, returns whether the message was
/// routed to a queue (an unroutable one comes back with the ack).
pub async fn confirmed(confirm: PublisherConfirm) -> bool {
    let confirm = confirm.await.expect("confirm");
    assert!(confirm.is_ack(), "broker nacked the publish");
    confirm.take_message().is_none()
}

/// Publishes `body` persistently with `mandatory` set, waits for the confirm and returns
/// whether it reached a queue.
pub async fn publish(channel: &Channel, exchange: &str, routing_key: &str, body: &[u8]) -> bool {
    confirmed(start(channel, exchange, routing_key, body, None).await).await
}

/// [`publish`] with AMQP headers.
pub async fn publish_with_headers(
    channel: &Channel,
    exchange: &str,
    routing_key: &str,
    body: &[u8],
    headers: FieldTable,
) -> bool {
    confirmed(start(channel, exchange, routing_key, body, Some(headers)).await).await
}
