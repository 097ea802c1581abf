//! End-to-end scenarios: real chimed processes, real consumers, RabbitMQ and databases.
//! `deploy/local/test.sh` makes sure RabbitMQ and PostgreSQL run; every test gets its own
//! vhost and database.

mod api_fuzz;
mod at_least_once;
mod backfill;
mod bad_input;
mod bench;
mod buffer_one;
mod cancel;
mod cli;
mod consumers;
mod crash;
mod dashboards;
mod delivery;
mod demo;
mod dlq_cli;
mod dlq_peek;
mod dlq_tools;
mod duplicates;
mod failure_pause;
mod http_edges;
mod https;
mod import_cli;
mod long_names;
mod msgauth;
mod no_consumer;
mod outage;
mod quiet_log;
mod replies;
mod restart;
mod routing;
mod secrets;
mod support;
mod tokens;
mod window;
