//! RabbitMQ topology: every exchange and queue name Chime uses, the arguments each queue is
//! declared with, and the functions that declare them. Both the scheduler and consumers
//! declare through these functions, so their declarations can never disagree (RabbitMQ
//! closes the channel with `PRECONDITION_FAILED` when two declarations of a queue differ).
//!
//! ```text
//! chimed --publish(routing key = group)--> [chime.tasks] (direct)
//!            --> chime.group.<group> (quorum) --> consumers of <group>
//!                   | rejected / delivery limit reached
//!                   v
//!               [chime.dlx] (direct) --> chime.group.<group>.dlq (classic)
//!
//! consumers --publish(routing key = "reply")--> [chime.replies] (direct)
//!            --> chime.replies (quorum) --> chimed result collector
//!                   | malformed replies
//!                   v
//!               [chime.dlx] --> chime.replies.dlq
//!
//! chimed --dead letter (routing key = <group queue>.dlq)--> [chime.dlx]
//!            --> chime.group.<group>.dlq    (kept for operators: inspect, replay, purge)
//!            --> chime.dlx.notices          (chimed marks runs the broker dead-lettered)
//!
//! zone mode:  [chime.tasks] --"<group>.<zone>"--> chime.group.<group>.zone.<zone> (quorum)
//! broadcast:  [chime.broadcast] (direct) --"<group>"--> chime.broadcast.<group>.<instance>
//!             (one exclusive, auto-delete queue per live instance)
//! pub/sub:    [chime.topics] (topic) --"<app>.<job>"--> chime.observe.<name> (observers)
//! ```
//!
//! Dead-letter queues are created classic and used as they are when they exist (see
//! [`declare_dead_letter_queue`]). Every dead letter of a group — from its work queue,
//! its zone queues or its instances' broadcast queues — lands in the one
//! `chime.group.<group>.dlq`. `docs/routing.md` draws each delivery mode.

mod limits;

pub use limits::{
    MAX_SHORT_STRING, NameError, NameField, check_group, check_instance, check_job_topology,
    check_observer, check_task, check_topic_key, check_zone, short_string,
};

use super::{DeliveryMode, TaskMessage};
use lapin::{
    Channel, Connection, ExchangeKind,
    options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions},
    protocol::{AMQPErrorKind, AMQPSoftError},
    types::{AMQPValue, FieldTable, LongString},
};

/// Direct exchange the scheduler publishes tasks to; the routing key is the target group.
pub const TASK_EXCHANGE: &str = "chime.tasks";
/// Direct exchange broadcast tasks are published to; the routing key is the target group,
/// and every instance's broadcast queue is bound with it.
pub const BROADCAST_EXCHANGE: &str = "chime.broadcast";
/// Topic exchange that receives a copy of every task under the routing key
/// `<app>.<job name>` (see [`topic_routing_key`]), for observers' own queues.
pub const TOPIC_EXCHANGE: &str = "chime.topics";
/// Direct exchange consumers publish acks and results to.
pub const REPLY_EXCHANGE: &str = "chime.replies";
/// Routing key of every reply.
pub const REPLY_ROUTING_KEY: &str = "reply";
/// Queue the scheduler's result collector consumes.
pub const REPLY_QUEUE: &str = "chime.replies";
/// Direct exchange that receives dead-lettered messages; each queue's dead letters are
/// routed by the name of its dead-letter queue.
pub const DEAD_LETTER_EXCHANGE: &str = "chime.dlx";
/// Queue the scheduler consumes to learn which tasks RabbitMQ dead-lettered (a task that
/// reached the delivery limit marks its run `dead`). Bound to [`DEAD_LETTER_EXCHANGE`]
/// with each group's dead-letter routing key, so it receives a copy of every dead letter.
pub const DEAD_LETTER_NOTICES: &str = "chime.dlx.notices";
/// How many times RabbitMQ delivers a message from a work queue before dead-lettering it
/// (RabbitMQ 3.10 has no default; a message that crashes every consumer must not loop forever).
pub const DELIVERY_LIMIT: i64 = 10;
/// Longest group, app, job, zone, instance or observer name accepted alone; names joined
/// into one broker name also share its [`MAX_SHORT_STRING`] bytes (see [`check_job_topology`]).
pub const MAX_NAME_LEN: usize = 128;

