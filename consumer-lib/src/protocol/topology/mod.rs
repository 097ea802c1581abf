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
//! cancel:     chimed --[default exchange]--> chime.cancels (stream) --> every consumer
//!             instance, read from its first retained entry on each connect
//! ```
//!
//! The module is split by what each part does: [`names`](mod@names) (names, routing keys,
//! routes and name rules: pure), [`arguments`](mod@arguments) (queue arguments: pure data),
//! [`limits`](mod@limits) (the 255-byte limits on joined names) and
//! [`declare`](mod@declare) (the declarations: with [`participant`](mod@participant), the only I/O;
//! `participant` holds what consumers and observers declare, and how they use the shared
//! topology in a vhost where their user may not configure it). Everything is re-exported
//! here, so callers name `topology::X` whatever file `X` lives in.
//!
//! Dead-letter queues are created classic and used as they are when they exist (see
//! [`declare_dead_letter_queue`]). Every dead letter of a group — from its work queue,
//! its zone queues or its instances' broadcast queues — lands in the one
//! `chime.group.<group>.dlq`. `docs/routing.md` draws each delivery mode.

pub mod arguments;
pub mod declare;
pub mod limits;
pub mod names;
pub mod participant;

pub use arguments::{
    CANCEL_NOTICE_MAX_AGE, CANCEL_NOTICE_MAX_BYTES, DELIVERY_LIMIT, cancel_notices_arguments,
    dead_letter_notices_arguments, dead_letter_queue_arguments, instance_queue_arguments,
    work_queue_arguments, zone_queue_arguments,
};
pub use declare::{
    declare_cancel_notices, declare_dead_letter_notices, declare_dead_letter_queue,
    declare_exchanges, declare_group, declare_replies, declare_task_destination, declare_zone,
    has_cancel_notices, is_access_refused, is_not_found,
};
pub use limits::{
    NameError, NameField, check_group, check_instance, check_job_topology, check_observer,
    check_task, check_topic_key, check_zone, short_string,
};
pub use names::{
    BROADCAST_EXCHANGE, CANCEL_NOTICES, DEAD_LETTER_EXCHANGE, DEAD_LETTER_NOTICES, MAX_NAME_LEN,
    MAX_SHORT_STRING, REPLY_EXCHANGE, REPLY_QUEUE, REPLY_ROUTING_KEY, TASK_EXCHANGE,
    TOPIC_EXCHANGE, dead_letter_queue, group_of_queue, group_queue, instance_queue,
    is_dead_letter_queue, is_valid_instance, is_valid_name, is_valid_topic_pattern, observer_queue,
    origin_queue, queue_route, task_is_mandatory, task_queue, task_route, topic_routing_key,
    zone_queue, zone_routing_key,
};
pub use participant::{Shared, declare_instance_queue, declare_observer, declare_or_find};
