//! The arguments each of Chime's queues is declared with. Every declarer — the scheduler,
//! each consumer, the Python package — must send exactly these, or RabbitMQ closes the
//! channel with `PRECONDITION_FAILED`; so they are built here, once. Pure data, no I/O.

use lapin::types::{AMQPValue, FieldTable, LongString};

use super::names::{DEAD_LETTER_EXCHANGE, dead_letter_queue, group_queue};

/// How many times RabbitMQ delivers a message from a work queue before dead-lettering it
/// (RabbitMQ 3.10 has no default; a message that crashes every consumer must not loop forever).
pub const DELIVERY_LIMIT: i64 = 10;
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
/// [`declare_dead_letter_queue`](super::declare_dead_letter_queue)).
pub fn dead_letter_queue_arguments() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), long_string("classic"));
    args
}

/// Arguments of the scheduler's [`DEAD_LETTER_NOTICES`](super::DEAD_LETTER_NOTICES) queue: a quorum queue (chimed
/// consumes it and acks each notice; nothing reads it by requeueing).
pub fn dead_letter_notices_arguments() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), long_string("quorum"));
    args
}

/// How long the [`CANCEL_NOTICES`](super::CANCEL_NOTICES) stream keeps a notice: a task
/// that waited in its queue longer than this may run after all once it is delivered.
pub const CANCEL_NOTICE_MAX_AGE: &str = "7D";
/// Most bytes the [`CANCEL_NOTICES`](super::CANCEL_NOTICES) stream keeps (oldest
/// segments go first): 64 MiB, a few hundred thousand notices.
pub const CANCEL_NOTICE_MAX_BYTES: i64 = 64 * 1024 * 1024;

/// Arguments of the [`CANCEL_NOTICES`](super::CANCEL_NOTICES) stream: a stream (every
/// reader gets every notice, from whatever offset it asks for) kept for
/// [`CANCEL_NOTICE_MAX_AGE`], at most [`CANCEL_NOTICE_MAX_BYTES`].
pub fn cancel_notices_arguments() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), long_string("stream"));
    args.insert("x-max-age".into(), long_string(CANCEL_NOTICE_MAX_AGE));
    args.insert(
        "x-max-length-bytes".into(),
        AMQPValue::LongLongInt(CANCEL_NOTICE_MAX_BYTES),
    );
    args.insert(
        "x-stream-max-segment-size-bytes".into(),
        AMQPValue::LongLongInt(4 * 1024 * 1024),
    );
    args
}

fn long_string(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;

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
