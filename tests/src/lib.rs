//! # chime-tests
//!
//! The end-to-end harness: real `chimed` processes, real consumer processes built on
//! `chime-consumer`, a RabbitMQ virtual host per test and a fresh database per test.
//! Tests read as scenarios: start what they need, act through the HTTP API, and wait on
//! conditions (never on fixed sleeps).
//!
//! Set `TEST_LOG=1` to see the processes' logs on the test's stderr instead of in files.

pub mod api;
pub mod bench;
pub mod binaries;
pub mod browser;
pub mod chimed;
pub mod cluster;
pub mod consumer;
pub mod private_postgres;
pub mod private_rabbitmq;
pub mod raw_http;

pub use chimed::Chimed;
pub use consumer::TestConsumer;
// The database, vhost and wait helpers come from the shared test kit; re-exported because
// the harness's own modules and every scenario use them.
pub use chime_testkit::{JobSpec, TestDatabase, TestVhost, vhost, wait};
