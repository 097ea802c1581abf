//! Chime's RabbitMQ names and routes, as pure functions of the job and task fields: every
//! exchange and queue name, the routing keys tasks and replies are published with, where
//! a task goes by delivery mode, and the rules a name must follow. No I/O: the scheduler's
//! API checks and both sides' declarations ([`super::declare`](mod@super::declare)) derive
//! every name here.

use crate::protocol::{DeliveryMode, TaskMessage};

/// Most bytes of an AMQP short string: a queue name, exchange name, routing or binding key.
pub const MAX_SHORT_STRING: usize = 255;

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
/// Stream of cancel notices ([`CancelMessage`](crate::protocol::CancelMessage)): chimed
/// declares it and publishes to it through the default exchange; every consumer instance
/// reads it from its first retained entry (see [`cancel_notices_arguments`](super::cancel_notices_arguments)).
pub const CANCEL_NOTICES: &str = "chime.cancels";
/// Longest group, app, job, zone, instance or observer name accepted alone; names joined
/// into one broker name also share its [`MAX_SHORT_STRING`] bytes (see [`check_job_topology`](super::check_job_topology)).
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

/// The durable queue of observer `name` (see [`declare_observer`](super::declare_observer)).
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

/// Whether `pattern` is a usable topic pattern over `<app>.<job>`: dot-separated words,
/// each a name, `*` (one word) or `#` (any number of words).
pub fn is_valid_topic_pattern(pattern: &str) -> bool {
    !pattern.is_empty()
        && pattern.len() <= MAX_SHORT_STRING
        && pattern
            .split('.')
            .all(|word| word == "*" || word == "#" || is_valid_name(word))
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
}
