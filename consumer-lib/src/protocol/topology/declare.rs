//! Declaring Chime's topology on a broker: the exchanges, each kind of queue with its
//! dead-letter queue and bindings, and the check for a queue that already exists. The only
//! part of the topology that does I/O; names come from [`super::names`](mod@super::names)
//! and arguments from [`super::arguments`](mod@super::arguments).

use lapin::{
    Channel, Connection, ExchangeKind,
    options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions},
    protocol::{AMQPErrorKind, AMQPSoftError},
    types::FieldTable,
};

use super::{
    arguments::{
        cancel_notices_arguments, dead_letter_notices_arguments, dead_letter_queue_arguments,
        work_queue_arguments, zone_queue_arguments,
    },
    limits::short_string,
    names::{
        BROADCAST_EXCHANGE, CANCEL_NOTICES, DEAD_LETTER_EXCHANGE, DEAD_LETTER_NOTICES,
        REPLY_EXCHANGE, REPLY_QUEUE, REPLY_ROUTING_KEY, TASK_EXCHANGE, TOPIC_EXCHANGE,
        dead_letter_queue, group_queue, zone_queue, zone_routing_key,
    },
};
use crate::protocol::{DeliveryMode, TaskMessage};

/// Declares what `task` is published into: its work queue (a group's or a zone's, with
/// the group's dead-letter queue), or for a broadcast the exchanges and the group's
/// dead-letter queue its instances' queues dead-letter into (declared by the scheduler,
/// whose user may bind it to [`DEAD_LETTER_EXCHANGE`]; see
/// [`declare_or_find`](super::declare_or_find)). Idempotent.
pub async fn declare_task_destination(
    connection: &Connection,
    channel: &Channel,
    task: &TaskMessage,
) -> Result<(), lapin::Error> {
    match (task.mode, task.zone.as_deref()) {
        (DeliveryMode::Broadcast, _) => {
            declare_exchanges(channel).await?;
            declare_dead_letter_queue(
                connection,
                channel,
                &dead_letter_queue(&group_queue(&task.group)),
            )
            .await
        }
        (DeliveryMode::Zone, Some(zone)) => {
            declare_zone(connection, channel, &task.group, zone).await
        }
        _ => declare_group(connection, channel, &task.group).await,
    }
}

