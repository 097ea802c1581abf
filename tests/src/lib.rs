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
pub mod chimed;
pub mod cluster;
pub mod consumer;
pub mod raw_http;
pub mod vhost;
pub mod wait;

pub use chime_scheduler::store::testing::TestDatabase;
pub use chimed::Chimed;
pub use consumer::TestConsumer;
pub use vhost::TestVhost;
