//! The declarations consumers and observers make: their own queues, and the shared part
//! of the topology as a user that may not configure it.
//!
//! `chimed`'s RabbitMQ user declares and owns the exchanges, the reply queue and every
//! group's queues (it declares a group's when a job targets the group). In a vhost locked
//! down per app (`deploy/rabbitmq/permissions.sh`, `docs/security.md`) an app's user may
//! configure only its own broadcast and observer queues: a configure right on a shared
//! name would let it delete that exchange or queue for every app. Its declarations of
//! shared resources are then refused with 403 `ACCESS_REFUSED`, which closes the channel.
//!
//! So consumers and observers declare shared resources through [`declare_or_find`]: on a
//! channel of its own, and when refused, passive declarations (which need no permission)
//! check that the resources exist, and the caller goes on using them. Where RabbitMQ
//! grants everything (a single-tenant vhost) nothing changes: the declaration succeeds.

use lapin::{
    Channel, Connection,
    options::{QueueBindOptions, QueueDeclareOptions},
    types::FieldTable,
};
use tracing::{debug, warn};

use super::{
    arguments::instance_queue_arguments,
    declare::{
        Resource, declare_dead_letter_queue, declare_exchanges, declare_group, declare_replies,
        declare_work_queue, declare_zone, exists, is_access_refused,
    },
    limits::short_string,
    names::{
        BROADCAST_EXCHANGE, DEAD_LETTER_EXCHANGE, REPLY_EXCHANGE, REPLY_QUEUE, TASK_EXCHANGE,
        TOPIC_EXCHANGE, dead_letter_queue, group_queue, instance_queue, observer_queue, zone_queue,
    },
};

/// A shared part of the topology a consumer or observer relies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shared<'a> {
    /// The exchanges.
    Exchanges,
    /// The exchanges and the reply queue (where replies are routed).
    Replies,
    /// The exchanges, group `.0`'s work queue and its dead-letter queue.
    Group(&'a str),
    /// The exchanges, zone `zone`'s work queue of `group` and the group's dead-letter queue.
    Zone {
        /// The consumer group.
        group: &'a str,
        /// The zone.
        zone: &'a str,
    },
    /// The exchanges and group `.0`'s dead-letter queue (what a broadcast queue of the
    /// group dead-letters into).
    GroupDeadLetters(&'a str),
}

impl Shared<'_> {
    /// The queues that must exist for this part to be usable.
    fn queues(self) -> Vec<String> {
        match self {
            Shared::Exchanges => Vec::new(),
            Shared::Replies => vec![REPLY_QUEUE.to_string()],
            Shared::Group(group) => {
                let queue = group_queue(group);
                vec![dead_letter_queue(&queue), queue]
            }
            Shared::Zone { group, zone } => vec![
                dead_letter_queue(&group_queue(group)),
                zone_queue(group, zone),
            ],
            Shared::GroupDeadLetters(group) => vec![dead_letter_queue(&group_queue(group))],
        }
    }
}

/// Every exchange of the topology.
const EXCHANGES: [&str; 5] = [
    TASK_EXCHANGE,
    REPLY_EXCHANGE,
    DEAD_LETTER_EXCHANGE,
    BROADCAST_EXCHANGE,
    TOPIC_EXCHANGE,
];