/// The durable work queue of consumer group `group`.
pub fn group_queue(group: &str) -> String {
    format!("chime.group.{group}")
}

/// The durable work queue of zone `zone` of consumer group `group`.
pub fn zone_queue(group: &str, zone: &str) -> String {
    format!("chime.group.{group}.zone.{zone}")
}

/// The routing key, on [`TASK_EXCHANGE`], of the tasks of zone `zone` of group `group`.
/// Names have no dots, so it never equals a group's routing key.
pub fn zone_routing_key(group: &str, zone: &str) -> String {
    format!("{group}.{zone}")
}

/// The broadcast queue of consumer instance `instance` of group `group`.
pub fn instance_queue(group: &str, instance: &str) -> String {
    format!("chime.broadcast.{group}.{instance}")
}

/// The durable queue of observer `name` (see [`declare_observer`]).
pub fn observer_queue(name: &str) -> String {
    format!("chime.observe.{name}")
}

/// The routing key of a task's copy on [`TOPIC_EXCHANGE`]: `<app>.<job name>`. Bind with
/// `shop.*` for every job of app `shop`, `*.close-orders` for that job in every app, `#`
/// for everything.
pub fn topic_routing_key(app: &str, job: &str) -> String {
    format!("{app}.{job}")
}

/// Where a task is published: its exchange and routing key, by delivery mode.
pub fn task_route(task: &TaskMessage) -> (&'static str, String) {
    match (task.mode, task.zone.as_deref()) {
        (DeliveryMode::Broadcast, _) => (BROADCAST_EXCHANGE, task.group.clone()),
        (DeliveryMode::Zone, Some(zone)) => (TASK_EXCHANGE, zone_routing_key(&task.group, zone)),
        _ => (TASK_EXCHANGE, task.group.clone()),
    }
}

/// Whether a task's publish must reach a queue: a group's or zone's durable work queue
/// always exists once declared, so a return means it was deleted; a broadcast reaching no
/// instance is normal (no live instance to run it).
pub fn task_is_mandatory(task: &TaskMessage) -> bool {
    task.mode != DeliveryMode::Broadcast
}

/// The work queue that holds `task` until a consumer takes it (`None` for broadcasts,
/// which live only in live instances' queues).
pub fn task_queue(task: &TaskMessage) -> Option<String> {
    match (task.mode, task.zone.as_deref()) {
        (DeliveryMode::Broadcast, _) => None,
        (DeliveryMode::Zone, Some(zone)) => Some(zone_queue(&task.group, zone)),
        _ => Some(group_queue(&task.group)),
    }
}

/// Declares what `task` is published into: its work queue (a group's or a zone's, with
/// the group's dead-letter queue), or for a broadcast just the exchanges. Idempotent.
pub async fn declare_task_destination(
    connection: &Connection,
    channel: &Channel,
    task: &TaskMessage,
) -> Result<(), lapin::Error> {
    match (task.mode, task.zone.as_deref()) {
        (DeliveryMode::Broadcast, _) => declare_exchanges(channel).await,
        (DeliveryMode::Zone, Some(zone)) => {
            declare_zone(connection, channel, &task.group, zone).await
        }
        _ => declare_group(connection, channel, &task.group).await,
    }
}

/// Whether `id` may be a consumer instance id: 1 to [`MAX_NAME_LEN`] printable ASCII
/// characters without spaces (it becomes part of a queue name).
pub fn is_valid_instance(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_NAME_LEN && id.bytes().all(|b| b.is_ascii_graphic())
}

/// The dead-letter queue paired with `queue`; also the routing key its dead letters carry.
pub fn dead_letter_queue(queue: &str) -> String {
    format!("{queue}.dlq")
}

