//! # chime-testkit
//!
//! What every Chime crate's tests need, written once: a fresh database per test
//! ([`TestDatabase`]), a RabbitMQ virtual host per test ([`TestVhost`]), publishing with a
//! publisher confirm ([`publish`]), waiting on a condition with a deadline ([`wait`]),
//! job specs for the HTTP API ([`JobSpec`]) and a throwaway certificate authority for TLS
//! tests ([`certs::TestCa`]).
//!
//! Dev-only: crates list it under `[dev-dependencies]` (the e2e harness `chime-tests` is
//! itself test code). It depends on no `chime-*` crate, so any of them can use it without
//! a dependency cycle; job fixtures are therefore plain JSON, as the API takes them.
//!
//! Environment: `CHIME_TEST_POSTGRES_URL` (PostgreSQL server that test databases are
//! created on), `CHIME_TEST_AMQP_ADDR` (broker host:port, default `127.0.0.1:5672`) and
//! `CHIME_RABBITMQCTL` (the `rabbitmqctl` command, e.g. `sudo rabbitmqctl`). Helpers panic
//! with instructions when a service is missing: these are tests, they should fail loudly.

pub mod certs;
pub mod database;
pub mod jobs;
pub mod publish;
pub mod queue;
pub mod vhost;
pub mod wait;

pub use database::TestDatabase;
pub use jobs::JobSpec;
pub use vhost::TestVhost;
