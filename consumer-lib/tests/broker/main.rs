//! The consumer library against a real RabbitMQ, each test in a fresh virtual host.
//!
//! Needs `rabbitmqctl` (override with `CHIME_RABBITMQCTL="sudo rabbitmqctl"`) and a broker
//! at `CHIME_TEST_AMQP_ADDR` (default `127.0.0.1:5672`); fails loudly without them. Set
//! `TEST_LOG=1` to see the library's logs.

mod dead_letter_queues;
mod modes;
mod settlement;
mod support;
mod task_user;