/// Whether `queue` is one of Chime's dead-letter queues (`chime.….dlq`, at most
/// [`MAX_SHORT_STRING`] bytes).
pub fn is_dead_letter_queue(queue: &str) -> bool {
    queue.starts_with("chime.")
        && queue.len() > "chime..dlq".len()
        && queue.len() <= MAX_SHORT_STRING
        && queue.ends_with(".dlq")
        && queue
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The queue a dead-letter queue belongs to (`chime.group.orders.dlq` → `chime.group.orders`).
pub fn origin_queue(dead_letter_queue: &str) -> Option<&str> {
    dead_letter_queue.strip_suffix(".dlq")
}

/// The group whose work queue is `queue`, if it is a group's work queue or one of its
/// zone queues.
pub fn group_of_queue(queue: &str) -> Option<&str> {
    let rest = queue.strip_prefix("chime.group.")?;
    let group = match rest.split_once(".zone.") {
        Some((group, zone)) if is_valid_name(zone) => group,
        Some(_) => return None,
        None => rest,
    };
    is_valid_name(group).then_some(group)
}

/// The exchange and routing key that feed work queue `queue` (a group's or a zone's).
pub fn queue_route(queue: &str) -> Option<(&'static str, String)> {
    let rest = queue.strip_prefix("chime.group.")?;
    let group = group_of_queue(queue)?;
    Some(match rest.split_once(".zone.") {
        Some((_, zone)) => (TASK_EXCHANGE, zone_routing_key(group, zone)),
        None => (TASK_EXCHANGE, group.to_string()),
    })
}

/// Whether `name` may be used as a group, app or job name: 1 to [`MAX_NAME_LEN`] ASCII
/// letters, digits, `-` or `_`, starting with a letter or digit. Dots are excluded because
/// they separate words in routing keys.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Arguments of a work queue (a group's queue or the reply queue): a quorum queue that
/// dead-letters at least once to its own dead-letter queue.
pub fn work_queue_arguments(queue: &str) -> FieldTable {
    quorum_arguments(&dead_letter_queue(queue))
}

/// Arguments of zone `zone`'s work queue of group `group`: like the group's work queue,
/// dead-lettering into the group's dead-letter queue.
pub fn zone_queue_arguments(group: &str) -> FieldTable {
    quorum_arguments(&dead_letter_queue(&group_queue(group)))
}

/// Arguments of an instance's broadcast queue: a classic queue (it is exclusive to the
/// instance's connection, which quorum queues cannot be) dead-lettering into the group's
/// dead-letter queue.
pub fn instance_queue_arguments(group: &str) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-dead-letter-exchange".into(),
        long_string(DEAD_LETTER_EXCHANGE),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        long_string(&dead_letter_queue(&group_queue(group))),
    );
    args
}

/// A quorum queue dead-lettering at least once, with routing key `dead_letter_routing_key`,
/// and a delivery limit.
fn quorum_arguments(dead_letter_routing_key: &str) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), long_string("quorum"));
    args.insert(
        "x-dead-letter-exchange".into(),
        long_string(DEAD_LETTER_EXCHANGE),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        long_string(dead_letter_routing_key),
    );
    // At-least-once dead-lettering only takes effect with reject-publish overflow; without
    // it RabbitMQ silently falls back to at-most-once.
    args.insert(
        "x-dead-letter-strategy".into(),
        long_string("at-least-once"),
    );
    args.insert("x-overflow".into(), long_string("reject-publish"));
    args.insert(
        "x-delivery-limit".into(),
        AMQPValue::LongLongInt(DELIVERY_LIMIT),
    );
    args
}

/// Arguments a missing dead-letter queue is created with: a classic queue with nothing
/// further downstream. Classic, not quorum, because operators and chimed read dead letters
/// by getting and requeueing the head message, which a quorum queue counts as a delivery
/// (its `x-delivery-count` grows, and RabbitMQ 4.x drops or dead-letters a message past
/// its default delivery limit of 20); a classic queue counts none. A dead-letter queue
/// that already exists is used with the arguments it has (see
/// [`declare_dead_letter_queue`]).
pub fn dead_letter_queue_arguments() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), long_string("classic"));
    args
}