/// Declares the exchanges every participant needs. Idempotent.
pub async fn declare_exchanges(channel: &Channel) -> Result<(), lapin::Error> {
    for (exchange, kind) in [
        (TASK_EXCHANGE, ExchangeKind::Direct),
        (REPLY_EXCHANGE, ExchangeKind::Direct),
        (DEAD_LETTER_EXCHANGE, ExchangeKind::Direct),
        (BROADCAST_EXCHANGE, ExchangeKind::Direct),
        (TOPIC_EXCHANGE, ExchangeKind::Topic),
    ] {
        channel
            .exchange_declare(
                exchange.into(),
                kind,
                ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await?;
    }
    Ok(())
}

/// Declares group `group`'s work queue bound to [`TASK_EXCHANGE`], and its dead-letter
/// queue, so tasks wait in RabbitMQ while every consumer of the group is offline.
/// Declares the exchanges too. Idempotent.
pub async fn declare_group(
    connection: &Connection,
    channel: &Channel,
    group: &str,
) -> Result<(), lapin::Error> {
    declare_exchanges(channel).await?;
    declare_work_queue(
        connection,
        channel,
        &group_queue(group),
        TASK_EXCHANGE,
        group,
    )
    .await
}

/// Declares zone `zone`'s work queue of group `group`, bound to [`TASK_EXCHANGE`] with
/// [`zone_routing_key`], and the group's dead-letter queue it dead-letters into.
/// Declares the exchanges too. Idempotent.
pub async fn declare_zone(
    connection: &Connection,
    channel: &Channel,
    group: &str,
    zone: &str,
) -> Result<(), lapin::Error> {
    declare_exchanges(channel).await?;
    let group_dlq = dead_letter_queue(&group_queue(group));
    declare_dead_letter_queue(connection, channel, &group_dlq).await?;
    let queue = zone_queue(group, zone);
    channel
        .queue_declare(
            short_string(&queue)?,
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            zone_queue_arguments(group),
        )
        .await?;
    channel
        .queue_bind(
            short_string(&queue)?,
            TASK_EXCHANGE.into(),
            short_string(&zone_routing_key(group, zone))?,
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
}

/// Declares the scheduler's [`DEAD_LETTER_NOTICES`] queue and binds it to `group`'s dead
/// letters. Idempotent.
pub async fn declare_dead_letter_notices(
    channel: &Channel,
    group: Option<&str>,
) -> Result<(), lapin::Error> {
    declare_exchanges(channel).await?;
    channel
        .queue_declare(
            DEAD_LETTER_NOTICES.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            dead_letter_notices_arguments(),
        )
        .await?;
    if let Some(group) = group {
        channel
            .queue_bind(
                DEAD_LETTER_NOTICES.into(),
                DEAD_LETTER_EXCHANGE.into(),
                short_string(&dead_letter_queue(&group_queue(group)))?,
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
    }
    Ok(())
}

/// Declares the [`CANCEL_NOTICES`] stream (chimed does, before publishing a notice;
/// consumers only read it). Idempotent.
pub async fn declare_cancel_notices(channel: &Channel) -> Result<(), lapin::Error> {
    channel
        .queue_declare(
            CANCEL_NOTICES.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            cancel_notices_arguments(),
        )
        .await
        .map(drop)
}

/// Whether the [`CANCEL_NOTICES`] stream exists (a chimed that predates cancelling never
/// declares it), asked on a throwaway channel of `connection`.
pub async fn has_cancel_notices(connection: &Connection) -> Result<bool, lapin::Error> {
    exists(connection, Resource::Queue, CANCEL_NOTICES).await
}

/// Declares the reply queue bound to [`REPLY_EXCHANGE`] and its dead-letter queue.
/// Declares the exchanges too. Idempotent.
pub async fn declare_replies(
    connection: &Connection,
    channel: &Channel,
) -> Result<(), lapin::Error> {
    declare_exchanges(channel).await?;
    declare_work_queue(
        connection,
        channel,
        REPLY_QUEUE,
        REPLY_EXCHANGE,
        REPLY_ROUTING_KEY,
    )
    .await
}

pub(super) async fn declare_work_queue(
    connection: &Connection,
    channel: &Channel,
    queue: &str,
    exchange: &str,
    routing_key: &str,
) -> Result<(), lapin::Error> {
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    declare_dead_letter_queue(connection, channel, &dead_letter_queue(queue)).await?;
    channel
        .queue_declare(short_string(queue)?, durable, work_queue_arguments(queue))
        .await?;
    channel
        .queue_bind(
            short_string(queue)?,
            exchange.into(),
            short_string(routing_key)?,
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok(())
}

/// Declares dead-letter queue `dlq` on `channel`, bound to [`DEAD_LETTER_EXCHANGE`] by its
/// own name. A `dlq` that already exists is used as it is, whatever its type (a quorum
/// dead-letter queue made by an older Chime keeps working); only a missing one is created,
/// as a durable classic queue ([`dead_letter_queue_arguments`]). Redeclaring an existing
/// queue with other arguments would close the channel with `PRECONDITION_FAILED`, so the
/// existence check is a passive declare on a throwaway channel of `connection` (a missing
/// queue closes that channel only). Two declarers that both find it missing declare the
/// same arguments. Idempotent.
pub async fn declare_dead_letter_queue(
    connection: &Connection,
    channel: &Channel,
    dlq: &str,
) -> Result<(), lapin::Error> {
    let name = short_string(dlq)?;
    if !exists(connection, Resource::Queue, dlq).await? {
        channel
            .queue_declare(
                name.clone(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                dead_letter_queue_arguments(),
            )
            .await?;
    }
    channel
        .queue_bind(
            name.clone(),
            DEAD_LETTER_EXCHANGE.into(),
            name,
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
}

/// A kind of broker resource, for [`exists`].
#[derive(Debug, Clone, Copy)]
pub(super) enum Resource {
    Exchange,
    Queue,
}

/// Whether `name` exists, asked with a passive declare on a channel of its own (a missing
/// one closes that channel only). Passive declarations need no permission.
pub(super) async fn exists(
    connection: &Connection,
    resource: Resource,
    name: &str,
) -> Result<bool, lapin::Error> {
    let probe = connection.create_channel().await?;
    let answer = match resource {
        Resource::Exchange => {
            probe
                .exchange_declare(
                    short_string(name)?,
                    ExchangeKind::Direct,
                    ExchangeDeclareOptions {
                        passive: true,
                        ..ExchangeDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
        }
        Resource::Queue => probe
            .queue_declare(
                short_string(name)?,
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map(|_| ()),
    };
    match answer {
        Ok(()) => {
            let _ = probe.close(200, "checked".into()).await;
            Ok(true)
        }
        Err(error) if is_not_found(&error) => Ok(false),
        Err(error) => {
            let _ = probe.close(200, "checked".into()).await;
            Err(error)
        }
    }
}

/// Whether the broker refused the operation for lack of permission (403
/// `ACCESS_REFUSED`, which closes the channel).
pub fn is_access_refused(error: &lapin::Error) -> bool {
    match error.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => {
            amqp.kind() == &AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED)
        }
        _ => false,
    }
}

/// Whether the broker answered with 404 NOT_FOUND (it closed the channel), as it answers
/// a passive declare of a missing queue.
pub fn is_not_found(error: &lapin::Error) -> bool {
    match error.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => {
            amqp.kind() == &AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND)
        }
        _ => false,
    }
}
