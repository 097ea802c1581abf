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
//!               [chime.dlx] (direct) --> chime.group.<group>.dlq
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
//! ```

use lapin::{
    Channel, ExchangeKind,
    options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions},
    types::{AMQPValue, FieldTable, LongString, ShortString},
};

/// Direct exchange the scheduler publishes tasks to; the routing key is the target group.
pub const TASK_EXCHANGE: &str = "chime.tasks";
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
/// Longest group, app or job name accepted (queue names are at most 255 bytes).
pub const MAX_NAME_LEN: usize = 128;

/// The durable work queue of consumer group `group`.
pub fn group_queue(group: &str) -> String {
    format!("chime.group.{group}")
}

/// The dead-letter queue paired with `queue`; also the routing key its dead letters carry.
pub fn dead_letter_queue(queue: &str) -> String {
    format!("{queue}.dlq")
}

/// Whether `queue` is one of Chime's dead-letter queues (`chime.….dlq`).
pub fn is_dead_letter_queue(queue: &str) -> bool {
    queue.starts_with("chime.")
        && queue.len() > "chime..dlq".len()
        && queue.ends_with(".dlq")
        && queue
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The queue a dead-letter queue belongs to (`chime.group.orders.dlq` → `chime.group.orders`).
pub fn origin_queue(dead_letter_queue: &str) -> Option<&str> {
    dead_letter_queue.strip_suffix(".dlq")
}

/// The group whose work queue is `queue`, if it is a group's work queue.
pub fn group_of_queue(queue: &str) -> Option<&str> {
    queue
        .strip_prefix("chime.group.")
        .filter(|group| is_valid_name(group))
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
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), long_string("quorum"));
    args.insert(
        "x-dead-letter-exchange".into(),
        long_string(DEAD_LETTER_EXCHANGE),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        long_string(&dead_letter_queue(queue)),
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

/// Arguments of a dead-letter queue: a quorum queue with nothing further downstream.
pub fn dead_letter_queue_arguments() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), long_string("quorum"));
    args
}

/// Declares the exchanges every participant needs. Idempotent.
pub async fn declare_exchanges(channel: &Channel) -> Result<(), lapin::Error> {
    for exchange in [TASK_EXCHANGE, REPLY_EXCHANGE, DEAD_LETTER_EXCHANGE] {
        channel
            .exchange_declare(
                exchange.into(),
                ExchangeKind::Direct,
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
pub async fn declare_group(channel: &Channel, group: &str) -> Result<(), lapin::Error> {
    declare_exchanges(channel).await?;
    declare_work_queue(channel, &group_queue(group), TASK_EXCHANGE, group).await
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
            dead_letter_queue_arguments(),
        )
        .await?;
    if let Some(group) = group {
        channel
            .queue_bind(
                DEAD_LETTER_NOTICES.into(),
                DEAD_LETTER_EXCHANGE.into(),
                dead_letter_queue(&group_queue(group)).as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
    }
    Ok(())
}

/// Declares the reply queue bound to [`REPLY_EXCHANGE`] and its dead-letter queue.
/// Declares the exchanges too. Idempotent.
pub async fn declare_replies(channel: &Channel) -> Result<(), lapin::Error> {
    declare_exchanges(channel).await?;
    declare_work_queue(channel, REPLY_QUEUE, REPLY_EXCHANGE, REPLY_ROUTING_KEY).await
}

async fn declare_work_queue(
    channel: &Channel,
    queue: &str,
    exchange: &str,
    routing_key: &str,
) -> Result<(), lapin::Error> {
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let dlq = dead_letter_queue(queue);
    channel
        .queue_declare(dlq.as_str().into(), durable, dead_letter_queue_arguments())
        .await?;
    channel
        .queue_bind(
            dlq.as_str().into(),
            DEAD_LETTER_EXCHANGE.into(),
            dlq.as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    channel
        .queue_declare(queue.into(), durable, work_queue_arguments(queue))
        .await?;
    channel
        .queue_bind(
            queue.into(),
            exchange.into(),
            ShortString::from(routing_key),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok(())
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
        assert_eq!(origin_queue("chime.replies.dlq"), Some("chime.replies"));
        assert_eq!(group_of_queue("chime.group.orders"), Some("orders"));
        assert_eq!(group_of_queue("chime.replies"), None);
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