/// Declares `shared` on a channel of its own; when the broker refuses this user the
/// declaration, checks that every exchange and queue of `shared` exists and uses them as
/// they are. Fails with the refusal when one is missing (it appears once `chimed` has
/// declared it: a group's queues when a job targets the group), logged at WARN naming it.
pub async fn declare_or_find(
    connection: &Connection,
    shared: Shared<'_>,
) -> Result<(), lapin::Error> {
    let channel = connection.create_channel().await?;
    let declared = match shared {
        Shared::Exchanges => declare_exchanges(&channel).await,
        Shared::Replies => declare_replies(connection, &channel).await,
        Shared::Group(group) => declare_group(connection, &channel, group).await,
        Shared::Zone { group, zone } => declare_zone(connection, &channel, group, zone).await,
        Shared::GroupDeadLetters(group) => match declare_exchanges(&channel).await {
            Ok(()) => {
                declare_dead_letter_queue(
                    connection,
                    &channel,
                    &dead_letter_queue(&group_queue(group)),
                )
                .await
            }
            Err(error) => Err(error),
        },
    };
    match declared {
        Ok(()) => {
            let _ = channel.close(200, "declared".into()).await;
            Ok(())
        }
        Err(refused) if is_access_refused(&refused) => {
            for exchange in EXCHANGES {
                if !exists(connection, Resource::Exchange, exchange).await? {
                    warn!(
                        exchange,
                        "exchange missing and this RabbitMQ user may not declare it; chimed declares it at start-up"
                    );
                    return Err(refused);
                }
            }
            for queue in shared.queues() {
                if !exists(connection, Resource::Queue, &queue).await? {
                    warn!(%queue, "queue missing and this RabbitMQ user may not declare it; chimed declares a group's queues when a job targets the group");
                    return Err(refused);
                }
            }
            debug!(
                ?shared,
                "using the shared topology chimed declared (this user may not configure it)"
            );
            Ok(())
        }
        Err(error) => {
            let _ = channel.close(200, "failed".into()).await;
            Err(error)
        }
    }
}

/// Declares instance `instance`'s broadcast queue of group `group`: exclusive to this
/// connection (RabbitMQ deletes it when the instance goes away, so fires published
/// meanwhile are not kept for it) and bound to [`BROADCAST_EXCHANGE`] with the group.
/// Declares (or finds, see [`declare_or_find`]) the exchanges and the group's dead-letter
/// queue first. Returns the queue name.
pub async fn declare_instance_queue(
    connection: &Connection,
    channel: &Channel,
    group: &str,
    instance: &str,
) -> Result<String, lapin::Error> {
    declare_or_find(connection, Shared::GroupDeadLetters(group)).await?;
    let queue = instance_queue(group, instance);
    channel
        .queue_declare(
            short_string(&queue)?,
            QueueDeclareOptions {
                exclusive: true,
                auto_delete: true,
                ..QueueDeclareOptions::default()
            },
            instance_queue_arguments(group),
        )
        .await?;
    channel
        .queue_bind(
            short_string(&queue)?,
            BROADCAST_EXCHANGE.into(),
            short_string(group)?,
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok(queue)
}

/// Declares observer `name`'s durable queue (with its own dead-letter queue) and binds it
/// to [`TOPIC_EXCHANGE`] with each of `patterns` (topic patterns over `<app>.<job>`).
/// Copies wait in it while the observer is offline. Declares (or finds, see
/// [`declare_or_find`]) the exchanges first. Returns the queue name.
pub async fn declare_observer(
    connection: &Connection,
    channel: &Channel,
    name: &str,
    patterns: &[String],
) -> Result<String, lapin::Error> {
    declare_or_find(connection, Shared::Exchanges).await?;
    let queue = observer_queue(name);
    let mut patterns = patterns.iter();
    let Some(first) = patterns.next() else {
        return Ok(queue);
    };
    declare_work_queue(connection, channel, &queue, TOPIC_EXCHANGE, first).await?;
    for pattern in patterns {
        channel
            .queue_bind(
                short_string(&queue)?,
                TOPIC_EXCHANGE.into(),
                short_string(pattern)?,
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
    }
    Ok(queue)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_part_names_the_queues_it_needs() {
        assert_eq!(Shared::Exchanges.queues(), Vec::<String>::new());
        assert_eq!(Shared::Replies.queues(), vec!["chime.replies"]);
        assert_eq!(
            Shared::Group("orders").queues(),
            vec!["chime.group.orders.dlq", "chime.group.orders"]
        );
        assert_eq!(
            Shared::Zone {
                group: "orders",
                zone: "eu"
            }
            .queues(),
            vec!["chime.group.orders.dlq", "chime.group.orders.zone.eu"]
        );
        assert_eq!(
            Shared::GroupDeadLetters("orders").queues(),
            vec!["chime.group.orders.dlq"]
        );
    }
}
