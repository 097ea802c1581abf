//! The HTTP API in process: every route and every error code it answers, through the real
//! router and application services over a real SQLite file store (and the real RabbitMQ
//! where a route needs the broker), plus one test over a real TCP listener.
//!
//! Test names say the route and the case.

mod access;
mod audit;
mod backfill;
mod batch;
mod cancel;
mod cluster_health;
mod consumers;
mod dlq;
mod edges;
mod failure_pause;
mod job_search;
mod jobs;
mod jobs_service;
mod listener;
mod openapi;
mod preview;
mod quotas;
mod run_search;
mod run_stats;
mod runs;
mod support;
mod window;