/// Arguments of the scheduler's [`DEAD_LETTER_NOTICES`] queue: a quorum queue (chimed
/// consumes it and acks each notice; nothing reads it by requeueing).
pub fn dead_letter_notices_arguments() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), long_string("quorum"));
    args
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

/// Declares instance `instance`'s broadcast queue of group `group`: exclusive to this
/// connection (RabbitMQ deletes it when the instance goes away, so fires published
/// meanwhile are not kept for it) and bound to [`BROADCAST_EXCHANGE`] with the group.
/// Declares the exchanges and the group's dead-letter queue too. Returns the queue name.
pub async fn declare_instance_queue(
    connection: &Connection,
    channel: &Channel,
    group: &str,
    instance: &str,
) -> Result<String, lapin::Error> {
    declare_exchanges(channel).await?;
    declare_dead_letter_queue(connection, channel, &dead_letter_queue(&group_queue(group))).await?;
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
/// Copies wait in it while the observer is offline. Returns the queue name.
pub async fn declare_observer(
    connection: &Connection,
    channel: &Channel,
    name: &str,
    patterns: &[String],
) -> Result<String, lapin::Error> {
    declare_exchanges(channel).await?;
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

/// Whether `pattern` is a usable topic pattern over `<app>.<job>`: dot-separated words,
/// each a name, `*` (one word) or `#` (any number of words).
pub fn is_valid_topic_pattern(pattern: &str) -> bool {
    !pattern.is_empty()
        && pattern.len() <= MAX_SHORT_STRING
        && pattern
            .split('.')
            .all(|word| word == "*" || word == "#" || is_valid_name(word))
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

async fn declare_work_queue(
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
    if !queue_exists(connection, dlq).await? {
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

/// Whether `queue` exists, asked with a passive declare on a channel of its own.
async fn queue_exists(connection: &Connection, queue: &str) -> Result<bool, lapin::Error> {
    let probe = connection.create_channel().await?;
    let answer = probe
        .queue_declare(
            short_string(queue)?,
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await;
    match answer {
        Ok(_) => {
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

fn long_string(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(group_queue("orders"), "chime.group.orders");
        assert_eq!(
            dead_letter_queue(&group_queue("orders")),
            "chime.group.orders.dlq"
        );
        assert_eq!(dead_letter_queue(REPLY_QUEUE), "chime.replies.dlq");
    }

    #[test]
    fn dead_letter_queue_names() {
        assert!(is_dead_letter_queue("chime.group.orders.dlq"));
        assert!(is_dead_letter_queue("chime.replies.dlq"));
        assert!(!is_dead_letter_queue("chime.group.orders"));
        assert!(!is_dead_letter_queue("other.dlq"));
        assert!(!is_dead_letter_queue("chime.a b.dlq"));
        let longest = format!("chime.{}.dlq", "x".repeat(MAX_SHORT_STRING - 10));
        assert!(is_dead_letter_queue(&longest));
        assert!(!is_dead_letter_queue(&format!("chime.x{}", &longest[6..])));
        assert_eq!(origin_queue("chime.replies.dlq"), Some("chime.replies"));
        assert_eq!(group_of_queue("chime.group.orders"), Some("orders"));
        assert_eq!(group_of_queue("chime.replies"), None);
        assert_eq!(
            group_of_queue("chime.group.orders.zone.dc1"),
            Some("orders")
        );
        assert_eq!(group_of_queue("chime.group.orders.zone.a.b"), None);
        assert_eq!(
            queue_route("chime.group.orders.zone.dc1"),
            Some((TASK_EXCHANGE, "orders.dc1".to_string()))
        );
        assert_eq!(
            queue_route("chime.group.orders"),
            Some((TASK_EXCHANGE, "orders".to_string()))
        );
    }

    #[test]
    fn routes_by_mode() {
        let mut task: TaskMessage = serde_json::from_value(serde_json::json!({
            "v": 1, "task_id": uuid::Uuid::nil(), "job_id": uuid::Uuid::nil(),
            "app": "shop", "job": "refresh", "group": "web",
            "fire_time": "2026-11-21T10:00:00Z", "shard": 0, "shard_total": 1,
            "attempt": 1, "payload": null, "published_at": "2026-11-21T10:00:00Z"
        }))
        .unwrap();
        assert_eq!(task_route(&task), (TASK_EXCHANGE, "web".to_string()));
        assert_eq!(task_queue(&task).as_deref(), Some("chime.group.web"));
        task.mode = DeliveryMode::Zone;
        task.zone = Some("dc1".into());
        assert_eq!(task_route(&task), (TASK_EXCHANGE, "web.dc1".to_string()));
        assert_eq!(
            task_queue(&task).as_deref(),
            Some("chime.group.web.zone.dc1")
        );
        assert!(task_is_mandatory(&task));
        task.mode = DeliveryMode::Broadcast;
        task.zone = None;
        assert_eq!(task_route(&task), (BROADCAST_EXCHANGE, "web".to_string()));
        assert_eq!(task_queue(&task), None);
        assert!(!task_is_mandatory(&task));
        assert_eq!(topic_routing_key("shop", "refresh"), "shop.refresh");
        assert_eq!(instance_queue("web", "web-1"), "chime.broadcast.web.web-1");
    }

    #[test]
    fn zone_and_instance_queues_dead_letter_into_the_group_dlq() {
        let zone = zone_queue_arguments("web");
        let instance = instance_queue_arguments("web");
        for args in [&zone, &instance] {
            assert_eq!(
                args.inner().get("x-dead-letter-routing-key").cloned(),
                Some(long_string("chime.group.web.dlq"))
            );
        }
        assert_eq!(
            zone.inner().get("x-delivery-limit").cloned(),
            Some(AMQPValue::LongLongInt(DELIVERY_LIMIT))
        );
        assert!(instance.inner().get("x-queue-type").is_none());
    }

    #[test]
    fn topic_patterns_and_instance_ids() {
        for ok in [
            "shop.*",
            "#",
            "*.close-orders",
            "shop.close-orders",
            "shop.#",
        ] {
            assert!(is_valid_topic_pattern(ok), "{ok}");
        }
        for bad in ["", "shop.", "shop..x", "shop.a b", "shop.**"] {
            assert!(!is_valid_topic_pattern(bad), "{bad}");
        }
        assert!(is_valid_instance("ip-10-0-0-1.ec2.internal-42"));
        assert!(!is_valid_instance("a b"));
        assert!(!is_valid_instance(""));
    }

    #[test]
    fn name_rules() {
        assert!(is_valid_name("orders"));
        assert!(is_valid_name("close-expired_orders2"));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("-orders"));
        assert!(!is_valid_name("a.b"));
        assert!(!is_valid_name("a b"));
        assert!(!is_valid_name(&"x".repeat(MAX_NAME_LEN + 1)));
        assert!(is_valid_name(&"x".repeat(MAX_NAME_LEN)));
    }

    #[test]
    fn work_queues_dead_letter_at_least_once_with_a_delivery_limit() {
        let args = work_queue_arguments("chime.group.orders");
        let get = |k: &str| args.inner().get(k).cloned();
        assert_eq!(get("x-queue-type"), Some(long_string("quorum")));
        assert_eq!(
            get("x-dead-letter-routing-key"),
            Some(long_string("chime.group.orders.dlq"))
        );
        assert_eq!(
            get("x-dead-letter-strategy"),
            Some(long_string("at-least-once"))
        );
        assert_eq!(get("x-overflow"), Some(long_string("reject-publish")));
        assert_eq!(
            get("x-delivery-limit"),
            Some(AMQPValue::LongLongInt(DELIVERY_LIMIT))
        );
    }
}
